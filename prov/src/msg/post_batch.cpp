// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Requests posted with FI_MORE, held and then posted as one chain
// (post_batch.h).
#include "msg/post_batch.h"

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>

#include "evd.h"

namespace evd {

namespace {

template <class Wr>
constexpr bool kIsSend = std::is_same_v<Wr, struct ibv_send_wr>;

// The bytes of a request keep() copies: a send's up to its memory-window
// and TSO union, which no evd request sets (ep_data.cpp clears up to there
// only); a receive's whole.
template <class Wr>
constexpr size_t kWrBytes = kIsSend<Wr> ? offsetof(struct ibv_send_wr, bind_mw) : sizeof(Wr);

}  // namespace

template <class Wr>
size_t post_batch<Wr>::stride_for(size_t inline_max) noexcept {
    const size_t a = alignof(held_wr);
    return (sizeof(held_wr) + inline_max + a - 1) / a * a;
}

template <class Wr>
std::unique_ptr<post_batch<Wr>> post_batch<Wr>::make(size_t depth, size_t inline_max) noexcept {
    if (depth < 1) depth = 1;
    if (depth > kBatchMax) depth = kBatchMax;
    if (!kIsSend<Wr>) inline_max = 0;
    std::unique_ptr<unsigned char[]> mem(new (std::nothrow)
                                             unsigned char[depth * stride_for(inline_max)]());
    if (!mem) return nullptr;
    return std::unique_ptr<post_batch>(new (std::nothrow)
                                           post_batch(depth, inline_max, std::move(mem)));
}

template <class Wr>
post_batch<Wr>::~post_batch() = default;

namespace {

// An inline send's data copied into its stride's staging bytes `to`, and
// the held request pointed at them; false when it is larger than `room`.
// Out of line: its memcpy calls would make every hold save registers.
__attribute__((noinline)) bool stage_inline(struct ibv_send_wr& to_wr, struct ibv_sge& to_sge,
                                            unsigned char* to, size_t room,
                                            const struct ibv_send_wr& wr) {
    size_t total = 0;
    for (int i = 0; i < wr.num_sge; ++i) total += wr.sg_list[i].length;
    if (total > room) return false;
    size_t off = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
        memcpy(to + off, reinterpret_cast<const void*>(wr.sg_list[i].addr), wr.sg_list[i].length);
        off += wr.sg_list[i].length;
    }
    memcpy(&to_wr, &wr, kWrBytes<struct ibv_send_wr>);
    to_wr.num_sge = total ? 1 : 0;
    to_sge.addr = reinterpret_cast<uintptr_t>(to);
    to_sge.length = static_cast<uint32_t>(total);
    to_sge.lkey = 0;
    return true;
}

}  // namespace

// Copies wr in as the last held request, linked behind the one before it;
// false when it cannot be held (the batch is full, or wr needs more than the
// batch keeps).
template <class Wr>
bool post_batch<Wr>::keep(const Wr& wr, held_data data) {
    if (n_ >= depth_ || wr.num_sge < 0) return false;
    held_wr& h = at(n_);
    bool staged = false;
    if constexpr (kIsSend<Wr>) {
        if ((wr.send_flags & IBV_SEND_INLINE) && data == held_data::copied) [[unlikely]] {
            // the data goes now: the caller may reuse its buffer on return
            if (!stage_inline(h.wr, h.sge[0], staging(n_), inline_max_, wr)) return false;
            staged = true;
        }
    }
    if (!staged) {
        if (wr.num_sge > kBatchSge) return false;
        memcpy(&h.wr, &wr, kWrBytes<Wr>);
        // unrolled: as a loop, the compiler makes it a memcpy call
        switch (wr.num_sge) {
        case 4: h.sge[3] = wr.sg_list[3]; [[fallthrough]];
        case 3: h.sge[2] = wr.sg_list[2]; [[fallthrough]];
        case 2: h.sge[1] = wr.sg_list[1]; [[fallthrough]];
        case 1: h.sge[0] = wr.sg_list[0]; break;
        default: break;
        }
        static_assert(kBatchSge == 4, "the copy above keeps kBatchSge entries");
    }
    h.staged = staged;
    h.wr.sg_list = h.wr.num_sge ? h.sge : nullptr;
    h.wr.next = nullptr;
    if (n_) at(n_ - 1).wr.next = &h.wr;
    ++n_;
    held_.store(n_, std::memory_order_relaxed);
    return true;
}

// Points the held requests at their own strides again, in a chain, after a
// partial post moved them to the front.
template <class Wr>
void post_batch<Wr>::relink() {
    for (size_t i = 0; i < n_; ++i) {
        held_wr& h = at(i);
        h.wr.sg_list = h.wr.num_sge ? h.sge : nullptr;
        if (h.staged) h.sge[0].addr = reinterpret_cast<uintptr_t>(staging(i));
        h.wr.next = i + 1 < n_ ? &at(i + 1).wr : nullptr;
    }
}

// Posts the held requests (already a chain), then `last` (if any), as one
// chain.
template <class Wr>
int post_batch<Wr>::post_held(Wr* last, post_fn post, void* arg) {
    if (!n_) {
        if (!last) return 0;
        Wr* bad = nullptr;
        return post(arg, last, &bad);
    }
    Wr* first = &at(0).wr;
    at(n_ - 1).wr.next = last;
    Wr* bad = nullptr;
    const int r = post(arg, first, &bad);
    if (r == 0) {
        n_ = 0;
        held_.store(0, std::memory_order_relaxed);
        return 0;
    }
    at(n_ - 1).wr.next = nullptr;  // the caller's request is not held
    // rdma-core names the first request it did not take; without that name
    // none is taken to be (a request posted twice would be worse than one
    // refused)
    size_t taken = 0;
    if (bad) {
        taken = n_;
        for (size_t i = 0; i < n_; ++i)
            if (bad == &at(i).wr) {
                taken = i;
                break;
            }
    }
    const size_t left = n_ - taken;
    if (r == ENOMEM || r == EAGAIN) {  // the queue is full: the rest waits, in order
        if (taken && left) memmove(mem_.get(), mem_.get() + taken * stride_, left * stride_);
        n_ = left;
        held_.store(n_, std::memory_order_relaxed);
        if (taken) relink();
        return r;
    }
    if (left)
        EVD_WARN(FI_LOG_EP_DATA, "ibv_post_%s: %s; %zu request(s) posted with FI_MORE are "
                 "dropped unposted (the queue pair takes no more work)\n",
                 kIsSend<Wr> ? "send" : "recv", strerror(r), left);
    n_ = 0;
    held_.store(0, std::memory_order_relaxed);
    return r;
}

template <class Wr>
bool post_batch<Wr>::hold(const Wr& wr, held_data data) {
    lock_guard<qlock> g(mu_);
    return keep(wr, data);
}

template <class Wr>
int post_batch<Wr>::submit_slow(Wr& wr, bool more, post_fn post, void* arg, held_data data) {
    lock_guard<qlock> g(mu_);
    if (more) {
        if (n_ >= depth_) {
            if (int r = post_held(nullptr, post, arg)) return r;
        }
        if (keep(wr, data)) return 0;
    }
    return post_held(&wr, post, arg);
}

template <class Wr>
int post_batch<Wr>::flush(post_fn post, void* arg) {
    lock_guard<qlock> g(mu_);
    return post_held(nullptr, post, arg);
}

template class post_batch<struct ibv_send_wr>;
template class post_batch<struct ibv_recv_wr>;

}  // namespace evd
