// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// The registration cache (mr_cache.h) on Soft-RoCE: a server endpoint on
// rxe0 registers its buffer through the cache, the client on rxe1 writes
// into it with fi_write, and the server reads what arrived. A cache that
// handed out a registration of pages the buffer no longer has makes the
// write land in the old pages: each test that changes the memory under a
// cached registration (munmap and mmap again, mremap, madvise, free and
// malloc, a registration still open across the unmap) fails on a cache
// without invalidation. Counters come from fi_control(FI_EVD_MR_CACHE_STATS).
// Runs inside the VM: test/vm/run-in-vm -- ./evd_integration --gtest_filter='MrCache*'
#include <fcntl.h>
#include <malloc.h>
#include <gtest/gtest.h>
#include <rdma/fi_ext_evd.h>
#include <rdma/fi_rma.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>
#include <vector>

#include "../common/held.h"
#include "rxe_util.h"

using evdtest::held;

namespace {

constexpr size_t kPage = 4096;

class MrCacheRxe : public rxetest::PairFixture<MrCacheRxe> {
    friend class rxetest::PairFixture<MrCacheRxe>;

protected:
    std::vector<uint8_t> src = std::vector<uint8_t>(1 << 20);  // the client's data
    struct fid_mr* src_mr = nullptr;

    void SetUp() override {
        PairFixture::SetUp();
        if (IsSkipped()) return;
        ASSERT_NO_FATAL_FAILURE(connect());
        src_mr = reg(c, src.data(), src.size(), FI_WRITE).release();  // closed by TearDown
        ASSERT_NE(src_mr, nullptr);
        ASSERT_NE(stats(s).hits, ~0ULL) << "the domain has no registration cache (no userfaultfd?)";
    }
    void TearDown() override {
        if (src_mr) { EXPECT_EQ(fi_close(&src_mr->fid), 0); }
        close_side(c);
        close_side(s);
        close_listener();
    }

    struct fi_info* pair_hints() { return rxetest::rma_hints(16); }
    void open_side(rxetest::pair_side& x, struct fi_info* info) {
        ASSERT_NO_FATAL_FAILURE(open_domain(x, info));
        ASSERT_NO_FATAL_FAILURE(open_cqs(x, FI_WAIT_NONE, 64));
        ASSERT_NO_FATAL_FAILURE(open_endpoint(x));
        ASSERT_EQ(fi_enable(x.ep), 0);
    }

    static held<struct fid_mr> reg(rxetest::pair_side& x, void* buf, size_t len, uint64_t access) {
        held<struct fid_mr> mr;
        int rc = fi_mr_reg(x.dom, buf, len, access, 0, 0, 0, mr.out(), nullptr);
        EXPECT_EQ(rc, 0) << fi_strerror(-rc);
        return mr;
    }
    // The cache counters of x's domain (hits = ~0 without a cache).
    static struct fi_evd_mr_cache_stats stats(rxetest::pair_side& x) {
        struct fi_evd_mr_cache_stats st {};
        if (fi_control(&x.dom->fid, FI_EVD_MR_CACHE_STATS, &st)) st.hits = ~0ULL;
        return st;
    }
    // The client writes len bytes of `seed` into the server's [buf, buf+len)
    // through the key of mr; true when the server then reads them there.
    bool write_lands(void* buf, size_t len, struct fid_mr* mr, uint8_t seed) {
        for (size_t i = 0; i < len; i++) src[i] = static_cast<uint8_t>(seed + i * 7);
        std::memset(buf, 0, len);
        int ctx = 0;
        EXPECT_EQ(fi_write(c.ep, src.data(), len, fi_mr_desc(src_mr), 0,
                           reinterpret_cast<uint64_t>(buf), fi_mr_key(mr), &ctx),
                  0);
        struct fi_cq_data_entry e {};
        EXPECT_EQ(rxetest::cq_wait_one(c.tx, e, 20000), 1);
        // The initiator's completion says its buffer may be reused, not that
        // the target's memory holds the data: on iWARP (siw) the bytes may
        // still be on their way. Wait for them there, up to a bound; a write
        // that went to other pages never shows.
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (std::memcmp(buf, src.data(), len) != 0) {
            if (std::chrono::steady_clock::now() >= end) return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return true;
    }
    static void* map_anon(size_t len, void* at = nullptr) {
        void* p = mmap(at, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED_NOREPLACE : 0), -1, 0);
        return p == MAP_FAILED ? nullptr : p;
    }
};

// A buffer registered again is a hit: the same key, and the data arrives.
TEST_F(MrCacheRxe, SecondRegistrationOfABufferIsAHit) {
    std::vector<uint8_t> buf(64 * 1024);
    auto before = stats(s);
    held<struct fid_mr> m1 = reg(s, buf.data(), buf.size(), FI_REMOTE_WRITE);
    ASSERT_NE(m1, nullptr);
    uint64_t key = fi_mr_key(m1);
    ASSERT_EQ(m1.close(), 0);
    held<struct fid_mr> m2 = reg(s, buf.data() + 100, 1000, FI_REMOTE_WRITE);  // inside: a hit
    ASSERT_NE(m2, nullptr);
    EXPECT_EQ(fi_mr_key(m2), key);
    EXPECT_TRUE(write_lands(buf.data() + 100, 1000, m2, 1));
    auto after = stats(s);
    EXPECT_EQ(after.misses - before.misses, 1u);
    EXPECT_EQ(after.hits - before.hits, 1u);
    EXPECT_EQ(after.registrations - before.registrations, 1u);
    EXPECT_EQ(m2.close(), 0);
}

// The hit asks the entry last found first (mr_cache::try_hit). That entry
// unmapped while still in use (it leaves the index, and lives on for its
// user): a registration of the new pages there is a miss, and another
// buffer's entry still hits (through the index).
TEST_F(MrCacheRxe, TheEntryLastFoundUnmappedInUseIsAMissAndOthersStillHit) {
    const size_t len = 64 * 1024;
    void* a = map_anon(len);
    void* b = map_anon(len);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    {  // two closed objects' memory kept: the hit builds in it
        held<struct fid_mr> m1 = reg(s, a, len, FI_REMOTE_WRITE);
        held<struct fid_mr> m2 = reg(s, a, len, FI_REMOTE_WRITE);
        ASSERT_EQ(m1.close(), 0);
        ASSERT_EQ(m2.close(), 0);
    }
    held<struct fid_mr> mb = reg(s, b, len, FI_REMOTE_WRITE);  // the entry last found
    ASSERT_NE(mb, nullptr);
    auto before = stats(s);
    ASSERT_EQ(munmap(b, len), 0);  // mb stays open
    ASSERT_EQ(map_anon(len, b), b) << "could not map the same address again";
    held<struct fid_mr> mb2 = reg(s, b, len, FI_REMOTE_WRITE);
    ASSERT_NE(mb2, nullptr);
    EXPECT_TRUE(write_lands(b, len, mb2, 4)) << "the write went to the unmapped pages";
    held<struct fid_mr> ma = reg(s, static_cast<uint8_t*>(a) + 100, 1000, FI_REMOTE_WRITE);
    ASSERT_NE(ma, nullptr);
    EXPECT_TRUE(write_lands(static_cast<uint8_t*>(a) + 100, 1000, ma, 5));
    auto after = stats(s);
    EXPECT_EQ(after.misses - before.misses, 1u);  // b's new pages
    EXPECT_EQ(after.hits - before.hits, 1u);      // a
    EXPECT_EQ(mb.close(), 0);
    EXPECT_EQ(mb2.close(), 0);
    EXPECT_EQ(ma.close(), 0);
    munmap(a, len);
    munmap(b, len);
}

// munmap, then mmap at the same address: new pages, a new registration.
TEST_F(MrCacheRxe, MunmapThenMmapAtTheSameAddressIsAMiss) {
    const size_t len = 256 * 1024;
    void* p = map_anon(len);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x11, len);
    held<struct fid_mr> m1 = reg(s, p, len, FI_REMOTE_WRITE);
    ASSERT_NE(m1, nullptr);
    ASSERT_EQ(m1.close(), 0);  // unused, still cached
    auto before = stats(s);
    ASSERT_EQ(munmap(p, len), 0);
    ASSERT_EQ(map_anon(len, p), p) << "could not map the same address again";
    held<struct fid_mr> m2 = reg(s, p, len, FI_REMOTE_WRITE);
    ASSERT_NE(m2, nullptr);
    EXPECT_TRUE(write_lands(p, len, m2, 2)) << "the write went to the unmapped pages";
    auto after = stats(s);
    EXPECT_GE(after.invalidations - before.invalidations, 1u);
    EXPECT_EQ(after.hits - before.hits, 0u);
    EXPECT_EQ(m2.close(), 0);
    munmap(p, len);
}

// madvise(MADV_DONTNEED) gives the range fresh zero pages on the next touch.
TEST_F(MrCacheRxe, MadviseDontneedDropsTheRegistration) {
    const size_t len = 64 * 1024;
    void* p = map_anon(len);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x22, len);
    held<struct fid_mr> m1 = reg(s, p, len, FI_REMOTE_WRITE);
    ASSERT_NE(m1, nullptr);
    ASSERT_EQ(m1.close(), 0);
    auto before = stats(s);
    ASSERT_EQ(madvise(p, len, MADV_DONTNEED), 0);
    held<struct fid_mr> m2 = reg(s, p, len, FI_REMOTE_WRITE);
    ASSERT_NE(m2, nullptr);
    EXPECT_TRUE(write_lands(p, len, m2, 3)) << "the write went to the discarded pages";
    EXPECT_GE(stats(s).invalidations - before.invalidations, 1u);
    EXPECT_EQ(m2.close(), 0);
    munmap(p, len);
}

// mremap moves the pages away; new memory is mapped where they were.
TEST_F(MrCacheRxe, MremapAwayThenNewMemoryAtTheOldAddressIsAMiss) {
    const size_t len = 128 * 1024;
    void* p = map_anon(len);
    void* q = map_anon(len);
    ASSERT_TRUE(p && q);
    held<struct fid_mr> m1 = reg(s, p, len, FI_REMOTE_WRITE);
    ASSERT_NE(m1, nullptr);
    ASSERT_EQ(m1.close(), 0);
    auto before = stats(s);
    ASSERT_EQ(mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, q), q);
    ASSERT_EQ(map_anon(len, p), p);
    held<struct fid_mr> m2 = reg(s, p, len, FI_REMOTE_WRITE);
    ASSERT_NE(m2, nullptr);
    EXPECT_TRUE(write_lands(p, len, m2, 4)) << "the write went to the moved pages";
    EXPECT_GE(stats(s).invalidations - before.invalidations, 1u);
    // the moved pages are registered afresh too
    held<struct fid_mr> m3 = reg(s, q, len, FI_REMOTE_WRITE);
    ASSERT_NE(m3, nullptr);
    EXPECT_TRUE(write_lands(q, len, m3, 5));
    EXPECT_EQ(m2.close(), 0);
    EXPECT_EQ(m3.close(), 0);
    munmap(p, len);
    munmap(q, len);
}

// free() and malloc() of a large buffer (glibc maps it, so free unmaps it):
// the new buffer, often at the same address, has new pages. A fixed mmap
// threshold keeps glibc from moving 4 MiB buffers to the heap after the first
// free (its default threshold grows).
TEST_F(MrCacheRxe, FreeAndMallocOfALargeBufferGetsTheNewPages) {
    const size_t len = 4 << 20;
    if (mallopt(M_MMAP_THRESHOLD, 1 << 20) != 1)  // ASan's allocator, which keeps freed chunks
        GTEST_SKIP() << "malloc is not glibc's: free does not unmap";
    int same = 0;
    for (int i = 0; i < 4; i++) {
        SCOPED_TRACE(i);
        auto* b = static_cast<uint8_t*>(std::malloc(len));
        ASSERT_NE(b, nullptr);
        std::memset(b, 0x33, len);
        held<struct fid_mr> m = reg(s, b, len, FI_REMOTE_WRITE);
        ASSERT_NE(m, nullptr);
        EXPECT_TRUE(write_lands(b + len - 4096, 4096, m, static_cast<uint8_t>(6 + i)));
        EXPECT_EQ(m.close(), 0);
        static void* last = nullptr;
        same += last == b;
        last = b;
        std::free(b);
    }
    std::printf("# %d of 3 reallocations came back at the same address\n", same);
    EXPECT_GT(same, 0) << "no reallocation at the same address: the test proved nothing";
}

// An open registration whose memory is unmapped stays usable for its user
// until closed (and is deregistered once); a new registration of the
// address gets the new pages.
TEST_F(MrCacheRxe, RegistrationOpenAcrossAnUnmapIsReplacedForNewUsers) {
    const size_t len = 64 * 1024;
    void* p = map_anon(len);
    ASSERT_NE(p, nullptr);
    held<struct fid_mr> old = reg(s, p, len, FI_REMOTE_WRITE);
    ASSERT_NE(old, nullptr);
    ASSERT_EQ(munmap(p, len), 0);
    ASSERT_EQ(map_anon(len, p), p);
    held<struct fid_mr> m = reg(s, p, len, FI_REMOTE_WRITE);
    ASSERT_NE(m, nullptr);
    EXPECT_TRUE(write_lands(p, len, m, 9));
    EXPECT_EQ(old.close(), 0);
    EXPECT_EQ(m.close(), 0);
    munmap(p, len);
}

// A process that cached registrations exits: libfabric runs provider cleanup
// after the process's static destructors, and the monitor's thread must still
// be told to stop (it once hung exit in the join: the stop eventfd had been
// closed by a static owner). A fresh process runs one cache test and must be
// gone within 60 s.
TEST_F(MrCacheRxe, AProcessThatCachedRegistrationsExits) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 1);
        execl("/proc/self/exe", "evd_integration",
              "--gtest_filter=MrCacheRxe.SecondRegistrationOfABufferIsAHit", static_cast<char*>(nullptr));
        _exit(127);
    }
    int st = 0;
    pid_t got = 0;
    for (int i = 0; i < 600 && (got = waitpid(pid, &st, WNOHANG)) == 0; ++i) usleep(100 * 1000);
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        FAIL() << "the process did not exit within 60 s of its last test";
    }
    ASSERT_EQ(got, pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
}

// A fork child writing into a registered buffer gets its own copy of the
// pages; the parent's cached registration stays right for the parent.
TEST_F(MrCacheRxe, ForkChildTouchingARegisteredBufferLeavesTheParentsCacheRight) {
    const size_t len = 64 * 1024;
    void* p = map_anon(len);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x44, len);
    held<struct fid_mr> m1 = reg(s, p, len, FI_REMOTE_WRITE);
    ASSERT_NE(m1, nullptr);
    ASSERT_EQ(m1.close(), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        std::memset(p, 0x55, len);
        munmap(p, len);
        _exit(0);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    auto before = stats(s);
    held<struct fid_mr> m2 = reg(s, p, len, FI_REMOTE_WRITE);
    ASSERT_NE(m2, nullptr);
    EXPECT_EQ(stats(s).hits - before.hits, 1u) << "the child's munmap reached the parent's cache";
    EXPECT_TRUE(write_lands(p, len, m2, 10));
    EXPECT_EQ(m2.close(), 0);
    munmap(p, len);
}

// Two threads registering overlapping ranges of one buffer, and unmapping and
// mapping their own page in between: every registration, hit or new, carries
// the data to where the buffer is now.
TEST_F(MrCacheRxe, TwoThreadsRegisteringOverlappingRanges) {
    const size_t len = 32 * kPage;
    auto* p = static_cast<uint8_t*>(map_anon(len));
    ASSERT_NE(p, nullptr);
    std::atomic<int> failures{0};
    std::vector<struct fid_mr*> kept[2];
    auto worker = [&](int t) {
        for (int i = 0; i < 200; i++) {
            size_t off = (t * 8 + (i % 8)) * kPage;  // thread 0: pages 0-15, 1: 8-23
            struct fid_mr* m = nullptr;
            if (fi_mr_reg(s.dom, p + off, 8 * kPage, FI_REMOTE_WRITE, 0, 0, 0, &m, nullptr)) {
                failures++;
                continue;
            }
            if (i % 50 == 49) {
                kept[t].push_back(m);
            } else if (fi_close(&m->fid)) {
                failures++;
            }
        }
    };
    std::thread a(worker, 0), b(worker, 1);
    a.join();
    b.join();
    EXPECT_EQ(failures.load(), 0);
    for (auto& v : kept)
        for (auto* m : v) EXPECT_EQ(fi_close(&m->fid), 0);
    // the buffer as it is now takes writes through a fresh registration of
    // pages the threads had registered
    ASSERT_EQ(munmap(p, len), 0);
    ASSERT_EQ(map_anon(len, p), p);
    held<struct fid_mr> m = reg(s, p + 8 * kPage, 8 * kPage, FI_REMOTE_WRITE);
    ASSERT_NE(m, nullptr);
    EXPECT_TRUE(write_lands(p + 8 * kPage, 8 * kPage, m, 11));
    EXPECT_EQ(m.close(), 0);
    auto st = stats(s);
    std::printf("# cache: %llu hits, %llu misses, %llu registrations, %llu invalidations, %llu entries\n",
                static_cast<unsigned long long>(st.hits), static_cast<unsigned long long>(st.misses),
                static_cast<unsigned long long>(st.registrations),
                static_cast<unsigned long long>(st.invalidations),
                static_cast<unsigned long long>(st.entries));
    munmap(p, len);
}

// A file mapping (here the test's own executable) cannot be watched: it is
// registered uncached, for sending. (tmpfs and other shared memory can be
// watched on some kernels: Linux 6.1 lets userfaultfd watch it.)
TEST_F(MrCacheRxe, FileMappingIsRegisteredUncached) {
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    void* p = mmap(nullptr, 2 * kPage, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    ASSERT_NE(p, MAP_FAILED);
    auto before = stats(s);
    held<struct fid_mr> m = reg(s, p, 2 * kPage, FI_SEND);
    ASSERT_NE(m, nullptr);
    auto after = stats(s);
    EXPECT_EQ(after.uncached - before.uncached, 1u);
    EXPECT_EQ(after.entries, before.entries);
    EXPECT_EQ(m.close(), 0);
    munmap(p, 2 * kPage);
}

// Read-only memory (a send buffer in a PROT_READ mapping) is cached with the
// access it allows.
TEST_F(MrCacheRxe, ReadOnlyMemoryIsCachedForSends) {
    const size_t len = 16 * kPage;
    void* p = mmap(nullptr, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    held<struct fid_mr> m1 = reg(s, p, len, FI_SEND);
    ASSERT_NE(m1, nullptr);
    ASSERT_EQ(m1.close(), 0);
    auto before = stats(s);
    held<struct fid_mr> m2 = reg(s, p, len, FI_SEND);
    ASSERT_NE(m2, nullptr);
    EXPECT_EQ(stats(s).hits - before.hits, 1u);
    EXPECT_EQ(m2.close(), 0);
    munmap(p, len);
}

// A request larger than a cached entry is a miss that registers the union;
// a smaller one inside the union hits; asking for more access than a
// read-only entry has is a miss.
TEST_F(MrCacheRxe, SupersetMissesThenEverythingInsideHits) {
    const size_t len = 64 * kPage;
    auto* p = static_cast<uint8_t*>(map_anon(len));
    ASSERT_NE(p, nullptr);
    auto st0 = stats(s);
    held<struct fid_mr> a = reg(s, p + 8 * kPage, 8 * kPage, FI_REMOTE_WRITE);
    held<struct fid_mr> b = reg(s, p, 32 * kPage, FI_REMOTE_WRITE);  // contains a's range: a miss
    ASSERT_TRUE(a && b);
    auto st1 = stats(s);
    EXPECT_EQ(st1.misses - st0.misses, 2u);
    EXPECT_EQ(st1.entries - st0.entries, 1u) << "a's entry left the cache, b's covers it";
    held<struct fid_mr> c1 = reg(s, p + 4 * kPage, 4 * kPage, FI_REMOTE_WRITE);  // inside b: a hit
    ASSERT_NE(c1, nullptr);
    EXPECT_EQ(stats(s).hits - st1.hits, 1u);
    EXPECT_EQ(fi_mr_key(c1), fi_mr_key(b));
    EXPECT_TRUE(write_lands(p + 4 * kPage, 4 * kPage, c1, 13));
    EXPECT_TRUE(write_lands(p + 8 * kPage, 8 * kPage, a, 14)) << "a stays valid for its user";
    for (auto* m : {&a, &b, &c1}) EXPECT_EQ(m->close(), 0);
    munmap(p, len);
}

// More entries than FI_EVD_MR_CACHE_MAX_COUNT (1024): the least recently
// used unused ones are evicted, the cache stays within its bound, and every
// registration still works.
TEST_F(MrCacheRxe, EvictsTheLeastRecentlyUsedBeyondItsCount) {
    const size_t n = 1100;
    auto* p = static_cast<uint8_t*>(map_anon(2 * n * kPage));  // one page in two: no merging
    ASSERT_NE(p, nullptr);
    auto st0 = stats(s);
    for (size_t i = 0; i < n; i++) {
        held<struct fid_mr> m = reg(s, p + 2 * i * kPage, kPage, FI_REMOTE_WRITE);
        ASSERT_NE(m, nullptr) << i;
        ASSERT_EQ(m.close(), 0);
    }
    auto st1 = stats(s);
    EXPECT_LE(st1.entries, 1024u);
    EXPECT_GE(st1.evictions - st0.evictions, n + st0.entries - 1024);
    // the first buffers were evicted (a miss), the last are cached (a hit)
    held<struct fid_mr> first = reg(s, p, kPage, FI_REMOTE_WRITE);
    held<struct fid_mr> last = reg(s, p + 2 * (n - 1) * kPage, kPage, FI_REMOTE_WRITE);
    ASSERT_TRUE(first && last);
    auto st2 = stats(s);
    EXPECT_EQ(st2.misses - st1.misses, 1u);
    EXPECT_EQ(st2.hits - st1.hits, 1u);
    EXPECT_TRUE(write_lands(p, kPage, first, 15));
    EXPECT_TRUE(write_lands(p + 2 * (n - 1) * kPage, kPage, last, 16));
    EXPECT_EQ(first.close(), 0);
    EXPECT_EQ(last.close(), 0);
    munmap(p, 2 * n * kPage);
}

}  // namespace
