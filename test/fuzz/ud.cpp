// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// libFuzzer target: what a datagram endpoint reads that others wrote.
//  * the 40-byte header in front of every UD receive (network data): the
//    sender's GID is found or refused (grh_source_gid), never read past;
//  * FI_ADDR_IB_UD names in their text form ("fi_addr_ib_ud://...", from
//    fi_getinfo's node): a text that parses prints back to a text that
//    parses to the same name; any 32 bytes print within the buffer given;
//  * GIDs as IP addresses and back (gid_to_sockaddr, sockaddr_to_gid).
#include <fuzzer/FuzzedDataProvider.h>
#include <netinet/in.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dgram/grh.h"
#include "dgram/ud_addr.h"

#include "check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider in(data, size);
    switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0: {  // a receive header
        std::vector<uint8_t> hdr = in.ConsumeBytes<uint8_t>(evd::kGrhLen);
        hdr.resize(evd::kGrhLen);
        auto* exact = static_cast<uint8_t*>(std::malloc(evd::kGrhLen));
        std::memcpy(exact, hdr.data(), evd::kGrhLen);
        uint8_t gid[16];
        if (evd::grh_source_gid(exact, gid)) {
            struct in_addr v4 {};
            // an IPv4 header gives an IPv4-mapped GID, anything else the bytes at 8
            check(evd::gid_is_v4_mapped(gid, &v4) || !std::memcmp(gid, exact + 8, 16));
        }
        std::free(exact);
        break;
    }
    case 1: {  // the text form
        std::string text = in.ConsumeRandomLengthString(200);
        if (in.ConsumeBool()) text = std::string(evd::kUdAddrPrefix) + text;
        evd::ud_name n{};
        std::string why;
        if (evd::ud_parse(text.c_str(), &n, &why)) {
            char buf[128];
            const size_t need = evd::ud_straddr(n, buf, sizeof buf);
            check(need < sizeof buf);
            evd::ud_name back{};
            check(evd::ud_parse(buf, &back, &why));
            check(!std::memcmp(back.gid, n.gid, 16) && back.qpn == n.qpn && back.lid == n.lid &&
                  back.pkey == n.pkey && back.sl == n.sl);
        } else {
            check(!why.empty());
        }
        break;
    }
    default: {  // any 32 bytes as a name, printed into any buffer; its GID as an address
        std::vector<uint8_t> raw = in.ConsumeBytes<uint8_t>(evd::kUdNameLen);
        raw.resize(evd::kUdNameLen);
        evd::ud_name n;
        std::memcpy(&n, raw.data(), evd::kUdNameLen);
        const size_t len = in.ConsumeIntegralInRange<size_t>(0, 96);
        char* buf = len ? static_cast<char*>(std::malloc(len)) : nullptr;
        const size_t need = evd::ud_straddr(n, buf, len);
        if (len) check(std::strlen(buf) < len && std::strlen(buf) <= need);
        std::free(buf);
        struct sockaddr_storage ss {};
        socklen_t sl = 0;
        evd::gid_to_sockaddr(n.gid, n.service, &ss, &sl);
        uint8_t gid[16];
        check(evd::sockaddr_to_gid(reinterpret_cast<sockaddr*>(&ss), gid));
        check(!std::memcmp(gid, n.gid, 16));
        break;
    }
    }
    return 0;
}
