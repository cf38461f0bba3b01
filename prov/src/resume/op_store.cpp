// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The copies a resumable endpoint keeps of its operations (op_store.h).
#include "resume/op_store.h"

#include <algorithm>
#include <cstring>

namespace evd::resume {

const char* keep_error_text(keep_error e) noexcept {
    switch (e) {
    case keep_error::none: return "kept";
    case keep_error::too_many_sges: return "more iovs than the endpoint's iov_limit";
    case keep_error::inline_too_big: return "more inline bytes than the endpoint's inject_size";
    }
    return "unknown";
}

op_store::op_store(uint32_t sq_slots, uint32_t sq_sge, uint32_t max_inline, uint32_t rq_slots,
                   uint32_t rq_sge)
    : sq_sge_(std::max<uint32_t>(sq_sge, 1)),
      max_inline_(max_inline),
      rq_sge_(std::max<uint32_t>(rq_sge, 1)),
      sq_(std::make_unique<sq_op[]>(sq_slots)),
      sq_sges_(std::make_unique<struct ibv_sge[]>(size_t{sq_slots} * sq_sge_)),
      inline_(std::make_unique<uint8_t[]>(size_t{sq_slots} * max_inline_)),
      rq_(std::make_unique<rq_op[]>(rq_slots)),
      rq_sges_(std::make_unique<struct ibv_sge[]>(size_t{rq_slots} * rq_sge_)) {
    bytes_ = size_t{sq_slots} * (sizeof(sq_op) + sq_sge_ * sizeof(struct ibv_sge) + max_inline_) +
             size_t{rq_slots} * (sizeof(rq_op) + rq_sge_ * sizeof(struct ibv_sge));
}

keep_error op_store::keep_send(uint32_t slot, const struct ibv_send_wr& wr, void* context,
                               uint8_t counter, bool hidden, bool no_ctx,
                               uint64_t* bytes) noexcept {
    if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > sq_sge_)
        return keep_error::too_many_sges;
    sq_op& op = sq_[slot];
    struct ibv_sge* sges = &sq_sges_[size_t{slot} * sq_sge_];
    int n = wr.num_sge;
    uint64_t covered = 0;
    if (wr.send_flags & IBV_SEND_INLINE) {
        // The bytes, not the addresses: one entry pointing at the slot's copy.
        uint8_t* buf = &inline_[size_t{slot} * max_inline_];
        size_t total = 0;
        for (int i = 0; i < wr.num_sge; ++i) {
            const struct ibv_sge& s = wr.sg_list[i];
            if (s.length > max_inline_ - total) return keep_error::inline_too_big;
            if (s.length)
                std::memcpy(buf + total, reinterpret_cast<const void*>(s.addr), s.length);
            total += s.length;
        }
        n = total ? 1 : 0;
        sges[0] = {reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(total), 0};
        covered = total;
    } else {
        for (int i = 0; i < wr.num_sge; ++i) {
            sges[i] = wr.sg_list[i];
            covered += wr.sg_list[i].length;
        }
    }
    if (bytes) *bytes = covered;
    op.wr = wr;
    op.wr.next = nullptr;
    op.wr.sg_list = n ? sges : nullptr;
    op.wr.num_sge = n;
    op.context = context;
    op.counter = counter;
    op.hidden = hidden || no_ctx;
    op.no_ctx = no_ctx;
    return keep_error::none;
}

keep_error op_store::keep_recv(uint32_t slot, const struct ibv_recv_wr& wr,
                               uint64_t user_id) noexcept {
    if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > rq_sge_)
        return keep_error::too_many_sges;
    rq_op& op = rq_[slot];
    struct ibv_sge* sges = &rq_sges_[size_t{slot} * rq_sge_];
    std::copy(wr.sg_list, wr.sg_list + wr.num_sge, sges);
    op.wr = wr;
    op.wr.next = nullptr;
    op.wr.sg_list = wr.num_sge ? sges : nullptr;
    op.user_id = user_id;
    return keep_error::none;
}

}  // namespace evd::resume
