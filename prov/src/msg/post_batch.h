// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Work requests posted with FI_MORE (fi_msg(3), fi_rma(3)): held by the
// endpoint until a call without the flag, then given to the device as one
// chain, one ibv_post_send or ibv_post_recv (on rxe one doorbell, one
// write() system call, for the whole batch instead of one per request).
//
// post_batch<ibv_send_wr> is an endpoint's send queue's, post_batch<
// ibv_recv_wr> its receive queue's (msg/ep_dp.h). submit(wr, more, ...):
//  - with `more`, wr is copied in and held with its scatter list; a full
//    batch is posted first. The data of an inline send is copied too when
//    the caller says held_data::copied (FI_INJECT: the caller may reuse its
//    buffer at once); held_data::referenced keeps the scatter list
//    pointing at the caller's buffer, which any other send leaves alone
//    until its completion, so a held 8 B send costs no memcpy;
//  - without it, or when wr cannot be held (more scatter entries than
//    kBatchSge, copied inline data larger than the batch keeps), every
//    held request and then wr go to the device as one chain, in order.
// So nothing is left held once a call without FI_MORE returns 0. The held
// requests are kept linked as the chain they will be posted as (each
// request's next and sg_list already point into the batch), so a flush
// links only the caller's request behind the last held one; only a partial
// post, which moves the rest to the front, links them again.
//
// When the device takes part of a chain (its queue is full: ENOMEM or
// EAGAIN), what it did not take stays held, in order, and submit answers
// that errno: the caller's request was not posted (-FI_EAGAIN to the user,
// who posts it again, and that post sends the rest first). Any other refusal
// (the QP left RTS: the connection ended, as the EQ reports) drops what is
// held, with a warning naming how many requests, since they can never be
// posted on that QP; their contexts never complete, like work posted to a
// connection that has ended.
//
// Thread safety: one lock (mu_), taken only by a call that holds or flushes
// (FI_MORE given, or a batch held: holding() is a relaxed load of an atomic
// the lock's holder keeps equal to the count). A call without FI_MORE on
// an endpoint with nothing held takes no lock (docs/locking.md).
//
// The poster is a plain function and its argument (the endpoint's QP post,
// or a test's fake), so the object knows no endpoint and is tested on the
// host (test/unit/post_batch.cpp).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "futex.h"
#include "lock.h"

namespace evd {

inline constexpr size_t kBatchMax = 64;  // requests a batch holds at most
inline constexpr int kBatchSge = 4;      // scatter entries a held request keeps

// What holding an inline send does with its data (above).
enum class held_data : bool { copied, referenced };

template <class Wr>
class post_batch {
  public:
    // ibv_post_send/ibv_post_recv's shape: 0 or an errno, *bad the first
    // request the device did not take.
    using post_fn = int (*)(void* arg, Wr* chain, Wr** bad);

    // depth: requests held at most (1..kBatchMax); inline_max: the largest
    // inline send it copies (sends only). nullptr when out of memory: the
    // endpoint then posts every request at once (correct, one doorbell each).
    static std::unique_ptr<post_batch> make(size_t depth, size_t inline_max) noexcept;
    ~post_batch();
    post_batch(const post_batch&) = delete;
    post_batch& operator=(const post_batch&) = delete;

    // A batch is held: a post without FI_MORE must go through submit.
    bool holding() const noexcept { return held_.load(std::memory_order_relaxed) != 0; }
    size_t held() const noexcept { return held_.load(std::memory_order_relaxed); }
    size_t depth() const noexcept { return depth_; }

    // Holds wr (more) or posts every held request and wr (above): 0, or the
    // errno of a post that did not take wr.
    // Inline: a request held with room to spare costs one call of a leaf
    // (hold), which saves no register for a call it does not make; the
    // rest (a full batch, a flush) is submit_slow's.
    int submit(Wr& wr, bool more, post_fn post, void* arg,
               held_data data = held_data::copied) EVD_EXCLUDES(mu_) {
        if (more && hold(wr, data)) return 0;
        return submit_slow(wr, more, post, arg, data);
    }
    // Posts what is held (fi_shutdown, the endpoint's close): 0 or errno.
    int flush(post_fn post, void* arg) EVD_EXCLUDES(mu_);

    // Held requests, each in a stride of its own: the request, its scatter
    // list, then (sends) inline_max bytes of inline data.
    struct held_wr {
        Wr wr;
        struct ibv_sge sge[kBatchSge];
        bool staged;  // the data is in the stride's own bytes (inline send)
    };

  private:
    post_batch(size_t depth, size_t inline_max, std::unique_ptr<unsigned char[]> mem)
        : depth_(depth), inline_max_(inline_max), stride_(stride_for(inline_max)),
          mem_(std::move(mem)) {}
    static size_t stride_for(size_t inline_max) noexcept;
    held_wr& at(size_t i) noexcept EVD_REQUIRES(mu_) {
        return *reinterpret_cast<held_wr*>(mem_.get() + i * stride_);
    }
    unsigned char* staging(size_t i) noexcept EVD_REQUIRES(mu_) {
        return mem_.get() + i * stride_ + sizeof(held_wr);
    }
    // Under the lock, keeps wr if the batch has room and can keep it; false
    // (nothing changed) otherwise. A leaf with keep inlined: no register
    // is saved for a call it does not make.
    bool hold(const Wr& wr, held_data data) EVD_EXCLUDES(mu_);
    int submit_slow(Wr& wr, bool more, post_fn post, void* arg, held_data data)
        EVD_EXCLUDES(mu_);
    // inlined into hold() and submit_slow(): a call costs a held request a
    // quarter more
    [[gnu::always_inline]] inline bool keep(const Wr& wr, held_data data) EVD_REQUIRES(mu_);
    int post_held(Wr* last, post_fn post, void* arg) EVD_REQUIRES(mu_);
    void relink() EVD_REQUIRES(mu_);

    const size_t depth_, inline_max_, stride_;
    qlock mu_;
    // the strides, read and written under mu_ only (at(), staging(), a
    // move); zeroed when made, and a request's bytes past what keep()
    // copies (kWrBytes) stay zero
    const std::unique_ptr<unsigned char[]> mem_;
    size_t n_ EVD_GUARDED_BY(mu_) = 0;
    std::atomic<size_t> held_{0};  // == n_, for the lock-free holding()
};

// An endpoint's batch of one queue, made at the first FI_MORE post (most
// endpoints never see the flag: a send batch is depth x (200 + inject_size)
// bytes). The one owner of the post_batch; get() is an acquire load, the
// whole cost of FI_MORE support to a post without it.
template <class Wr>
class batch_slot {
  public:
    batch_slot() = default;
    batch_slot(const batch_slot&) = delete;
    batch_slot& operator=(const batch_slot&) = delete;
    ~batch_slot() { delete p_.load(std::memory_order_relaxed); }
    post_batch<Wr>* get() const noexcept { return p_.load(std::memory_order_acquire); }
    // The batch, made now if need be; nullptr when out of memory.
    post_batch<Wr>* get_or_make(size_t depth, size_t inline_max) noexcept {
        if (post_batch<Wr>* b = get()) return b;
        post_batch<Wr>* made = post_batch<Wr>::make(depth, inline_max).release();
        if (!made) return nullptr;
        post_batch<Wr>* seen = nullptr;
        if (p_.compare_exchange_strong(seen, made, std::memory_order_acq_rel)) return made;
        delete made;  // another thread's first FI_MORE made it first
        return seen;
    }

  private:
    std::atomic<post_batch<Wr>*> p_{nullptr};
};

extern template class post_batch<struct ibv_send_wr>;
extern template class post_batch<struct ibv_recv_wr>;

}  // namespace evd
