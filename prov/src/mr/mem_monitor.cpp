// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The memory monitor (mem_monitor.h): a userfaultfd and the thread that
// reads it.
#include "mr/mem_monitor.h"

#include <fcntl.h>
#include <pthread.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <new>

#include "evd.h"
#include "owners.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1  // linux/userfaultfd.h of Linux 5.11
#endif

namespace evd {

namespace {

constexpr uint64_t kFeatures =
    UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;

// The running monitor. It lives on the heap and only mem_monitor_shutdown
// deletes it: libfabric runs provider cleanup after the process's static
// destructors, and a static fd owner would have closed both fds by then
// (measured: the stop signal hit a closed eventfd and exit hung in the join).
struct monitor {
    fd_owner uffd;     // read by mem_monitor_watch while refs > 0
    fd_owner stop;     // eventfd: the thread returns when it is readable
    pthread_t thread;  // a raw thread: a fork child or exit() must not touch it
    pid_t pid = 0;
    int refs = 0;
};
mutex g_state_mu;
monitor* g_mon = nullptr;  // under g_state_mu, except reads while refs > 0
// Under mem_lock():
mem_listener* g_listeners = nullptr;
uint64_t g_events = 0;

void notify(uintptr_t start, uintptr_t end) EVD_REQUIRES(mem_lock()) {
    ++g_events;
    for (mem_listener* l = g_listeners; l; l = l->next) l->invalidate(l, start, end);
}

// One event, under mem_lock().
void apply(const struct uffd_msg& m, int uffd) EVD_REQUIRES(mem_lock()) {
    switch (m.event) {
        case UFFD_EVENT_UNMAP:
        case UFFD_EVENT_REMOVE:  // same layout: start, end
            notify(m.arg.remove.start, m.arg.remove.end);
            break;
        case UFFD_EVENT_REMAP:  // both the old and the new place
            notify(m.arg.remap.from, m.arg.remap.from + m.arg.remap.len);
            notify(m.arg.remap.to, m.arg.remap.to + m.arg.remap.len);
            break;
        case UFFD_EVENT_PAGEFAULT: {
            // Not expected: no page is ever write-protected. Let the thread go.
            struct uffdio_range r = {m.arg.pagefault.address & ~uint64_t{4095}, 4096};
            (void)ioctl(uffd, UFFDIO_WAKE, &r);
            break;
        }
        default:
            break;
    }
}

// Every listener's own lock, in list order (only this thread ever holds more
// than one, always under mem_lock()), and back. A set known at run time: the
// analysis cannot follow it.
void lock_listeners() EVD_REQUIRES(mem_lock()) EVD_NO_LOCK_ANALYSIS {
    for (mem_listener* l = g_listeners; l; l = l->next)
        if (l->mu) l->mu->lock();
}
void unlock_listeners() EVD_REQUIRES(mem_lock()) EVD_NO_LOCK_ANALYSIS {
    for (mem_listener* l = g_listeners; l; l = l->next)
        if (l->mu) l->mu->unlock();
}

void* run(void* arg) {
    const auto* m = static_cast<const monitor*>(arg);
    const int uffd = m->uffd.fd, stop = m->stop.fd;
    for (;;) {
        struct pollfd p[2] = {{uffd, POLLIN, 0}, {stop, POLLIN, 0}};
        int n = poll(p, 2, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            EVD_WARN(FI_LOG_MR, "memory monitor: poll: %s: registrations are no longer cached\n",
                     strerror(errno));
            return nullptr;
        }
        if (p[1].revents) return nullptr;
        if (!(p[0].revents & POLLIN)) continue;
        // The unmapping thread is released by the read: read and apply under
        // every cache's lock, so that no lookup runs between the two.
        evd::lock_guard lk(mem_lock());
        lock_listeners();
        struct uffd_msg msgs[16];
        for (;;) {
            ssize_t got = read(uffd, msgs, sizeof msgs);
            if (got <= 0) break;  // EAGAIN: drained
            for (size_t i = 0; i < static_cast<size_t>(got) / sizeof msgs[0]; ++i) apply(msgs[i], uffd);
        }
        unlock_listeners();
    }
}

// Opens the userfaultfd with the events the caches need; -FI_E* otherwise.
int open_uffd(fd_owner& out) {
    int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
    if (fd < 0) {
        int e = errno;
        EVD_INFO(FI_LOG_MR, "userfaultfd: %s: registrations are not cached\n", strerror(e));
        return e == EPERM || e == ENOSYS || e == EINVAL ? -FI_ENOSYS : fi_err(e);
    }
    fd_owner owner(fd);
    struct uffdio_api api = {};
    api.api = UFFD_API;
    api.features = kFeatures;
    if (ioctl(fd, UFFDIO_API, &api) || (api.features & kFeatures) != kFeatures) {
        EVD_INFO(FI_LOG_MR, "UFFDIO_API: %s: registrations are not cached\n", strerror(errno));
        return -FI_ENOSYS;
    }
    out.reset(owner.fd);
    owner.fd = -1;
    return 0;
}

}  // namespace

mutex& mem_lock() {
    static mutex mu;
    return mu;
}

int mem_monitor_get() {
    evd::lock_guard lk(g_state_mu);
    if (g_mon) {  // running (possibly with no domain since the last put)
        ++g_mon->refs;
        return 0;
    }
    std::unique_ptr<monitor> m(new (std::nothrow) monitor);
    if (!m) return -FI_ENOMEM;
    if (int rc = open_uffd(m->uffd)) return rc;
    m->stop.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (m->stop.fd < 0) return fi_err(errno);
    // The thread takes no signal: the application's handlers run elsewhere.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&m->thread, nullptr, run, m.get());
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (rc) {
        EVD_WARN(FI_LOG_MR, "memory monitor thread: %s: registrations are not cached\n", strerror(rc));
        return fi_err(rc);
    }
    m->pid = getpid();
    m->refs = 1;
    EVD_DBG(FI_LOG_MR, "memory monitor started (userfaultfd %d)\n", m->uffd.fd);
    g_mon = m.release();
    return 0;
}

void mem_monitor_put() {
    evd::lock_guard lk(g_state_mu);
    if (g_mon && g_mon->refs > 0) --g_mon->refs;
    // The thread and its fd stay until provider cleanup: an application that
    // opens and closes domains does not start and stop a thread each time.
}

void mem_monitor_shutdown() {
    evd::lock_guard lk(g_state_mu);
    if (!g_mon) return;
    std::unique_ptr<monitor> m(g_mon);
    g_mon = nullptr;
    if (m->refs > 0)
        EVD_WARN(FI_LOG_MR, "memory monitor stopped with %d domains still open\n", m->refs);
    if (m->pid == getpid()) {  // (a fork child has no thread to stop)
        if (m->stop.signal())
            pthread_join(m->thread, nullptr);
        else  // never wait for a thread that cannot be told to stop
            EVD_WARN(FI_LOG_MR, "memory monitor: cannot signal its thread: %s: left running\n",
                     strerror(errno));
    }
    // Deleting m closes the userfaultfd, which ends every watch.
}

void mem_monitor_listen(mem_listener* l) {
    l->next = g_listeners;
    g_listeners = l;
}

void mem_monitor_unlisten(mem_listener* l) {
    for (mem_listener** p = &g_listeners; *p; p = &(*p)->next) {
        if (*p == l) {
            *p = l->next;
            return;
        }
    }
}

bool mem_monitor_watch(uintptr_t start, uintptr_t end) {
    struct uffdio_register r = {};
    r.range.start = start;
    r.range.len = end - start;
    r.mode = UFFDIO_REGISTER_MODE_WP;
    if (ioctl(g_mon->uffd.fd, UFFDIO_REGISTER, &r) == 0) return true;
    EVD_DBG(FI_LOG_MR, "UFFDIO_REGISTER(%#lx, %zu): %s: registered uncached\n",
            static_cast<unsigned long>(start), static_cast<size_t>(end - start), strerror(errno));
    return false;
}

uint64_t mem_monitor_events() { return g_events; }

}  // namespace evd
