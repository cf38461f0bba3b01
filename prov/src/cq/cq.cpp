// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Completion queues (fi_cq(3)) over one ibv_cq each: fi_cq_open, fi_close,
// fi_control, the contract of cq.h and the ops tables. The read path is in
// cq_read.cpp, waiting in cq_wait.cpp, QP and counter routing in
// cq_route.cpp; the state they share in cq_state.h.
#include "cq/cq.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "cq/cq_state.h"
#include "device/devctx.h"
#include "domain.h"
#include "eq/eq.h"
#include "eq/wait.h"
#include "msg/qp_pool.h"
#include "owners.h"

namespace evd {

namespace {

const char* cq_strerror(struct fid_cq*, int prov_errno, const void*, char* buf, size_t len) {
    return wc_error_text(prov_errno, buf, len);
}

eq* cq_route(void* owner) { return static_cast<cq*>(owner)->dom->eq_bound.load(); }

async_target cq_target(cq* c) { return async_target_of(c, cq_route); }

int cq_close(struct fid* f) {
    return guard([&] {
        cq* c = cq_of(reinterpret_cast<struct fid_cq*>(f));
        if (!c) return -FI_EINVAL;
        if (c->refs.busy()) {
            EVD_WARN(FI_LOG_CQ, "fi_close(cq): %d endpoints still bound\n", c->refs.n.load());
            return -FI_EBUSY;
        }
        if (c->wset) {
            wait_set_del(c->wset, &c->wmember);
            c->wset = nullptr;
        }
        devctx_unregister(c->dom->dev, &devctx::cqs, c->ibcq.get());
        cq_drain_channel(c);
        qp_pool_purge_cq(c->ibcq.get());  // kept QPs still hold the CQ
        if (int e = release_with(c->ibcq, ibv_destroy_cq)) {
            EVD_WARN(FI_LOG_CQ, "ibv_destroy_cq: %s\n", strerror(e));
            devctx_register(c->dom->dev, &devctx::cqs, c->ibcq.get(), cq_target(c));
            return fi_err(e);
        }
        return retire(c, &c->dom->refs);
    });
}

int cq_control(struct fid* f, int command, void* arg) {
    return guard([&] {
        cq* c = cq_of(reinterpret_cast<struct fid_cq*>(f));
        if (!c) return -FI_EINVAL;
        switch (command) {
        case FI_GETWAIT:
        case FI_GETWAITOBJ:
            return control_wait_fd(command, arg, c->wait_fd.fd, c->wait_obj, FI_LOG_CQ, "CQ");
        case kCtrlTrywait:
            return cq_trywait(c);
        default:
            EVD_WARN(FI_LOG_CQ, "fi_control(CQ): command %d not supported\n", command);
            return -FI_ENOSYS;
        }
    });
}

// Ops tables (defined at the end of the file).
extern struct fi_ops cq_fi_ops;
extern struct fi_ops_cq cq_ops;

}  // namespace

// ---------------------------------------------------------------- contract
cq* cq_from_fid(struct fid* f) {
    if (!f || f->fclass != FI_CLASS_CQ) return nullptr;
    return from_fid<cq>(reinterpret_cast<struct fid_cq*>(f));
}
struct ibv_cq* cq_ibv(cq* c) { return c ? c->ibcq.get() : nullptr; }
struct fid_domain* cq_domain(cq* c) { return c ? &c->dom->fid : nullptr; }
void cq_bind_ref(cq* c) { c->refs.get(); }
void cq_bind_unref(cq* c) {
    if (c->refs.n.fetch_sub(1, std::memory_order_acq_rel) == 1 && c->internal) {
        int r = cq_close(&c->fid.fid);  // the endpoint's private CQ: its QP is gone
        if (r) EVD_WARN(FI_LOG_CQ, "closing an endpoint's internal CQ: %d\n", r);
    }
}

int cq_open_internal(struct fid_domain* dom, size_t size, cq** out) {
    struct fi_cq_attr a {};
    a.size = size;
    a.format = FI_CQ_FORMAT_CONTEXT;
    a.wait_obj = FI_WAIT_FD;
    struct fid_cq* f = nullptr;
    int r = cq_open(dom, &a, &f, nullptr);
    if (r) return r;
    cq* c = cq_from_fid(&f->fid);
    c->internal = true;
    *out = c;
    return 0;
}

namespace {

// fi_cq_attr.format -> the entry layout fi_cq_read writes.
int take_format(cq* c, const struct fi_cq_attr* attr) {
    switch (attr->format) {
    case FI_CQ_FORMAT_UNSPEC:
    case FI_CQ_FORMAT_CONTEXT:
        c->format = FI_CQ_FORMAT_CONTEXT;
        c->entry_size = sizeof(struct fi_cq_entry);
        break;
    case FI_CQ_FORMAT_MSG:
        c->format = FI_CQ_FORMAT_MSG;
        c->entry_size = sizeof(struct fi_cq_msg_entry);
        break;
    case FI_CQ_FORMAT_DATA:
        c->format = FI_CQ_FORMAT_DATA;
        c->entry_size = sizeof(struct fi_cq_data_entry);
        break;
    default:
        EVD_WARN(FI_LOG_CQ, "fi_cq_open: format %d not supported (CONTEXT, MSG, DATA; "
                            "evd has no tagged messages)\n", attr->format);
        return -FI_ENOSYS;
    }
    return 0;
}

// fi_cq_attr.wait_obj -> how fi_cq_sread waits (and the wait set joined).
int take_wait_obj(cq* c, const struct fi_cq_attr* attr) {
    switch (attr->wait_obj) {
    case FI_WAIT_NONE:
        c->wait_obj = FI_WAIT_NONE;
        break;
    case FI_WAIT_UNSPEC:
    case FI_WAIT_FD:
        c->wait_obj = FI_WAIT_FD;
        break;
    case FI_WAIT_YIELD:  // fi_cq_sread polls and yields; no wait fd
        c->wait_obj = FI_WAIT_YIELD;
        break;
    case FI_WAIT_SET:
        if (int r = member_wait_set(attr->wait_set, FI_LOG_CQ, "fi_cq_open", "a CQ", &c->wset))
            return r;
        c->wait_obj = FI_WAIT_SET;
        break;
    default:
        EVD_WARN(FI_LOG_CQ, "fi_cq_open: wait object %d not supported (NONE, UNSPEC, FD, "
                            "YIELD, FD wait sets)\n",
                 attr->wait_obj);
        return -FI_ENOSYS;
    }
    return 0;
}

// Every CQ has a completion channel, also FI_WAIT_NONE and YIELD ones (not
// exported): a counter counting this CQ's completions sleeps on it instead
// of polling. A CQ with a wait fd also gets its signal and backlog eventfds
// and the epoll fd over all three that FI_GETWAIT exports.
int open_wait_fds(cq* c, struct ibv_context* verbs) {
    c->chan.reset(ibv_create_comp_channel(verbs));
    if (!c->chan) {
        int e = errno;
        EVD_WARN(FI_LOG_CQ, "ibv_create_comp_channel: %s\n", strerror(e));
        return fi_err(e);
    }
    int fl = fcntl(c->chan->fd, F_GETFL);
    if (fl < 0 || fcntl(c->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
    if (c->wait_obj != FI_WAIT_NONE && c->wait_obj != FI_WAIT_YIELD) {
        c->signal_fd.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (c->signal_fd.fd < 0) return -errno;
        c->backlog_fd.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (c->backlog_fd.fd < 0) return -errno;
        c->wait_fd.fd = epoll_create1(EPOLL_CLOEXEC);
        if (c->wait_fd.fd < 0) return -errno;
        struct epoll_event ev {};
        ev.events = EPOLLIN;
        for (int fd : {c->chan->fd, c->signal_fd.fd, c->backlog_fd.fd}) {
            ev.data.fd = fd;
            if (epoll_ctl(c->wait_fd.fd, EPOLL_CTL_ADD, fd, &ev)) return -errno;
        }
    }
    return 0;
}

}  // namespace

namespace {

int check_cond_flags(const struct fi_cq_attr* attr) {
    if (attr->wait_cond != FI_CQ_COND_NONE && attr->wait_cond != FI_CQ_COND_THRESHOLD) {
        EVD_WARN(FI_LOG_CQ, "fi_cq_open: wait_cond %d not supported\n", attr->wait_cond);
        return -FI_ENOSYS;
    }
    if (attr->flags & ~static_cast<uint64_t>(FI_AFFINITY)) {
        EVD_WARN(FI_LOG_CQ, "fi_cq_open: unsupported flags 0x%llx\n",
                 static_cast<unsigned long long>(attr->flags));
        return -FI_EBADFLAGS;
    }
    return 0;
}

// The ibv_cq: attr's size (or FI_EVD_CQ_SIZE) within the device's max_cqe,
// on the completion vector FI_AFFINITY names when the device has it.
int create_ibcq(cq* c, domain* dom, const struct fi_cq_attr& attr) {
    struct ibv_context* verbs = dom->dev->ctx.get();
    size_t max_cqe = static_cast<size_t>(dom->dev->attr.orig_attr.max_cqe);
    size_t size = attr.size ? attr.size : get_params().cq_size;
    if (max_cqe && size > max_cqe) {
        EVD_INFO(FI_LOG_CQ, "fi_cq_open: size %zu clamped to the device's %zu\n", size, max_cqe);
        size = max_cqe;
    }
    int vector = 0;
    if ((attr.flags & FI_AFFINITY) && attr.signaling_vector >= 0 &&
        attr.signaling_vector < verbs->num_comp_vectors)
        vector = attr.signaling_vector;
    c->ibcq.reset(ibv_create_cq(verbs, static_cast<int>(size), c, c->chan.get(), vector));
    if (!c->ibcq) {
        int e = errno;
        EVD_WARN(FI_LOG_CQ, "ibv_create_cq(%zu entries): %s\n", size, strerror(e));
        return fi_err(e);
    }
    return 0;
}

int join_wait_set(cq* c) {
    c->wmember.fid = &c->fid.fid;
    c->wmember.fd = c->wait_fd.fd;
    c->wmember.trywait = [](wait_member* m) { return cq_trywait(cq_from_fid(m->fid)); };
    if (int r = wait_set_add(c->wset, &c->wmember)) {
        c->wset = nullptr;
        return r;
    }
    return 0;
}

}  // namespace

int cq_open(struct fid_domain* dom_fid, struct fi_cq_attr* attr, struct fid_cq** out,
            void* context) {
    return guard([&] {
        domain* dom = domain_from_fid(dom_fid);
        if (!dom || !attr || !out) {
            EVD_WARN(FI_LOG_CQ, "fi_cq_open: invalid domain, or NULL attr/cq\n");
            return -FI_EINVAL;
        }
        auto c = std::make_unique<cq>();
        if (int r = take_format(c.get(), attr)) return r;
        if (int r = take_wait_obj(c.get(), attr)) return r;
        if (int r = check_cond_flags(attr)) return r;
        struct ibv_context* verbs = dom->dev->ctx.get();
        if (int r = open_wait_fds(c.get(), verbs)) return r;
        if (int r = create_ibcq(c.get(), dom, *attr)) return r;
        c->ring_cap = static_cast<size_t>(c->ibcq->cqe) + kBatch;
        c->base_cqe = static_cast<size_t>(c->ibcq->cqe);
        {
            evd::lock_guard lk(c->mu);  // c is not published yet; for the analysis
            c->ring.reset(new struct ibv_wc[c->ring_cap]);  // fi_cq_open's guard: -FI_ENOMEM
        }
        c->dom = dom;
        if (dom->info && dom->info->fabric_attr)
            c->err_data_size_field = api::has_1_5(dom->info->fabric_attr->api_version);
        fid_init(*c, FI_CLASS_CQ, context, &cq_fi_ops, &cq_ops);
        attr->size = static_cast<size_t>(c->ibcq->cqe);
        devctx_register(dom->dev, &devctx::cqs, c->ibcq.get(), cq_target(c.get()));
        undo_on_exit registered([&] { devctx_unregister(dom->dev, &devctx::cqs, c->ibcq.get()); });
        if (c->wset)
            if (int r = join_wait_set(c.get())) return r;
        registered.dismiss();
        return hand_out(std::move(c), dom->refs, out);
    });
}

// ---------------------------------------------------------------- ops tables
namespace {

struct fi_ops cq_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = cq_close,
    .bind = op_no_bind,
    .control = cq_control,
    .ops_open = op_no_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

struct fi_ops_cq cq_ops = {
    .size = sizeof(struct fi_ops_cq),
    .read = cq_read,
    .readfrom = cq_readfrom,
    .readerr = cq_readerr,
    .sread = cq_sread,
    .sreadfrom = cq_sreadfrom,
    .signal = cq_signal,
    .strerror = cq_strerror,
};

}  // namespace

}  // namespace evd
