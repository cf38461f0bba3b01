// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Fault injection for the tests (LD_PRELOAD=libevd_fault.so): wraps every
// rdma-core and system entry evd calls that can fail, counts the calls made
// from libevd-fi.so itself (the caller's return address is looked up with
// dladdr, so libfabric's, librdmacm's and the test's own calls pass through
// uncounted) and makes one chosen call fail the way the real one fails.
//
//   EVD_FAULT=SYMBOL:N        the Nth call of SYMBOL from evd fails
//   EVD_FAULT_COUNT=FILE      at exit, "SYMBOL COUNT" lines for every wrapped
//                             symbol evd called, then "fired SYMBOL N ERRNO"
//                             when the fault was injected
//   EVD_FAULT_LIST=1          at exit, prints every wrapped symbol to stderr
//   EVD_FAULT_BACKTRACE=1     prints the stack of the failing call
//   EVD_FAULT_FROM=NAME       counts (and fails) the calls made from the
//                             library whose path contains NAME instead of
//                             libevd-fi.so ("libfabric.so" for the verbs
//                             provider; "*": from anywhere). For the
//                             benchmarks' registration counts.
//   In EVD_FAULT_COUNT, %p stands for the process id (one file per MPI rank).
//
// Each wrapper keeps the failure convention of its function: NULL + errno,
// -1 + errno, or a positive errno returned (ibv_modify_qp, ibv_query_*).
// The errno is the one the real call returns in that situation (ENOMEM where
// the kernel or the library allocates, EMFILE for fd creators, EINTR for the
// waits, EADDRINUSE for binds and listens, and so on; see the table below).
//
// Not failed, on purpose: the destroy/dealloc/dereg/close calls (a failed
// teardown can only be reported and leaked; ibv_destroy_qp is wrapped only
// to keep break_qp.cpp's list of evd's QPs), ibv_get_cq_event and
// ibv_get_async_event (read on evd's non-blocking fds: EAGAIN is their normal
// "nothing", already every call's path), rdma_ack_cm_event (cannot fail),
// pthread, clock and futex calls, and malloc (evd allocates with new, which
// is wrapped; a malloc wrapper would be called by dlsym itself).
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <new>

#include "break_qp.h"

namespace {

// X(symbol, errno injected)
#define EVD_FAULT_SYMBOLS(X)                \
    /* libibverbs */                        \
    X(ibv_get_device_list, ENOMEM)          \
    X(ibv_open_device, ENODEV)              \
    X(ibv_alloc_pd, ENOMEM)                 \
    X(ibv_create_comp_channel, EMFILE)      \
    X(ibv_create_cq, ENOMEM)                \
    X(ibv_create_qp, ENOMEM)                \
    X(ibv_create_srq, ENOMEM)               \
    X(ibv_modify_qp, EINVAL)                \
    X(ibv_modify_srq, EINVAL)               \
    X(ibv_query_device, ENODEV)             \
    X(ibv_query_port, ENODEV)               \
    X(ibv_query_gid, ENODEV)                \
    X(ibv_query_pkey, ENODEV)               \
    X(ibv_query_qp, ENODEV)                 \
    X(ibv_query_ece, EOPNOTSUPP)            \
    X(ibv_reg_mr, ENOMEM)                   \
    X(ibv_reg_mr_iova, ENOMEM)              \
    X(ibv_reg_mr_iova2, ENOMEM)             \
    /* librdmacm */                         \
    X(rdma_get_devices, ENOMEM)             \
    X(rdma_getaddrinfo, ENOMEM)             \
    X(rdma_create_event_channel, EMFILE)    \
    X(rdma_create_id, ENOMEM)               \
    X(rdma_bind_addr, EADDRINUSE)           \
    X(rdma_resolve_addr, EADDRNOTAVAIL)     \
    X(rdma_resolve_route, ENOMEM)           \
    X(rdma_create_qp, ENOMEM)               \
    X(rdma_connect, ENOMEM)                 \
    X(rdma_listen, EADDRINUSE)              \
    X(rdma_accept, EINVAL)                  \
    X(rdma_reject, EINVAL)                  \
    X(rdma_disconnect, EINVAL)              \
    X(rdma_notify, EINVAL)                  \
    X(rdma_migrate_id, ENOMEM)              \
    X(rdma_set_local_ece, EOPNOTSUPP)       \
    X(rdma_get_cm_event, ENOMEM)            \
    /* libc */                              \
    X(epoll_create1, EMFILE)                \
    X(epoll_ctl, ENOMEM)                    \
    X(epoll_wait, EINTR)                    \
    X(eventfd, EMFILE)                      \
    X(timerfd_create, EMFILE)               \
    X(timerfd_settime, EINVAL)              \
    X(pipe2, EMFILE)                        \
    X(fcntl, EINVAL)                        \
    X(socket, EMFILE)                       \
    X(connect, ECONNREFUSED)                \
    X(getsockname, ENOBUFS)                 \
    X(sendto, ENOBUFS)                      \
    X(recv, ENOBUFS)                        \
    X(poll, EINTR)                          \
    X(ppoll, EINTR)                         \
    X(getifaddrs, ENOMEM)                   \
    X(strdup, ENOMEM)                       \
    /* libstdc++: operator new, new[] and their nothrow forms */ \
    X(_Znwm, ENOMEM)                        \
    X(_Znam, ENOMEM)                        \
    X(_ZnwmRKSt9nothrow_t, ENOMEM)          \
    X(_ZnamRKSt9nothrow_t, ENOMEM)

enum sym_id {
#define X(name, err) id_##name,
    EVD_FAULT_SYMBOLS(X)
#undef X
        id_count
};

struct sym_info {
    const char* name;
    int err;
};
constexpr sym_info kSyms[] = {
#define X(name, err) {#name, err},
    EVD_FAULT_SYMBOLS(X)
#undef X
};

std::atomic<unsigned long> g_count[id_count];
int g_fault_sym = -1;        // the symbol to fail, -1: none
unsigned long g_fault_n = 0;  // its call number (1-based)
std::atomic<int> g_fired{0};
const char* g_count_file = nullptr;

const char* g_from = "libevd-fi.so";  // EVD_FAULT_FROM

// True when `ret` (a return address) lies in the library counted
// (libevd-fi.so unless EVD_FAULT_FROM says otherwise).
bool from_evd(void* ret) {
    if (g_from[0] == '*' && !g_from[1]) return true;
    Dl_info di;
    if (!dladdr(ret, &di) || !di.dli_fname) return false;
    return strstr(di.dli_fname, g_from) != nullptr;
}

// Counts a call to `id` made from `ret`; true when this call must fail.
bool should_fail(int id, void* ret) {
    if (!from_evd(ret)) return false;
    unsigned long n = g_count[id].fetch_add(1) + 1;
    if (id != g_fault_sym || n != g_fault_n) return false;
    g_fired.store(1);
    fprintf(stderr, "evd-fault: injecting %s#%lu: %s\n", kSyms[id].name, n,
            strerror(kSyms[id].err));
    if (getenv("EVD_FAULT_BACKTRACE")) {  // where evd made the call (addr2line the offsets)
        void* frames[24];
        backtrace_symbols_fd(frames, backtrace(frames, 24), 2);
    }
    return true;
}

void* real(const char* name) {
    void* p = dlsym(RTLD_NEXT, name);
    if (!p) {
        fprintf(stderr, "evd-fault: no next definition of %s\n", name);
        abort();
    }
    return p;
}

// Parses SYMBOL:N into g_fault_sym / g_fault_n (aborts on a bad spec: the
// runner wrote it); "" or null: no fault.
void arm(const char* spec) {
    g_fault_sym = -1;
    g_fault_n = 0;
    g_fired.store(0);
    if (!spec || !*spec) return;
    const char* colon = strrchr(spec, ':');
    if (!colon) {
        fprintf(stderr, "evd-fault: EVD_FAULT=%s is not SYMBOL:N\n", spec);
        abort();
    }
    size_t len = static_cast<size_t>(colon - spec);
    for (int i = 0; i < id_count; ++i)
        if (strlen(kSyms[i].name) == len && !strncmp(kSyms[i].name, spec, len)) g_fault_sym = i;
    g_fault_n = strtoul(colon + 1, nullptr, 10);
    if (g_fault_sym < 0 || g_fault_n == 0) {
        fprintf(stderr, "evd-fault: EVD_FAULT=%s names no wrapped symbol or no call\n", spec);
        abort();
    }
}

// Writes "SYMBOL COUNT" for every symbol called so far, then the fired line;
// %p in `file` stands for the process id.
void write_counts(const char* file) {
    char path[4096];
    size_t n = 0;
    for (const char* c = file; *c && n + 24 < sizeof path; ++c) {
        if (c[0] == '%' && c[1] == 'p') {
            n += static_cast<size_t>(snprintf(path + n, sizeof path - n, "%d", static_cast<int>(getpid())));
            ++c;
        } else {
            path[n++] = *c;
        }
    }
    path[n] = '\0';
    FILE* f = fopen(path, "w");
    if (!f) return;
    for (int i = 0; i < id_count; ++i) {
        unsigned long k = g_count[i].load();
        if (k) fprintf(f, "%s %lu\n", kSyms[i].name, k);
    }
    if (g_fired.load())
        fprintf(f, "fired %s %lu %d\n", kSyms[g_fault_sym].name, g_fault_n,
                kSyms[g_fault_sym].err);
    fclose(f);
}

char g_count_file_buf[4096];

__attribute__((constructor)) void fault_init() {
    g_count_file = getenv("EVD_FAULT_COUNT");
    if (g_count_file && !*g_count_file) g_count_file = nullptr;
    if (const char* from = getenv("EVD_FAULT_FROM"); from && *from) g_from = from;
    arm(getenv("EVD_FAULT"));
}

__attribute__((destructor)) void fault_fini() {
    if (getenv("EVD_FAULT_LIST"))
        for (int i = 0; i < id_count; ++i) fprintf(stderr, "%s\n", kSyms[i].name);
    if (g_count_file) write_counts(g_count_file);
}

}  // namespace

// For a process that forks one run per site after its start-up
// (test/fault/scenario.cpp --serve): the counts go on from the parent's, so
// a child's call numbers are a cold run's.
//   evd_fault_rearm(SPEC, FILE): from now on SPEC ("" none) is the fault and
//     FILE gets the counts at exit
//   evd_fault_snapshot(FILE): the counts so far, now
extern "C" __attribute__((visibility("default"))) void evd_fault_rearm(const char* spec,
                                                                      const char* file) {
    arm(spec);
    g_count_file = nullptr;
    if (file && *file && strlen(file) < sizeof g_count_file_buf) {
        strcpy(g_count_file_buf, file);
        g_count_file = g_count_file_buf;
    }
}
extern "C" __attribute__((visibility("default"))) void evd_fault_snapshot(const char* file) {
    write_counts(file);
}

// Failure conventions: PTR (NULL + errno), NEG (-1 + errno), POS (the errno
// returned, errno set too, as rdma-core's providers leave it).
#define FAIL_PTR(id) (errno = kSyms[id].err, nullptr)
#define FAIL_NEG(id) (errno = kSyms[id].err, -1)
#define FAIL_POS(id) (errno = kSyms[id].err, kSyms[id].err)

#define WRAP(ret_t, name, fail, params, args)                                       \
    extern "C" __attribute__((visibility("default"), noinline)) ret_t name params { \
        using fn_t = ret_t(*) params;                                               \
        static fn_t next = reinterpret_cast<fn_t>(real(#name));                     \
        if (should_fail(id_##name, __builtin_return_address(0))) return fail(id_##name); \
        return next args;                                                           \
    }

using P = void*;
// libibverbs (opaque pointers: the wrappers only pass them on)
WRAP(P, ibv_get_device_list, FAIL_PTR, (int* n), (n))
WRAP(P, ibv_open_device, FAIL_PTR, (P dev), (dev))
WRAP(P, ibv_alloc_pd, FAIL_PTR, (P ctx), (ctx))
WRAP(P, ibv_create_comp_channel, FAIL_PTR, (P ctx), (ctx))
WRAP(P, ibv_create_cq, FAIL_PTR, (P ctx, int cqe, P cq_ctx, P ch, int vec), (ctx, cqe, cq_ctx, ch, vec))
// ibv_create_qp and ibv_destroy_qp also tell break_qp.cpp which QPs evd
// holds (evd_fault_break_qps); the destroy is never failed.
extern "C" __attribute__((visibility("default"), noinline)) P ibv_create_qp(P pd, P attr) {
    using fn_t = P (*)(P, P);
    static fn_t next = reinterpret_cast<fn_t>(real("ibv_create_qp"));
    void* ret = __builtin_return_address(0);
    if (should_fail(id_ibv_create_qp, ret)) return FAIL_PTR(id_ibv_create_qp);
    P qp = next(pd, attr);
    if (qp && from_evd(ret)) evd_fault::qp_made(qp);
    return qp;
}
extern "C" __attribute__((visibility("default"), noinline)) int ibv_destroy_qp(P qp) {
    using fn_t = int (*)(P);
    static fn_t next = reinterpret_cast<fn_t>(real("ibv_destroy_qp"));
    evd_fault::qp_gone(qp);
    return next(qp);
}
WRAP(P, ibv_create_srq, FAIL_PTR, (P pd, P attr), (pd, attr))
WRAP(int, ibv_modify_qp, FAIL_POS, (P qp, P attr, int mask), (qp, attr, mask))
WRAP(int, ibv_modify_srq, FAIL_POS, (P srq, P attr, int mask), (srq, attr, mask))
WRAP(int, ibv_query_device, FAIL_POS, (P ctx, P attr), (ctx, attr))
WRAP(int, ibv_query_port, FAIL_POS, (P ctx, unsigned char port, P attr), (ctx, port, attr))
WRAP(int, ibv_query_gid, FAIL_NEG, (P ctx, unsigned char port, int i, P gid), (ctx, port, i, gid))
WRAP(int, ibv_query_pkey, FAIL_NEG, (P ctx, unsigned char port, int i, P pkey), (ctx, port, i, pkey))
WRAP(int, ibv_query_qp, FAIL_POS, (P qp, P attr, int mask, P init), (qp, attr, mask, init))
WRAP(int, ibv_query_ece, FAIL_POS, (P qp, P ece), (qp, ece))
// The registration calls nest: libibverbs' ibv_reg_mr and ibv_reg_mr_iova
// end in ibv_reg_mr_iova2, often as a tail call whose return address is the
// caller's. One registration is one call: the inner one passes uncounted.
thread_local int t_in_reg = 0;
#define WRAP_REG_OUTER(name, params, args)                                          \
    extern "C" __attribute__((visibility("default"), noinline)) P name params {     \
        using fn_t = P(*) params;                                                   \
        static fn_t next = reinterpret_cast<fn_t>(real(#name));                     \
        if (should_fail(id_##name, __builtin_return_address(0))) return FAIL_PTR(id_##name); \
        ++t_in_reg;                                                                 \
        P r = next args;                                                            \
        --t_in_reg;                                                                 \
        return r;                                                                   \
    }
WRAP_REG_OUTER(ibv_reg_mr, (P pd, P addr, size_t len, int access), (pd, addr, len, access))
WRAP_REG_OUTER(ibv_reg_mr_iova, (P pd, P addr, size_t len, unsigned long iova, int access),
               (pd, addr, len, iova, access))
extern "C" __attribute__((visibility("default"), noinline)) P ibv_reg_mr_iova2(
    P pd, P addr, size_t len, unsigned long iova, unsigned access) {
    using fn_t = P (*)(P, P, size_t, unsigned long, unsigned);
    static fn_t next = reinterpret_cast<fn_t>(real("ibv_reg_mr_iova2"));
    if (!t_in_reg && should_fail(id_ibv_reg_mr_iova2, __builtin_return_address(0)))
        return FAIL_PTR(id_ibv_reg_mr_iova2);
    return next(pd, addr, len, iova, access);
}
// librdmacm
WRAP(P, rdma_get_devices, FAIL_PTR, (int* n), (n))
WRAP(int, rdma_getaddrinfo, FAIL_NEG, (const char* node, const char* svc, P hints, P res),
     (node, svc, hints, res))
WRAP(P, rdma_create_event_channel, FAIL_PTR, (void), ())
WRAP(int, rdma_create_id, FAIL_NEG, (P ch, P id, P ctx, int ps), (ch, id, ctx, ps))
WRAP(int, rdma_bind_addr, FAIL_NEG, (P id, P addr), (id, addr))
WRAP(int, rdma_resolve_addr, FAIL_NEG, (P id, P src, P dst, int ms), (id, src, dst, ms))
WRAP(int, rdma_resolve_route, FAIL_NEG, (P id, int ms), (id, ms))
WRAP(int, rdma_create_qp, FAIL_NEG, (P id, P pd, P attr), (id, pd, attr))
WRAP(int, rdma_connect, FAIL_NEG, (P id, P param), (id, param))
WRAP(int, rdma_listen, FAIL_NEG, (P id, int backlog), (id, backlog))
WRAP(int, rdma_accept, FAIL_NEG, (P id, P param), (id, param))
WRAP(int, rdma_reject, FAIL_NEG, (P id, const void* data, unsigned char len), (id, data, len))
WRAP(int, rdma_disconnect, FAIL_NEG, (P id), (id))
WRAP(int, rdma_notify, FAIL_NEG, (P id, int event), (id, event))
WRAP(int, rdma_migrate_id, FAIL_NEG, (P id, P ch), (id, ch))
WRAP(int, rdma_set_local_ece, FAIL_NEG, (P id, P ece), (id, ece))
WRAP(int, rdma_get_cm_event, FAIL_NEG, (P ch, P ev), (ch, ev))
// libc
WRAP(int, epoll_create1, FAIL_NEG, (int flags), (flags))
WRAP(int, epoll_ctl, FAIL_NEG, (int epfd, int op, int fd, P ev), (epfd, op, fd, ev))
WRAP(int, epoll_wait, FAIL_NEG, (int epfd, P evs, int max, int ms), (epfd, evs, max, ms))
WRAP(int, eventfd, FAIL_NEG, (unsigned init, int flags), (init, flags))
WRAP(int, timerfd_create, FAIL_NEG, (int clock, int flags), (clock, flags))
WRAP(int, timerfd_settime, FAIL_NEG, (int fd, int flags, const void* nv, P old), (fd, flags, nv, old))
WRAP(int, pipe2, FAIL_NEG, (int* fds, int flags), (fds, flags))
WRAP(int, socket, FAIL_NEG, (int dom, int type, int proto), (dom, type, proto))
WRAP(int, connect, FAIL_NEG, (int fd, const void* addr, unsigned len), (fd, addr, len))
WRAP(int, getsockname, FAIL_NEG, (int fd, P addr, P len), (fd, addr, len))
WRAP(ssize_t, sendto, FAIL_NEG, (int fd, const void* buf, size_t len, int flags, const void* to, unsigned tl),
     (fd, buf, len, flags, to, tl))
WRAP(ssize_t, recv, FAIL_NEG, (int fd, P buf, size_t len, int flags), (fd, buf, len, flags))
WRAP(int, poll, FAIL_NEG, (P fds, unsigned long n, int ms), (fds, n, ms))
WRAP(int, ppoll, FAIL_NEG, (P fds, unsigned long n, const void* ts, const void* mask), (fds, n, ts, mask))
WRAP(int, getifaddrs, FAIL_NEG, (P ifap), (ifap))
WRAP(char*, strdup, FAIL_PTR, (const char* s), (s))

// C++ allocation: the throwing forms throw std::bad_alloc, the nothrow forms
// return null (declared by their mangled names: they replace the global
// operators for the whole process and pass every call on).
extern "C" __attribute__((visibility("default"), noinline)) void* _Znwm(size_t n) {
    using fn_t = void* (*)(size_t);
    static fn_t next = reinterpret_cast<fn_t>(real("_Znwm"));
    if (should_fail(id__Znwm, __builtin_return_address(0))) throw std::bad_alloc();
    return next(n);
}
extern "C" __attribute__((visibility("default"), noinline)) void* _Znam(size_t n) {
    using fn_t = void* (*)(size_t);
    static fn_t next = reinterpret_cast<fn_t>(real("_Znam"));
    if (should_fail(id__Znam, __builtin_return_address(0))) throw std::bad_alloc();
    return next(n);
}
WRAP(P, _ZnwmRKSt9nothrow_t, FAIL_PTR, (size_t n, const void* tag), (n, tag))
WRAP(P, _ZnamRKSt9nothrow_t, FAIL_PTR, (size_t n, const void* tag), (n, tag))

// fcntl is variadic: its one optional argument is passed on as a pointer-sized value.
extern "C" __attribute__((visibility("default"), noinline)) int fcntl(int fd, int cmd, ...) {
    using fn_t = int (*)(int, int, ...);
    static fn_t next = reinterpret_cast<fn_t>(real("fcntl"));
    va_list ap;
    va_start(ap, cmd);
    void* arg = va_arg(ap, void*);
    va_end(ap);
    if (should_fail(id_fcntl, __builtin_return_address(0))) return FAIL_NEG(id_fcntl);
    return next(fd, cmd, arg);
}
