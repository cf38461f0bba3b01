// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// For test/bench/op-cost.sh only. Valgrind knows no userfaultfd system call
// (it answers ENOSYS), so under callgrind and memcheck a provider's
// registration cache that watches memory with one is off, and a "hit" is a
// full registration. Preloaded under valgrind, this stands in for the
// kernel's userfaultfd: the call returns an eventfd that never becomes
// readable, and UFFDIO_* ioctls on it succeed with what was asked. op_cost's
// loop unmaps nothing, so a monitor that never hears of an event loses
// nothing there. Never used by the tests or the provider.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <linux/userfaultfd.h>
#include <stdarg.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static int g_fake = -1;  // the last stand-in handed out

long syscall(long n, ...) {
    va_list ap;
    va_start(ap, n);
    long a[6];
    for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
    va_end(ap);
    if (n == SYS_userfaultfd) {
        g_fake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        return g_fake;
    }
    static long (*next)(long, ...);
    if (!next) next = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return next(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}

int ioctl(int fd, unsigned long req, ...) {
    va_list ap;
    va_start(ap, req);
    void* arg = va_arg(ap, void*);
    va_end(ap);
    if (fd >= 0 && fd == g_fake) {
        // UFFDIO_API: the features asked for stay as granted; REGISTER,
        // UNREGISTER: done
        if (req == UFFDIO_API) ((struct uffdio_api*)arg)->ioctls = 0;
        if (req == UFFDIO_REGISTER) ((struct uffdio_register*)arg)->ioctls = 0;
        return 0;
    }
    static int (*next)(int, unsigned long, ...);
    if (!next) next = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
    return next(fd, req, arg);
}
