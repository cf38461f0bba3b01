// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Locks (which guards what, their order, what runs under which): docs/locking.md.
// Poll sets (fi_poll(3)): fi_poll asks each member whether it has something
// to read, the way fi_trywait does (wait.h), and returns the contexts of
// those that do.
#include "eq/poll_set.h"

#include <memory>
#include <vector>

#include "domain.h"
#include "eq/eq.h"
#include "eq/wait.h"
#include "lock.h"

namespace evd {

struct poll_set : object_head<struct fid_poll, kind::poll> {
    domain* dom = nullptr;
    mutex mu;
    std::vector<struct fid*> members EVD_GUARDED_BY(mu);  // grows only in fi_poll_add
};

namespace {

poll_set* poll_from_fid(struct fid_poll* f) {
    if (!f || f->fid.fclass != FI_CLASS_POLL) return nullptr;
    return from_fid<poll_set>(f);
}

int ps_poll(struct fid_poll* f, void** context, int count) {
    return guard([&] {
        poll_set* ps = poll_from_fid(f);
        if (!ps || count < 0 || (count && !context)) return -FI_EINVAL;
        evd::lock_guard lk(ps->mu);
        int n = 0;
        for (struct fid* m : ps->members) {
            if (n == count) break;
            bool pending;
            if (eq* q = eq_from_fid(m))
                pending = eq_has_events(q);
            else
                pending = fid_trywait(m) == -FI_EAGAIN;
            if (pending) context[n++] = m->context;
        }
        return n;
    });
}

int ps_add(struct fid_poll* f, struct fid* member, uint64_t flags) {
    return guard([&] {
        poll_set* ps = poll_from_fid(f);
        if (!ps || !member) return -FI_EINVAL;
        if (member->fclass != FI_CLASS_EQ && member->fclass != FI_CLASS_CQ &&
            member->fclass != FI_CLASS_CNTR) {
            EVD_WARN(FI_LOG_DOMAIN, "fi_poll_add: fid class %zu cannot join a poll set\n",
                     member->fclass);
            return -FI_EINVAL;
        }
        if (member->fclass == FI_CLASS_EQ && !eq_from_fid(member)) return -FI_EINVAL;
        evd::lock_guard lk(ps->mu);
        for (struct fid* m : ps->members)
            if (m == member) return -FI_EALREADY;
        ps->members.push_back(member);
        if (eq* q = eq_from_fid(member)) eq_bind_ref(q);
        return 0;
    });
}

int ps_del(struct fid_poll* f, struct fid* member, uint64_t flags) {
    return guard([&] {
        poll_set* ps = poll_from_fid(f);
        if (!ps || !member) return -FI_EINVAL;
        evd::lock_guard lk(ps->mu);
        for (auto it = ps->members.begin(); it != ps->members.end(); ++it) {
            if (*it != member) continue;
            ps->members.erase(it);
            if (eq* q = eq_from_fid(member)) eq_bind_unref(q);
            return 0;
        }
        return -FI_ENOENT;
    });
}

int ps_close(struct fid* f) {
    return guard([&] {
        poll_set* ps = poll_from_fid(reinterpret_cast<struct fid_poll*>(f));
        if (!ps) return -FI_EINVAL;
        {
            evd::lock_guard lk(ps->mu);
            if (!ps->members.empty()) {
                EVD_WARN(FI_LOG_DOMAIN, "fi_close(poll set): %zu members left\n",
                         ps->members.size());
                return -FI_EBUSY;
            }
        }
        return retire(ps, ps->dom ? &ps->dom->refs : nullptr);
    });
}

// Ops tables (defined at the end of the file).
extern struct fi_ops ps_fi_ops;
extern struct fi_ops_poll ps_ops;

}  // namespace

int poll_open(struct fid_domain* fd, struct fi_poll_attr* attr, struct fid_poll** out) {
    return guard([&] {
        domain* d = domain_from_fid(fd);
        if (!d || !attr || !out) return -FI_EINVAL;
        if (attr->flags) {
            EVD_WARN(FI_LOG_DOMAIN, "fi_poll_open: flags must be 0\n");
            return -FI_EINVAL;
        }
        auto ps = std::make_unique<poll_set>();
        ps->dom = d;
        fid_init(*ps, FI_CLASS_POLL, nullptr, &ps_fi_ops, &ps_ops);
        return hand_out(std::move(ps), d->refs, out);
    });
}

// ---------------------------------------------------------------- ops tables
namespace {

struct fi_ops ps_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = ps_close,
    .bind = op_no_bind,
    .control = op_no_control,
    .ops_open = op_no_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

struct fi_ops_poll ps_ops = {
    .size = sizeof(struct fi_ops_poll),
    .poll = ps_poll,
    .poll_add = ps_add,
    .poll_del = ps_del,
};

}  // namespace

}  // namespace evd
