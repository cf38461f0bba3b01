// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// What a resumable endpoint keeps of each operation it took, in slots
// indexed like its ledgers' (tx_ledger::slot_of, rx_ledger::slot_of): enough
// to report the operation's completion (its context, whether the CQ shows
// it, which counter counts it) and to post it again on a new QP exactly as
// it was posted (the work request, its scatter list, and for inline data the
// bytes themselves: an application may reuse an inject buffer at once).
//
// Pure: it copies work requests, it posts nothing. Everything is allocated
// by the constructor (at fi_enable); keeping an operation allocates
// nothing. The caller serialises calls (the endpoint's resume lock).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace evd::resume {

// One send-queue operation as it is posted, every time it is posted: wr's
// sg_list points at the store's own copy of the scatter list (or of the
// inline bytes), next is null; wr_id and IBV_SEND_SIGNALED are the
// poster's.
struct sq_op {
    struct ibv_send_wr wr;
    void* context;     // what its completion reports
    uint8_t counter;   // the poster's counter kind (opaque here)
    bool hidden;       // its success is not shown in the CQ (fi_inject, selective)
    bool no_ctx;       // it has no context at all (fi_inject*): its error is not shown either
};

// One receive as it is posted: wr's sg_list points at the store's copy.
struct rq_op {
    struct ibv_recv_wr wr;
    uint64_t user_id;  // what its completion reports (the context or the hidden marker)
};

// Why an operation was not kept (the poster refuses it with -FI_EINVAL and
// says so).
enum class keep_error : uint8_t {
    none,
    too_many_sges,   // more scatter entries than the endpoint's iov_limit
    inline_too_big,  // more inline bytes than its inject_size
};
const char* keep_error_text(keep_error e) noexcept;

class op_store {
  public:
    // sq_slots/rq_slots: the ledgers' slots() (powers of two); sq_sge/rq_sge:
    // the endpoint's iov limits; max_inline: its inject size. Throws
    // std::bad_alloc.
    op_store(uint32_t sq_slots, uint32_t sq_sge, uint32_t max_inline, uint32_t rq_slots,
             uint32_t rq_sge);

    // Copies wr (its opcode, flags, immediate data, remote fields and
    // scatter list; for IBV_SEND_INLINE the bytes the list points at, into
    // one entry of the slot's own buffer) into slot; *bytes (when given) is
    // what the list covers, counted while it is copied.
    keep_error keep_send(uint32_t slot, const struct ibv_send_wr& wr, void* context,
                         uint8_t counter, bool hidden, bool no_ctx,
                         uint64_t* bytes = nullptr) noexcept;
    sq_op& send(uint32_t slot) noexcept { return sq_[slot]; }

    keep_error keep_recv(uint32_t slot, const struct ibv_recv_wr& wr, uint64_t user_id) noexcept;
    rq_op& recv(uint32_t slot) noexcept { return rq_[slot]; }

    // Bytes the store holds (what resumption costs a connection in memory).
    size_t bytes() const noexcept { return bytes_; }

  private:
    uint32_t sq_sge_, max_inline_, rq_sge_;
    std::unique_ptr<sq_op[]> sq_;
    std::unique_ptr<struct ibv_sge[]> sq_sges_;  // sq_sge_ per slot
    std::unique_ptr<uint8_t[]> inline_;          // max_inline_ per slot
    std::unique_ptr<rq_op[]> rq_;
    std::unique_ptr<struct ibv_sge[]> rq_sges_;  // rq_sge_ per slot
    size_t bytes_ = 0;
};

}  // namespace evd::resume
