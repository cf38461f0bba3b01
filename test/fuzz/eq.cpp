// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// libFuzzer target: an EQ driven by arbitrary application calls. The input
// is a program: each step picks fi_eq_write, the write_err extension,
// fi_eq_read, fi_eq_readerr (with or without the caller's err_data
// buffer), fi_eq_sread, the depth extension or fi_eq_strerror, with
// lengths, flags and bytes from the input. Beyond "no crash" (ASan, UBSan):
// while no error entry was written, every event read back is the oldest
// one written, byte for byte, and a read that does not fit says
// -FI_ETOOSMALL without losing it.
#include <fuzzer/FuzzedDataProvider.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext_evd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "eq/eq.h"
#include "fabric.h"

#include "check.h"

namespace {

struct fid_fabric* fabric() {
    static struct fid_fabric* fab = [] {
        struct fi_fabric_attr a {};
        a.api_version = FI_VERSION(1, 17);
        struct fid_fabric* f = nullptr;
        check(evd::fabric_open(&a, &f, nullptr) == 0);
        return f;
    }();
    return fab;
}

struct written {
    uint32_t event;
    std::vector<uint8_t> bytes;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider in(data, size);
    struct fi_eq_attr attr {};
    attr.size = in.ConsumeIntegralInRange<size_t>(1, 64);
    attr.wait_obj = in.ConsumeBool() ? FI_WAIT_FD : FI_WAIT_NONE;
    attr.flags = FI_WRITE;
    struct fid_eq* q = nullptr;
    check(evd::eq_open(fabric(), &attr, &q, nullptr) == 0);
    struct fi_evd_eq_ops* ops = nullptr;
    check(fi_open_ops(&q->fid, FI_EVD_EQ_OPS_V1, 0, reinterpret_cast<void**>(&ops), nullptr) == 0);
    std::deque<written> model;
    bool errors = false;
    std::vector<uint8_t> buf;
    for (int steps = 0; steps < 64 && in.remaining_bytes(); steps++) {
        switch (in.ConsumeIntegralInRange(0, 6)) {
        case 0: {
            uint32_t event = in.ConsumeIntegral<uint32_t>();
            buf = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 5000));
            ssize_t r = fi_eq_write(q, event, buf.data(), buf.size(), 0);
            if (r == static_cast<ssize_t>(buf.size())) model.push_back({event, buf});
            break;
        }
        case 1: {
            struct fi_eq_err_entry e {};
            e.fid = reinterpret_cast<fid_t>(in.ConsumeIntegral<uintptr_t>());
            e.err = in.ConsumeIntegral<int>();
            e.prov_errno = in.ConsumeIntegral<int>();
            buf = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 5000));
            e.err_data = buf.empty() ? nullptr : buf.data();
            e.err_data_size = buf.size();
            if (ops->write_err(q, &e, 0) > 0) errors = true;
            break;
        }
        case 2: {
            size_t len = in.ConsumeIntegralInRange<size_t>(0, 5000);
            uint64_t flags = in.ConsumeBool() ? FI_PEEK : 0;
            std::vector<uint8_t> out(len);
            uint32_t event = 0;
            ssize_t r = fi_eq_read(q, &event, len ? out.data() : nullptr, len, flags);
            if (errors) break;
            if (model.empty()) {
                check(r == -FI_EAGAIN);
                break;
            }
            const written& w = model.front();
            if (len < w.bytes.size()) {
                check(r == -FI_ETOOSMALL);
                break;
            }
            check(r == static_cast<ssize_t>(w.bytes.size()) && event == w.event);
            check(w.bytes.empty() || std::memcmp(out.data(), w.bytes.data(), w.bytes.size()) == 0);
            if (!flags) model.pop_front();
            break;
        }
        case 3: {
            struct fi_eq_err_entry e {};
            std::vector<uint8_t> user(in.ConsumeIntegralInRange<size_t>(0, 600));
            if (!user.empty() && in.ConsumeBool()) {
                e.err_data = user.data();
                e.err_data_size = user.size();
            }
            ssize_t r = fi_eq_readerr(q, &e, in.ConsumeBool() ? FI_PEEK : 0);
            check(r == -FI_EAGAIN || r == static_cast<ssize_t>(sizeof e));
            if (r > 0 && e.err_data_size && e.err_data) {
                volatile uint8_t sink = static_cast<const uint8_t*>(e.err_data)[e.err_data_size - 1];
                (void)sink;  // the whole err_data is readable
            }
            break;
        }
        case 4: {
            if (attr.wait_obj == FI_WAIT_NONE) break;
            uint32_t event;
            std::vector<uint8_t> out(8192);
            ssize_t r = fi_eq_sread(q, &event, out.data(), out.size(), 0, FI_PEEK);
            check(r != -FI_EINVAL);
            break;
        }
        case 5: {
            struct fi_evd_eq_depth d {};
            check(ops->depth(q, &d) == 0);
            if (!errors) check(d.events == model.size());
            break;
        }
        case 6: {
            // err_data has no length in fi_eq_strerror: give it either none or
            // a whole record's worth of arbitrary bytes.
            std::vector<uint8_t> rec = in.ConsumeBytes<uint8_t>(sizeof(struct fi_evd_async_err));
            rec.resize(sizeof(struct fi_evd_async_err));
            char text[128];
            const char* s = fi_eq_strerror(q, in.ConsumeIntegral<int>(),
                                           in.ConsumeBool() ? rec.data() : nullptr, text,
                                           in.ConsumeIntegralInRange<size_t>(0, sizeof text));
            check(s != nullptr);
            check(std::strlen(s) < 4096);
            break;
        }
        }
    }
    check(fi_close(&q->fid) == 0);
    return 0;
}
