// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The memory monitor (mem_monitor.h) against the kernel, without RDMA: a
// watched range that is unmapped, discarded or moved reaches every listener
// before the call that did it returns; an unwatched one does not; a file
// mapping cannot be watched; a fork child's unmap is not the parent's.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "mr/mem_monitor.h"

namespace {

using evd::mem_lock;

struct recorder : evd::mem_listener {
    std::vector<std::pair<uintptr_t, uintptr_t>> seen;  // reserved: no allocation under the lock
    recorder() {
        seen.reserve(64);
        invalidate = [](evd::mem_listener* l, uintptr_t s, uintptr_t e) {
            auto* r = static_cast<recorder*>(l);
            if (r->seen.size() < r->seen.capacity()) r->seen.emplace_back(s, e);
        };
    }
    // The events seen so far that overlap [s, e).
    size_t overlapping(void* s, size_t len) {
        evd::lock_guard lk(mem_lock());
        size_t n = 0;
        auto a = reinterpret_cast<uintptr_t>(s);
        for (auto& [x, y] : seen) n += x < a + len && a < y;
        return n;
    }
};

class MemMonitor : public ::testing::Test {
protected:
    recorder rec;
    bool running = false;
    void SetUp() override {
        int rc = evd::mem_monitor_get();
        if (rc) GTEST_SKIP() << "no userfaultfd here (" << rc << ")";
        running = true;
        evd::lock_guard lk(mem_lock());
        evd::mem_monitor_listen(&rec);
    }
    void TearDown() override {
        if (!running) return;
        {
            evd::lock_guard lk(mem_lock());
            evd::mem_monitor_unlisten(&rec);
        }
        evd::mem_monitor_put();
    }
    static void* map(size_t len) {
        void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? nullptr : p;
    }
    static bool watch(void* p, size_t len) {
        auto a = reinterpret_cast<uintptr_t>(p);
        return evd::mem_monitor_watch(a, a + len);
    }
};

TEST_F(MemMonitor, MunmapOfAWatchedRangeIsSeenBeforeItReturns) {
    const size_t len = 16 * 4096;
    void* p = map(len);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(watch(p, len));
    ASSERT_EQ(munmap(p, len), 0);
    EXPECT_EQ(rec.overlapping(p, len), 1u);
}

TEST_F(MemMonitor, MadviseDontneedAndFreeAreSeen) {
    const size_t len = 16 * 4096;
    auto* p = static_cast<char*>(map(len));
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(watch(p, len));
    ASSERT_EQ(madvise(p, 4096, MADV_DONTNEED), 0);
    EXPECT_EQ(rec.overlapping(p, 4096), 1u);
    ASSERT_EQ(madvise(p + 4096, 4096, MADV_FREE), 0);
    EXPECT_EQ(rec.overlapping(p + 4096, 4096), 1u);
    p[0] = 1;  // no fault reaches the monitor: the memory is writable as before
    EXPECT_EQ(p[0], 1);
    munmap(p, len);
}

TEST_F(MemMonitor, MremapIsSeenAtBothPlaces) {
    const size_t len = 8 * 4096;
    void* p = map(len);
    void* q = map(len);
    ASSERT_TRUE(p && q);
    ASSERT_TRUE(watch(p, len));
    ASSERT_EQ(mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, q), q);
    EXPECT_GE(rec.overlapping(p, len), 1u);
    EXPECT_GE(rec.overlapping(q, len), 1u);
    munmap(q, len);
}

TEST_F(MemMonitor, UnwatchedMemoryIsNotReported) {
    const size_t len = 8 * 4096;
    void* p = map(len);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(munmap(p, len), 0);
    EXPECT_EQ(rec.overlapping(p, len), 0u);
}

// (The test's own executable: a file on a disk or 9p file system. tmpfs is
// shared memory, which Linux 6.1 does let userfaultfd watch.)
TEST_F(MemMonitor, AFileMappingCannotBeWatched) {
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    void* p = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    ASSERT_NE(p, MAP_FAILED);
    EXPECT_FALSE(watch(p, 4096));
    munmap(p, 4096);
}

TEST_F(MemMonitor, AForkChildsUnmapIsNotTheParents) {
    const size_t len = 4 * 4096;
    void* p = map(len);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(watch(p, len));
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(munmap(p, len) == 0 ? 0 : 1);  // must not wait for the parent's thread
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    EXPECT_EQ(rec.overlapping(p, len), 0u);
    munmap(p, len);
    EXPECT_EQ(rec.overlapping(p, len), 1u);
}

}  // namespace
