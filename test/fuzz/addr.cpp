// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// libFuzzer target: the addresses an application hands evd.
//  * fi_getinfo's node and service strings, resolved the way fi_getinfo
//    resolves them (resolve_addresses, numeric only: no name service is
//    asked), with or without FI_SOURCE and with hints of any address format
//    and any source or destination bytes;
//  * socket addresses of any bytes and any claimed length (src_addr,
//    dest_addr, fi_setname, fi_connect), as evd takes them (sockaddr_any),
//    prints them for logs, sets their port and copies them out under
//    fi_getname's buffer contract (cm_copy_addr).
// Every buffer is exactly as long as its stated length, so ASan sees any read
// or write past it. Beyond "no crash": the documented answers only, and the
// copy-out never writes more than the caller's length and always reports
// the length needed.
#include <arpa/inet.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <infiniband/ib.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/rdma_cma.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cm/cm.h"
#include "info/info.h"

#include "check.h"

namespace {

// A heap copy of exactly n bytes (nullptr for none).
struct exact_buf {
    void* p = nullptr;
    size_t n = 0;
    explicit exact_buf(const std::vector<uint8_t>& b) : n(b.size()) {
        if (n) {
            p = std::malloc(n);
            std::memcpy(p, b.data(), n);
        }
    }
    exact_buf(const exact_buf&) = delete;
    exact_buf& operator=(const exact_buf&) = delete;
    ~exact_buf() { std::free(p); }
};

size_t family_len(int family) {
    switch (family) {
    case AF_INET: return sizeof(struct sockaddr_in);
    case AF_INET6: return sizeof(struct sockaddr_in6);
    case AF_IB: return sizeof(struct sockaddr_ib);
    default: return 0;
    }
}

// Bytes that are often a well-formed address: a known family first.
std::vector<uint8_t> address_bytes(FuzzedDataProvider& in) {
    std::vector<uint8_t> b = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 48));
    if (b.size() >= sizeof(sa_family_t) && in.ConsumeBool()) {
        const sa_family_t fams[] = {AF_INET, AF_INET6, AF_IB, AF_UNSPEC, AF_UNIX};
        sa_family_t f = fams[in.ConsumeIntegralInRange<size_t>(0, 4)];
        std::memcpy(b.data(), &f, sizeof f);
    }
    return b;
}

void check_taken(const evd::sockaddr_any& a) {
    check(a.len == 0 || a.len == family_len(a.family()));
}

// A socket address as evd takes, prints, re-ports and copies it out.
void one_address(FuzzedDataProvider& in) {
    exact_buf raw(address_bytes(in));
    size_t claimed = raw.n;
    if (claimed && in.ConsumeBool()) claimed = in.ConsumeIntegralInRange<size_t>(0, raw.n);
    evd::sockaddr_any a;
    bool ok = a.set(static_cast<const struct sockaddr*>(raw.p), claimed);
    if (!ok) {
        check(a.len == 0);
        return;
    }
    const size_t need = family_len(a.family());
    check(need && a.len == need && claimed >= need);
    check(!std::memcmp(&a.ss, raw.p, need));
    check(evd::cm_addrlen(a.sa()) == need);
    std::string s = evd::addr_str(a);
    check(!s.empty() && s.size() < INET6_ADDRSTRLEN + 16);
    uint16_t port = in.ConsumeIntegral<uint16_t>();
    evd::set_port(a, port);
    if (a.family() == AF_INET)
        check(ntohs(reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_port) == port);
    if (a.family() == AF_INET6)
        check(ntohs(reinterpret_cast<const sockaddr_in6*>(&a.ss)->sin6_port) == port);

    // fi_getname's contract: *addrlen in = the buffer's size, out = the size
    // needed; -FI_ETOOSMALL when it did not fit, and never a byte beyond it.
    size_t have = in.ConsumeIntegralInRange<size_t>(0, 2 * need);
    std::vector<uint8_t> sized(have);
    exact_buf out(sized);
    size_t len = have;
    int rc = evd::cm_copy_addr(a.sa(), out.p, &len);
    check(len == need);
    if (have >= need) {
        check(rc == 0);
        check(!std::memcmp(out.p, &a.ss, need));
    } else {
        check(rc == -FI_ETOOSMALL);
        if (have) check(!std::memcmp(out.p, &a.ss, have));
    }
    check(evd::cm_copy_addr(a.sa(), out.p, nullptr) == -FI_EINVAL);
}

// fi_getinfo's node/service with hints carrying addresses.
void one_query(FuzzedDataProvider& in) {
    std::string node = in.ConsumeRandomLengthString(64);
    std::string service = in.ConsumeRandomLengthString(16);
    const bool with_node = in.ConsumeBool(), with_service = in.ConsumeBool();
    uint64_t flags = FI_NUMERICHOST;  // never a name service lookup
    if (in.ConsumeBool()) flags |= FI_SOURCE;
    struct fi_info* h = in.ConsumeBool() ? fi_allocinfo() : nullptr;
    exact_buf src(address_bytes(in)), dest(address_bytes(in));
    if (h) {
        const uint32_t formats[] = {FI_FORMAT_UNSPEC, FI_SOCKADDR, FI_SOCKADDR_IN,
                                    FI_SOCKADDR_IN6, FI_SOCKADDR_IB, FI_ADDR_STR};
        h->addr_format = formats[in.ConsumeIntegralInRange<size_t>(0, 5)];
        h->src_addr = src.p;  // borrowed: cleared before fi_freeinfo
        h->src_addrlen = src.n;
        h->dest_addr = dest.p;
        h->dest_addrlen = dest.n;
    }
    evd::addr_query q;
    int rc = evd::resolve_addresses(with_node ? node.c_str() : nullptr,
                                    with_service ? service.c_str() : nullptr, flags, h, q);
    if (rc != 0 && rc != -FI_ENODATA && rc != -FI_EINVAL && rc != -FI_ENOMEM)
        std::fprintf(stderr, "resolve_addresses answered %d\n", rc);
    check(rc == 0 || rc == -FI_ENODATA || rc == -FI_EINVAL || rc == -FI_ENOMEM);
    check_taken(q.src);
    check_taken(q.dest);
    if (h) {
        h->src_addr = h->dest_addr = nullptr;
        h->src_addrlen = h->dest_addrlen = 0;
        fi_freeinfo(h);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider in(data, size);
    if (in.ConsumeBool())
        one_query(in);
    else
        one_address(in);
    return 0;
}
