// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Requests posted with FI_MORE, held and then posted as one chain
// (post_batch.h).
#include "msg/post_batch.h"

#include <cerrno>
#include <cstring>
#include <new>

#include "evd.h"

namespace evd {

namespace {

template <class Wr>
constexpr bool kIsSend = std::is_same_v<Wr, struct ibv_send_wr>;

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
                                             unsigned char[depth * stride_for(inline_max)]);
    if (!mem) return nullptr;
    return std::unique_ptr<post_batch>(new (std::nothrow)
                                           post_batch(depth, inline_max, std::move(mem)));
}

template <class Wr>
post_batch<Wr>::~post_batch() = default;

// Copies wr in as the last held request; false when it cannot be held (the
// batch is full, or wr needs more than the batch keeps).
template <class Wr>
bool post_batch<Wr>::keep(const Wr& wr) {
    if (n_ >= depth_ || wr.num_sge < 0) return false;
    held_wr& h = at(n_);
    bool staged = false;
    if constexpr (kIsSend<Wr>) {
        if (wr.send_flags & IBV_SEND_INLINE) {
            // the data goes now: the caller may reuse its buffer on return
            size_t total = 0;
            for (int i = 0; i < wr.num_sge; ++i) total += wr.sg_list[i].length;
            if (total > inline_max_) return false;
            unsigned char* to = staging(n_);
            size_t off = 0;
            for (int i = 0; i < wr.num_sge; ++i) {
                memcpy(to + off, reinterpret_cast<const void*>(wr.sg_list[i].addr),
                       wr.sg_list[i].length);
                off += wr.sg_list[i].length;
            }
            h.wr = wr;
            h.wr.num_sge = total ? 1 : 0;
            h.sge[0].length = static_cast<uint32_t>(total);
            h.sge[0].lkey = 0;
            staged = true;
        }
    }
    if (!staged) {
        if (wr.num_sge > kBatchSge) return false;
        h.wr = wr;
        for (int i = 0; i < wr.num_sge; ++i) h.sge[i] = wr.sg_list[i];
    }
    h.staged = staged;
    h.wr.next = nullptr;
    ++n_;
    held_.store(n_, std::memory_order_relaxed);
    return true;
}

// Posts the held requests, then `last` (if any), as one chain.
template <class Wr>
int post_batch<Wr>::post_held(Wr* last, post_fn post, void* arg) {
    Wr* first = nullptr;
    Wr** link = &first;
    for (size_t i = 0; i < n_; ++i) {
        held_wr& h = at(i);
        // the strides may have moved (a partial post): point them again
        h.wr.sg_list = h.wr.num_sge ? h.sge : nullptr;
        if (h.staged) h.sge[0].addr = reinterpret_cast<uintptr_t>(staging(i));
        h.wr.next = nullptr;
        *link = &h.wr;
        link = &h.wr.next;
    }
    *link = last;
    if (!first) return 0;
    Wr* bad = nullptr;
    const int r = post(arg, first, &bad);
    if (r == 0) {
        n_ = 0;
        held_.store(0, std::memory_order_relaxed);
        return 0;
    }
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
int post_batch<Wr>::submit(Wr& wr, bool more, post_fn post, void* arg) {
    lock_guard<qlock> g(mu_);
    if (more) {
        if (n_ >= depth_) {
            if (int r = post_held(nullptr, post, arg)) return r;
        }
        if (keep(wr)) return 0;
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
