// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The address vector of datagram endpoints (av.h): FI_ADDR_IB_UD names in,
// address handles out.
#include "dgram/av.h"

#include <netdb.h>

#include <cstring>

#include "dgram/gid_table.h"
#include "dgram/ud_cm.h"
#include "domain.h"

namespace evd {

namespace {

av* av_of(struct fid_av* f) { return self_of<av>(f); }

uint64_t name_hash(const uint8_t gid[16], uint32_t qpn) {
    uint64_t h = 1469598103934665603ULL;  // FNV-1a over the GID and the QPN
    for (int i = 0; i < 16; ++i) h = (h ^ gid[i]) * 1099511628211ULL;
    for (int i = 0; i < 4; ++i) h = (h ^ ((qpn >> (8 * i)) & 0xff)) * 1099511628211ULL;
    return h;
}

bool same_name(const ud_name& n, const uint8_t gid[16], uint32_t qpn) {
    return n.qpn == qpn && std::memcmp(n.gid, gid, 16) == 0;
}

// Under a->mu: the entry at index i (its chunk made when missing).
av_entry* entry_at(av* a, size_t i) EVD_REQUIRES(a->mu) {
    auto& slot = a->chunks[i / av::kChunk];
    av_entry* c = slot.load(std::memory_order_relaxed);
    if (!c) {
        a->owned.push_back(std::make_unique<av_entry[]>(av::kChunk));
        c = a->owned.back().get();
        slot.store(c, std::memory_order_release);
    }
    return &c[i % av::kChunk];
}

// Under a->mu: puts index i (name n) into the source index, replacing the
// index with a larger one when it is over half full.
void index_add(av* a, const ud_name& n, uint32_t i) EVD_REQUIRES(a->mu) {
    av_index* cur = a->index.load(std::memory_order_relaxed);
    if (!cur || (cur->used + 1) * 2 > cur->cap) {
        auto fresh = std::make_unique<av_index>();
        fresh->cap = cur ? cur->cap * 2 : 64;
        fresh->slot = std::make_unique<std::atomic<uint32_t>[]>(fresh->cap);
        for (size_t k = 0; k < fresh->cap; ++k) fresh->slot[k].store(0, std::memory_order_relaxed);
        // live entries only: tombstones are dropped here
        for (size_t k = 0; cur && k < cur->cap; ++k) {
            uint32_t v = cur->slot[k].load(std::memory_order_relaxed);
            if (v == 0 || v == av_index::kTomb) continue;
            const av_entry* e = entry_at(a, v - 1);
            size_t h = name_hash(e->name.gid, e->name.qpn) & (fresh->cap - 1);
            while (fresh->slot[h].load(std::memory_order_relaxed)) h = (h + 1) & (fresh->cap - 1);
            fresh->slot[h].store(v, std::memory_order_relaxed);
            ++fresh->used;
        }
        cur = fresh.get();
        a->indexes.push_back(std::move(fresh));
        a->index.store(cur, std::memory_order_release);
    }
    size_t h = name_hash(n.gid, n.qpn) & (cur->cap - 1);
    while (cur->slot[h].load(std::memory_order_relaxed)) h = (h + 1) & (cur->cap - 1);
    cur->slot[h].store(i + 1, std::memory_order_release);
    ++cur->used;
}

// Under a->mu: takes index i out of the source index (a tombstone).
void index_remove(av* a, const ud_name& n, uint32_t i) {
    av_index* cur = a->index.load(std::memory_order_relaxed);
    if (!cur) return;
    size_t h = name_hash(n.gid, n.qpn) & (cur->cap - 1);
    for (size_t probes = 0; probes < cur->cap; ++probes, h = (h + 1) & (cur->cap - 1)) {
        uint32_t v = cur->slot[h].load(std::memory_order_relaxed);
        if (v == 0) return;
        if (v == i + 1) {
            cur->slot[h].store(av_index::kTomb, std::memory_order_release);
            return;
        }
    }
}

// The address handle for name n on a's domain: from the port's GID of the
// same kind as the peer's (gid_table.h), with a global route header.
int make_ah(av* a, const ud_name& n, ibv_ah_ptr* out) {
    domain* d = a->dom;
    struct ibv_context* verbs = d->dev->ctx.get();
    gid_entry src = gid_source_for(verbs, d->port_num, n.gid);
    struct ibv_ah_attr at {};
    at.port_num = d->port_num;
    at.dlid = n.lid;
    at.sl = n.sl;
    if (src.index >= 0) {
        at.is_global = 1;
        std::memcpy(at.grh.dgid.raw, n.gid, 16);
        at.grh.sgid_index = static_cast<uint8_t>(src.index);
        at.grh.hop_limit = 64;
    } else if (!n.lid) {
        EVD_WARN(FI_LOG_AV, "fi_av_insert: port %u of %s has no GID to reach that name from, "
                 "and the name has no LID\n", d->port_num, d->dev->name.c_str());
        return -FI_EADDRNOTAVAIL;
    }
    struct ibv_ah* ah = ibv_create_ah(d->pd.get(), &at);
    if (!ah) {
        int err = errno ? errno : EINVAL;
        char text[128];
        ud_straddr(n, text, sizeof text);
        EVD_WARN(FI_LOG_AV, "fi_av_insert: ibv_create_ah(%s): %s\n", text, strerror(err));
        return err == EINVAL ? -FI_EADDRNOTAVAIL : fi_err(err);
    }
    out->reset(ah);
    return 0;
}

// A name as given by the user: 32 bytes, a GID or a LID, a QP number.
int check_name(const ud_name& n) {
    static const uint8_t zero[16] = {};
    if (!std::memcmp(n.gid, zero, 16) && !n.lid) {
        EVD_WARN(FI_LOG_AV, "fi_av_insert: the name has neither a GID nor a LID\n");
        return -FI_EINVAL;
    }
    if (!n.qpn || n.qpn > 0xffffff) {
        EVD_WARN(FI_LOG_AV, "fi_av_insert: QP number 0x%x is not a UD QP's (24 bits, not 0)\n",
                 n.qpn);
        return -FI_EINVAL;
    }
    return 0;
}

int insert_one(av* a, const ud_name& n, fi_addr_t* out) EVD_REQUIRES(a->mu) {
    *out = FI_ADDR_NOTAVAIL;
    const size_t i = a->next.load(std::memory_order_relaxed);
    if (i >= av::kChunk * av::kMaxChunks) {
        EVD_WARN(FI_LOG_AV, "fi_av_insert: the AV holds its maximum of %zu addresses\n", i);
        return -FI_ENOSPC;
    }
    av_entry* e = entry_at(a, i);  // the index is taken even when the insert fails (TABLE order)
    a->next.store(i + 1, std::memory_order_release);
    if (int r = check_name(n)) return r;
    const size_t max_ah = a->dom->dev->attr.orig_attr.max_ah;
    if (max_ah && a->live_count >= max_ah) {
        EVD_WARN(FI_LOG_AV, "fi_av_insert: %s allows %zu address handles, all in use\n",
                 a->dom->dev->name.c_str(), max_ah);
        return -FI_ENOSPC;
    }
    if (int r = make_ah(a, n, &e->ah)) return r;
    e->name = n;
    index_add(a, n, static_cast<uint32_t>(i));
    e->live.store(true, std::memory_order_release);
    ++a->live_count;
    *out = i;
    return 0;
}

// ------------------------------------------------------------------ entry points
int av_insert(struct fid_av* f, const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags,
              void* context) {
    return guard([&] {
        av* a = av_of(f);
        if (flags & ~(FI_MORE | FI_SYNC_ERR)) {
            EVD_WARN(FI_LOG_AV, "fi_av_insert: unsupported flags 0x%llx (FI_MORE and FI_SYNC_ERR "
                     "only; inserts are synchronous)\n", static_cast<unsigned long long>(flags));
            return -FI_EBADFLAGS;
        }
        if (count && !addr) {
            EVD_WARN(FI_LOG_AV, "fi_av_insert: NULL addresses\n");
            return -FI_EINVAL;
        }
        if ((flags & FI_SYNC_ERR) && !context) {
            EVD_WARN(FI_LOG_AV, "fi_av_insert: FI_SYNC_ERR without an error array (context)\n");
            return -FI_EINVAL;
        }
        auto* errs = static_cast<int*>(context);
        evd::lock_guard lk(a->mu);
        int done = 0;
        for (size_t k = 0; k < count; ++k) {
            ud_name n;
            std::memcpy(&n, static_cast<const uint8_t*>(addr) + k * kUdNameLen, kUdNameLen);
            fi_addr_t got = FI_ADDR_NOTAVAIL;
            int r = insert_one(a, n, &got);
            if (fi_addr) fi_addr[k] = got;
            if (flags & FI_SYNC_ERR) errs[k] = -r;
            if (r == 0) ++done;
        }
        return done;
    });
}

// The datagram endpoint at node:service, asked by SIDR (ud_cm.h), inserted.
int av_insertsvc(struct fid_av* f, const char* node, const char* service, fi_addr_t* fi_addr,
                 uint64_t flags, void* context) {
    return guard([&] {
        av* a = av_of(f);
        if (!node || !service) {
            EVD_WARN(FI_LOG_AV, "fi_av_insertsvc: node and service are both needed\n");
            return -FI_EINVAL;
        }
        if (flags & ~(FI_MORE | FI_SYNC_ERR)) {
            EVD_WARN(FI_LOG_AV, "fi_av_insertsvc: unsupported flags 0x%llx\n",
                     static_cast<unsigned long long>(flags));
            return -FI_EBADFLAGS;
        }
        struct addrinfo hints {};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        struct addrinfo* res = nullptr;
        if (int rc = getaddrinfo(node, service, &hints, &res)) {
            EVD_WARN(FI_LOG_AV, "fi_av_insertsvc: %s:%s: %s\n", node, service, gai_strerror(rc));
            return -FI_EINVAL;
        }
        std::unique_ptr<struct addrinfo, call_deleter<freeaddrinfo>> owner(res);
        ud_name n;
        int r = ud_resolve(nullptr, res->ai_addr, get_params().cm_timeout_ms, &n);
        if (r) {
            EVD_WARN(FI_LOG_AV, "fi_av_insertsvc: no datagram endpoint answers at %s:%s: %s\n",
                     node, service, fi_strerror(-r));
            if ((flags & FI_SYNC_ERR) && context) *static_cast<int*>(context) = -r;
            if (fi_addr) *fi_addr = FI_ADDR_NOTAVAIL;
            return r == -FI_ENODATA ? 0 : r;
        }
        evd::lock_guard lk(a->mu);
        fi_addr_t got = FI_ADDR_NOTAVAIL;
        r = insert_one(a, n, &got);
        if (fi_addr) *fi_addr = got;
        if ((flags & FI_SYNC_ERR) && context) *static_cast<int*>(context) = -r;
        return r ? 0 : 1;
    });
}

int av_insertsym(struct fid_av*, const char*, size_t, const char*, size_t, fi_addr_t*, uint64_t,
                 void*) {
    EVD_WARN(FI_LOG_AV, "fi_av_insertsym: not supported (FI_ADDR_IB_UD names are not symmetric)\n");
    return -FI_ENOSYS;
}

int av_remove(struct fid_av* f, fi_addr_t* fi_addr, size_t count, uint64_t flags) {
    return guard([&] {
        av* a = av_of(f);
        if (flags) {
            EVD_WARN(FI_LOG_AV, "fi_av_remove: flags 0x%llx (none are supported)\n",
                     static_cast<unsigned long long>(flags));
            return -FI_EBADFLAGS;
        }
        if (count && !fi_addr) return -FI_EINVAL;
        evd::lock_guard lk(a->mu);
        int ret = 0;
        for (size_t k = 0; k < count; ++k) {
            const fi_addr_t x = fi_addr[k];
            av_entry* e = x < a->next.load(std::memory_order_relaxed) ? entry_at(a, x) : nullptr;
            if (!e || !e->live.load(std::memory_order_relaxed)) {
                EVD_WARN(FI_LOG_AV, "fi_av_remove: fi_addr %llu is not in the AV\n",
                         static_cast<unsigned long long>(x));
                ret = -FI_EINVAL;
                continue;
            }
            e->live.store(false, std::memory_order_release);
            index_remove(a, e->name, static_cast<uint32_t>(x));
            if (int r = release_with(e->ah, ibv_destroy_ah))
                EVD_WARN(FI_LOG_AV, "fi_av_remove: ibv_destroy_ah: %s\n", strerror(r));
            --a->live_count;
        }
        return ret;
    });
}

int av_lookup(struct fid_av* f, fi_addr_t fi_addr, void* addr, size_t* addrlen) {
    return guard([&] {
        av* a = av_of(f);
        if (!addrlen) return -FI_EINVAL;
        const av_entry* e = av_entry_of(a, fi_addr);
        if (!e) {
            EVD_WARN(FI_LOG_AV, "fi_av_lookup: fi_addr %llu is not in the AV\n",
                     static_cast<unsigned long long>(fi_addr));
            return -FI_EINVAL;
        }
        if (addr) std::memcpy(addr, &e->name, std::min(*addrlen, kUdNameLen));
        *addrlen = kUdNameLen;
        return 0;
    });
}

const char* av_straddr(struct fid_av*, const void* addr, char* buf, size_t* len) {
    if (!addr || !buf || !len) return nullptr;
    ud_name n;
    std::memcpy(&n, addr, kUdNameLen);
    *len = ud_straddr(n, buf, *len) + 1;
    return buf;
}

int av_bind(struct fid*, struct fid*, uint64_t) {
    EVD_WARN(FI_LOG_AV, "fi_av_bind: nothing binds to an evd AV (inserts are synchronous)\n");
    return -FI_ENOSYS;
}

int av_close(struct fid* f) {
    return guard([&] {
        av* a = av_from_fid(f);
        if (!a) return -FI_EINVAL;
        if (a->refs.busy()) {
            EVD_WARN(FI_LOG_AV, "fi_close(av): %d endpoints still bound to it\n", a->refs.n.load());
            return -FI_EBUSY;
        }
        {  // address handles first (they live on the domain's PD)
            evd::lock_guard lk(a->mu);
            for (auto& c : a->owned)
                for (size_t k = 0; k < av::kChunk; ++k) c[k].ah.reset();
        }
        return retire(a, &a->dom->refs);
    });
}

extern struct fi_ops av_fi_ops;
extern struct fi_ops_av av_ops;

}  // namespace

av* av_from_fid(struct fid* f) {
    av* a = from_fid<av>(f);
    if (a && a->fid.fid.fclass != FI_CLASS_AV) return nullptr;
    return a;
}

fi_addr_t av_find(const av* a, const uint8_t gid[16], uint32_t qpn) noexcept {
    const av_index* ix = a->index.load(std::memory_order_acquire);
    if (!ix) return FI_ADDR_NOTAVAIL;
    size_t h = name_hash(gid, qpn) & (ix->cap - 1);
    for (size_t probes = 0; probes < ix->cap; ++probes, h = (h + 1) & (ix->cap - 1)) {
        const uint32_t v = ix->slot[h].load(std::memory_order_acquire);
        if (v == 0) return FI_ADDR_NOTAVAIL;
        if (v == av_index::kTomb) continue;
        const av_entry* e = av_entry_of(a, v - 1);
        if (e && same_name(e->name, gid, qpn)) return v - 1;
    }
    return FI_ADDR_NOTAVAIL;
}

int av_open(struct fid_domain* dom_fid, struct fi_av_attr* attr, struct fid_av** out,
            void* context) {
    return guard([&] {
        domain* d = domain_from_fid(dom_fid);
        if (!d || !attr || !out) {
            EVD_WARN(FI_LOG_AV, "fi_av_open: bad domain, attr or av pointer\n");
            return -FI_EINVAL;
        }
        if (d->info && d->info->ep_attr && d->info->ep_attr->type == FI_EP_MSG) {
            EVD_WARN(FI_LOG_AV, "fi_av_open: FI_EP_MSG endpoints use no address vector (open the "
                     "domain with an FI_EP_DGRAM fi_info for datagram endpoints)\n");
            return -FI_ENOSYS;
        }
        if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP && attr->type != FI_AV_TABLE) {
            EVD_WARN(FI_LOG_AV, "fi_av_open: unknown type %d\n", static_cast<int>(attr->type));
            return -FI_EINVAL;
        }
        if (attr->name) {
            EVD_WARN(FI_LOG_AV, "fi_av_open: named (shared) AVs are not supported\n");
            return -FI_ENOSYS;
        }
        if (attr->rx_ctx_bits) {
            EVD_WARN(FI_LOG_AV, "fi_av_open: rx_ctx_bits %d: evd has no scalable endpoints\n",
                     attr->rx_ctx_bits);
            return -FI_ENOSYS;
        }
        if (attr->flags & FI_EVENT) {
            EVD_WARN(FI_LOG_AV, "fi_av_open: FI_EVENT is not supported (inserts are synchronous)\n");
            return -FI_ENOSYS;
        }
        if (attr->flags & ~(FI_EVENT | FI_READ | FI_SYMMETRIC)) {
            EVD_WARN(FI_LOG_AV, "fi_av_open: unsupported flags 0x%llx\n",
                     static_cast<unsigned long long>(attr->flags));
            return -FI_EBADFLAGS;
        }
        auto a = std::make_unique<av>();
        a->dom = d;
        a->type = attr->type == FI_AV_TABLE ? FI_AV_TABLE : FI_AV_MAP;
        attr->type = a->type;
        a->chunks = std::make_unique<std::atomic<av_entry*>[]>(av::kMaxChunks);
        for (size_t k = 0; k < av::kMaxChunks; ++k) a->chunks[k].store(nullptr);
        fid_init(*a, FI_CLASS_AV, context, &av_fi_ops, &av_ops);
        return hand_out(std::move(a), d->refs, out);
    });
}

namespace {

struct fi_ops av_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = av_close,
    .bind = av_bind,
    .control = op_no_control,
    .ops_open = op_no_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

struct fi_ops_av av_ops = {
    .size = sizeof(struct fi_ops_av),
    .insert = av_insert,
    .insertsvc = av_insertsvc,
    .insertsym = av_insertsym,
    .remove = av_remove,
    .lookup = av_lookup,
    .straddr = av_straddr,
};

}  // namespace

}  // namespace evd
