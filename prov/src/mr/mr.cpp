// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Memory regions (fi_mr(3)) over ibv_reg_mr.
#include "mr/mr.h"

#include <sys/uio.h>

#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "domain.h"
#include "mr/mr_cache.h"

namespace evd {

namespace {

constexpr uint64_t kAccessMask = kMrAccessBits;
// The registration flag libfabric's layers set for memory not to be cached
// (ofi_rxm's bounce buffers): bit 60 of fi_mr_reg's flags.
constexpr uint64_t kNoCache = 1ULL << 60;
// Registration hints of libfabric's layers (ofi_rxm's FI_HMEM_DEVICE_ONLY,
// ...), bits 60-63: ignored but for kNoCache (check_reg).
constexpr uint64_t kLayerHints = 0xfULL << 60;

mr* mr_of(struct fid* f) {
    if (!f || f->fclass != FI_CLASS_MR) return nullptr;
    return from_fid<mr>(reinterpret_cast<struct fid_mr*>(f));
}

// An uncached registration's close (or a fid that is not an MR): out of
// line, so that the cached close below keeps to few registers.
__attribute__((noinline)) int close_uncached(mr* m) {
    return guard([&] {
        if (!m) return -FI_EINVAL;
        if (int e = release_with(m->ibmr, ibv_dereg_mr)) {
            EVD_WARN(FI_LOG_MR, "ibv_dereg_mr: %s\n", strerror(e));
            return fi_err(e);
        }
        return retire(m, &m->dom->refs);
    });
}

int mr_close(struct fid* f) {
    mr* m = mr_of(f);
    if (m && m->ent) {
        // retire()'s steps, but the object's memory goes back to the cache,
        // for the next registration to be built in (nothing here throws)
        domain* dom = m->dom;
        mr_entry* ent = std::exchange(m->ent, nullptr);
        m->tag = kind{0};
        m->~mr();
        if (void* left = dom->mrc->put(ent, static_cast<void*>(m))) ::operator delete(left);
        dom->refs.put();
        return 0;
    }
    return close_uncached(m);
}

int mr_control(struct fid* f, int command, void* arg) {
    return guard([&] {
        mr* m = mr_of(f);
        if (!m) return -FI_EINVAL;
        if (command == FI_ENABLE) return 0;  // nothing to bind: FI_MR_ENDPOINT is not used
        return -FI_ENOSYS;
    });
}

struct fi_ops mr_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = mr_close,
    .bind = op_no_bind,
    .control = mr_control,
    .ops_open = op_no_ops_open,
    .tostr = fid_tostr,
    .ops_set = nullptr,
};

// What fi_mr_reg/regv/regattr may ask of evd: one host-memory range, the
// access bits it knows, no flags but libfabric's layer hints.
int check_reg(const struct iovec* iov, size_t count, uint64_t access, uint64_t flags,
              enum fi_hmem_iface iface) {
    if (count > 1) {
        EVD_WARN(FI_LOG_MR, "fi_mr_regv: %zu iovs; evd registers one contiguous range (mr_iov_limit 1)\n",
                 count);
        return -FI_EINVAL;
    }
    if (count == 1 && !iov) {
        EVD_WARN(FI_LOG_MR, "fi_mr_regv: NULL iov\n");
        return -FI_EINVAL;
    }
    if (iface != FI_HMEM_SYSTEM) {
        EVD_WARN(FI_LOG_MR, "fi_mr_regattr: only host memory (FI_HMEM_SYSTEM) is supported\n");
        return -FI_ENOSYS;
    }
    if (access & ~kAccessMask) {
        EVD_WARN(FI_LOG_MR, "fi_mr_reg: unsupported access bits 0x%llx\n",
                 static_cast<unsigned long long>(access & ~kAccessMask));
        return -FI_EINVAL;
    }
    // Bits 60-63 carry hints between libfabric's own layers (ofi_rxm passes
    // kNoCache for its bounce-buffer pools; do_reg honours it). The others
    // are ignored. Rejecting them made every ofi_rxm buffer-pool grow fail,
    // and ofi_rxm's fi_send/fi_inject returned -FI_ENOMEM.
    flags &= ~kLayerHints;
    if (flags) {
        EVD_WARN(FI_LOG_MR, "fi_mr_reg: unsupported flags 0x%llx\n",
                 static_cast<unsigned long long>(flags));
        return -FI_EBADFLAGS;
    }
    return 0;
}

int do_reg(struct fid* dfid, const struct iovec* iov, size_t count, uint64_t access,
           uint64_t flags, struct fid_mr** out, void* context, enum fi_hmem_iface iface) {
    if (!dfid || dfid->fclass != FI_CLASS_DOMAIN || !out) {
        EVD_WARN(FI_LOG_MR, "fi_mr_reg: invalid domain or NULL mr\n");
        return -FI_EINVAL;
    }
    domain* dom = domain_from_fid(reinterpret_cast<struct fid_domain*>(dfid));
    if (!dom) return -FI_EINVAL;
    if (int r = check_reg(iov, count, access, flags, iface)) return r;
    void* addr = count ? iov->iov_base : nullptr;
    size_t len = count ? iov->iov_len : 0;
    if (len && !addr) {
        EVD_WARN(FI_LOG_MR, "fi_mr_reg: NULL buffer with length %zu\n", len);
        return -FI_EINVAL;
    }
    const int acc = mr_ibv_access(access, dom->dev->iwarp, dom->dev->atomics);
    mr_entry* ent = nullptr;
    void* spare = nullptr;  // a closed object's memory, with a cached entry
    if (dom->mrc && !(flags & kNoCache)) {
        int err = 0;
        ent = dom->mrc->get(addr, len, acc, &err, &spare);
        if (!ent && err) return fi_err(err);  // logged
    }
    // (a block from the cache came from operator new(sizeof(mr)), as the
    // object's own delete expects)
    std::unique_ptr<mr> m(spare ? new (spare) mr() : new (std::nothrow) mr());
    if (!m) {
        if (ent) dom->mrc->put(ent, nullptr);
        return -FI_ENOMEM;
    }
    m->ent = ent;
    if (!m->ent) {
        m->ibmr.reset(ibv_reg_mr(dom->pd.get(), addr, len, acc));
        if (!m->ibmr) {
            int e = errno;
            EVD_WARN(FI_LOG_MR, "ibv_reg_mr(%p, %zu): %s\n", addr, len, strerror(e));
            return fi_err(e);
        }
    }
    struct ibv_mr* ib = m->ent ? m->ent->ibmr.get() : m->ibmr.get();
    m->dom = dom;
    m->lkey = ib->lkey;
    fid_init(*m, FI_CLASS_MR, context, &mr_fi_ops);
    m->fid.mem_desc = m.get();
    m->fid.key = ib->rkey;
    return hand_out(std::move(m), dom->refs, out);
}

// fi_mr_reg's first step: a registration-cache hit, whole. The request is
// one the general path (do_reg) would take without a word, the cache holds
// it (mr_cache::try_hit) and kept a closed object's memory to build the new
// one in: no allocation, no system call, the cache's lock alone. Answers
// false, with nothing changed, for everything else. The fid is the domain
// whose ops table led here (self_of: never null); its tag is checked all the
// same. A NULL buf never hits (no entry starts at page 0).
bool reg_hit(struct fid* dfid, const void* buf, size_t len, uint64_t access, uint64_t flags,
             struct fid_mr** out, void* context) noexcept {
    constexpr uint64_t kIgnored = kLayerHints & ~kNoCache;
    if (!len || !out || (access & ~kAccessMask) || (flags & ~kIgnored)) return false;
    domain* dom = self_of<domain>(reinterpret_cast<struct fid_domain*>(dfid));
    if (dom->tag != domain::kTag || !dom->mrc) return false;
    void* spare = nullptr;
    mr_entry* ent = dom->mrc->try_hit(reinterpret_cast<uintptr_t>(buf), len,
                                      dom->mr_access[mr_access_set(access)], &spare);
    if (!ent) return false;
    // the block came from operator new(sizeof(mr)), as the object's own
    // delete expects
    mr* m = new (spare) mr();
    struct ibv_mr* ib = ent->ibmr.get();
    m->ent = ent;
    m->dom = dom;
    m->lkey = ib->lkey;
    fid_init(*m, FI_CLASS_MR, context, &mr_fi_ops);
    m->fid.mem_desc = m;
    m->fid.key = ib->rkey;
    dom->refs.get();
    *out = &m->fid;
    return true;
}

// fi_mr_reg past the hit: out of line, for the hit to keep to few registers.
__attribute__((noinline)) int reg_general(struct fid* fid, const void* buf, size_t len,
                                          uint64_t access, uint64_t flags, struct fid_mr** out,
                                          void* context) {
    return guard([&] {
        struct iovec iov = {const_cast<void*>(buf), len};
        return do_reg(fid, &iov, 1, access, flags, out, context, FI_HMEM_SYSTEM);
    });
}

int mr_reg(struct fid* fid, const void* buf, size_t len, uint64_t access, uint64_t offset,
           uint64_t requested_key, uint64_t flags, struct fid_mr** out, void* context) {
    if (reg_hit(fid, buf, len, access, flags, out, context)) return 0;
    return reg_general(fid, buf, len, access, flags, out, context);
}

int mr_regv(struct fid* fid, const struct iovec* iov, size_t count, uint64_t access,
            uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr** out,
            void* context) {
    return guard([&] { return do_reg(fid, iov, count, access, flags, out, context, FI_HMEM_SYSTEM); });
}

int mr_regattr(struct fid* fid, const struct fi_mr_attr* attr, uint64_t flags,
               struct fid_mr** out) {
    return guard([&] {
        if (!attr) {
            EVD_WARN(FI_LOG_MR, "fi_mr_regattr: NULL attr\n");
            return -FI_EINVAL;
        }
        return do_reg(fid, attr->mr_iov, attr->iov_count, attr->access, flags, out,
                      attr->context, attr->iface);
    });
}

}  // namespace

struct fi_ops_mr mr_ops = {
    .size = sizeof(struct fi_ops_mr),
    .reg = mr_reg,
    .regv = mr_regv,
    .regattr = mr_regattr,
};

}  // namespace evd
