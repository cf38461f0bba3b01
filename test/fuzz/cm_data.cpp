// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// libFuzzer target: connection private data from the network. The bytes
// are what a peer put in a connect request, accept or reject (evd's header
// and the user's data); the first byte picks the rdma_cm event that carries
// them and the next four its status. Checks, beyond "no crash" (ASan and
// UBSan are on): the user data cm_unpack finds lies inside the input (a
// peer may send more than evd's kCmDataMax: an EQ entry has room for it),
// packs back, when it fits kCmDataMax, to a header that unpacks to the same
// bytes, and cm_translate's view of the event stays inside its private data.
// The same bytes as a resume message (resume/resume_wire.h) and as an
// accept that may carry an offer: what is accepted packs back to the same
// 36 bytes, and what is refused leaves the output untouched.
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cm/cm.h"
#include "resume/resume_wire.h"

#include "check.h"

namespace {

void check_unpack(const uint8_t* data, size_t size) {
    const uint8_t* user = nullptr;
    size_t len = 0;
    if (evd::cm_unpack(data, size, &user, &len) != 0) return;
    check(len <= 255 && len + evd::kCmHdrLen <= size);
    check(len == 0 || (user >= data && user + len <= data + size));
    if (len > evd::kCmDataMax) return;
    uint8_t buf[evd::kCmHdrLen + evd::kCmDataMax];
    int n = evd::cm_pack(buf, sizeof buf, user, len);
    check(n >= 0);
    const uint8_t* again = nullptr;
    size_t again_len = 0;
    check(evd::cm_unpack(buf, static_cast<size_t>(n), &again, &again_len) == 0);
    check(again_len == len && (len == 0 || std::memcmp(again, user, len) == 0));
}

void check_translate(const uint8_t* data, size_t size) {
    if (size < 5) return;
    struct rdma_cm_event ev {};
    const int type = data[0] % 24;  // past the last type too, as a newer kernel may send
    static_assert(sizeof type == sizeof ev.event);
    std::memcpy(&ev.event, &type, sizeof type);
    std::memcpy(&ev.status, data + 1, sizeof(int32_t));
    ev.param.conn.private_data = data + 5;
    ev.param.conn.private_data_len = static_cast<uint8_t>(size - 5 > 255 ? 255 : size - 5);
    evd::cm_action a = evd::cm_translate(ev);
    check(a.row != nullptr);
    if (a.data_len)
        check(a.data >= data + 5 && a.data + a.data_len <= data + 5 + ev.param.conn.private_data_len);
}

void check_resume(const uint8_t* data, size_t size) {
    namespace rs = evd::resume;
    rs::resume_msg m;
    m.count = 0xfeed;
    const rs::wire_error e = rs::resume_unpack(data, size, &m);
    if (e != rs::wire_error::none) {
        check(m.count == 0xfeed);
    } else {
        check(size >= rs::kResumeMsgLen && rs::looks_like_resume(data, size));
        uint8_t again[rs::kResumeMsgLen];
        check(rs::resume_pack(m, again, sizeof again));
        check(std::memcmp(again, data, sizeof again) == 0);
    }
    rs::resume_msg offer;
    if (rs::resume_offer_in(data, size, &offer) == rs::wire_error::none)
        check(offer.kind == rs::resume_kind::offer);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    check_unpack(data, size);
    check_translate(data, size);
    check_resume(data, size);
    return 0;
}
