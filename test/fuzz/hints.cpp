// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// libFuzzer target: fi_getinfo hints from an application, and the source
// and destination addresses in them, answered for two made-up devices (a
// RoCE one with IPv4 and IPv6 addresses, an InfiniBand one with none) by
// the same pure function fi_getinfo uses (build_infos). Every field the
// hint filter reads is taken from the input, addresses are exactly as long
// as their given length (ASan sees any read past them). Beyond "no crash":
// the answer is 0 with a list, -FI_ENODATA or -FI_EINVAL, and every fi_info
// in the list is of type FI_EP_MSG (FI_EP_DGRAM when the hints ask for it,
// named by a 32-byte FI_ADDR_IB_UD name), on one of the devices, with caps
// within what evd offers that type. The source and destination names of
// datagram hints are taken from the input too.
#include <arpa/inet.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <infiniband/verbs.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../common/fake_devices.h"
#include "info/hint_rules.h"
#include "info/info.h"

#include "check.h"

namespace {

// A heap copy of exactly n input bytes (nullptr for none), freed by fi_freeinfo.
void* exact(FuzzedDataProvider& in, size_t* n) {
    std::vector<uint8_t> b = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 40));
    *n = b.size();
    if (b.empty()) return nullptr;
    void* p = std::malloc(b.size());
    std::memcpy(p, b.data(), b.size());
    return p;
}

template <class T>
void take(FuzzedDataProvider& in, T* field) {
    if (in.ConsumeBool()) {
        auto v = in.ConsumeIntegral<uint64_t>();
        std::memcpy(field, &v, sizeof *field);  // enums read as raw integers
    }
}

void fill(FuzzedDataProvider& in, struct fi_info* h) {
    take(in, &h->caps);
    take(in, &h->mode);
    take(in, &h->addr_format);
    h->src_addr = exact(in, &h->src_addrlen);
    h->dest_addr = exact(in, &h->dest_addrlen);
    // A length shorter than the buffer (never longer: that would be the
    // caller's lie about its own memory, which evd cannot see).
    if (h->src_addrlen && in.ConsumeBool())
        h->src_addrlen = in.ConsumeIntegralInRange<size_t>(0, h->src_addrlen);
    if (h->dest_addrlen && in.ConsumeBool())
        h->dest_addrlen = in.ConsumeIntegralInRange<size_t>(0, h->dest_addrlen);
    struct fi_domain_attr* d = h->domain_attr;
    take(in, &d->threading);
    take(in, &d->control_progress);
    take(in, &d->data_progress);
    take(in, &d->resource_mgmt);
    take(in, &d->av_type);
    take(in, &d->mr_mode);
    take(in, &d->mr_key_size);
    take(in, &d->cq_data_size);
    take(in, &d->cq_cnt);
    take(in, &d->ep_cnt);
    take(in, &d->tx_ctx_cnt);
    take(in, &d->rx_ctx_cnt);
    take(in, &d->max_ep_tx_ctx);
    take(in, &d->max_ep_rx_ctx);
    take(in, &d->max_ep_stx_ctx);
    take(in, &d->max_ep_srx_ctx);
    take(in, &d->cntr_cnt);
    take(in, &d->mr_iov_limit);
    take(in, &d->caps);
    take(in, &d->mode);
    take(in, &d->max_err_data);
    take(in, &d->mr_cnt);
    struct fi_ep_attr* e = h->ep_attr;
    take(in, &e->type);
    take(in, &e->protocol);
    take(in, &e->protocol_version);
    take(in, &e->max_msg_size);
    take(in, &e->msg_prefix_size);
    take(in, &e->max_order_raw_size);
    take(in, &e->max_order_war_size);
    take(in, &e->max_order_waw_size);
    take(in, &e->mem_tag_format);
    take(in, &e->tx_ctx_cnt);
    take(in, &e->rx_ctx_cnt);
    struct fi_tx_attr* t = h->tx_attr;
    take(in, &t->caps);
    take(in, &t->mode);
    take(in, &t->op_flags);
    take(in, &t->msg_order);
    take(in, &t->comp_order);
    take(in, &t->inject_size);
    take(in, &t->size);
    take(in, &t->iov_limit);
    take(in, &t->rma_iov_limit);
    struct fi_rx_attr* r = h->rx_attr;
    take(in, &r->caps);
    take(in, &r->mode);
    take(in, &r->op_flags);
    take(in, &r->msg_order);
    take(in, &r->comp_order);
    take(in, &r->size);
    take(in, &r->iov_limit);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::vector<evd::dev_desc> devs = evdtest::fake_devices();
    FuzzedDataProvider in(data, size);
    const uint32_t versions[] = {FI_VERSION(1, 4), FI_VERSION(1, 5), FI_VERSION(1, 17),
                                 FI_VERSION(1, 21), FI_VERSION(2, 0), FI_VERSION(2, 1)};
    const uint32_t version = versions[in.ConsumeIntegralInRange<size_t>(0, 5)];
    const bool null_hints = in.ConsumeIntegralInRange(0, 15) == 0;
    struct fi_info* h = fi_allocinfo();
    check(h != nullptr);
    fill(in, h);
    evd::addr_query q;
    if (in.ConsumeBool()) {
        q.has_ud_src = in.ConsumeBool();
        q.has_ud_dest = in.ConsumeBool();
        std::vector<uint8_t> b = in.ConsumeBytes<uint8_t>(64);
        b.resize(64);
        std::memcpy(q.ud_src, b.data(), 32);
        std::memcpy(q.ud_dest, b.data() + 32, 32);
    }
    struct fi_info* out = nullptr;
    int rc = evd::build_infos(devs, version, q, null_hints ? nullptr : h, &out);
    check(rc == 0 || rc == -FI_ENODATA || rc == -FI_EINVAL);
    check((rc == 0) == (out != nullptr));
    for (struct fi_info* i = out; i; i = i->next) {
        check(i->ep_attr);
        const bool dgram = !null_hints && evd::hint_rule_type(h) == evd::kRuleDgram;
        check(i->ep_attr->type == (dgram ? FI_EP_DGRAM : FI_EP_MSG));
        check((i->caps & ~(dgram ? evd::kDgramCaps : evd::kCaps)) == 0);
        if (dgram) check(i->addr_format == FI_ADDR_IB_UD && i->src_addrlen == 32);
        check(i->domain_attr && i->domain_attr->name);
        check(!std::strcmp(i->domain_attr->name, "roce0") || !std::strcmp(i->domain_attr->name, "ib0") ||
              !std::strcmp(i->domain_attr->name, "iw0"));
    }
    fi_freeinfo(out);
    if (!null_hints) check(evd::check_static_hints(version, h) <= 0);
    fi_freeinfo(h);
    return 0;
}
