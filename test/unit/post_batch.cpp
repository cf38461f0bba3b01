// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Requests posted with FI_MORE (msg/post_batch.h) against a fake device
// queue: held until a call without the flag, then one chain in order; a full
// batch goes first; an inline send's data is copied at once, or read at the
// flush when held by reference; a request the
// batch cannot keep goes at once, behind what is held; a queue that takes
// part of a chain keeps the rest held, in order, and a retry sends it first;
// a queue pair that takes no more work drops what is held.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "msg/post_batch.h"

namespace {

using evd::post_batch;

// The device's queue: what each post carried (wr_id and, for sends, the
// bytes the first scatter entry pointed at then), and its room.
struct fake_queue {
    std::vector<std::vector<uint64_t>> posts;  // wr_ids, one vector per post call
    std::vector<std::string> data;             // first sge's bytes, per request taken
    size_t room = 1000;                        // requests it still takes
    int refuse = ENOMEM;                       // the errno once full

    template <class Wr>
    static int post(void* arg, Wr* chain, Wr** bad) {
        auto* q = static_cast<fake_queue*>(arg);
        q->posts.emplace_back();
        for (Wr* w = chain; w; w = w->next) {
            if (!q->room) {
                *bad = w;
                return q->refuse;
            }
            --q->room;
            q->posts.back().push_back(w->wr_id);
            if (w->num_sge > 0)
                q->data.emplace_back(reinterpret_cast<const char*>(w->sg_list[0].addr),
                                     w->sg_list[0].length);
        }
        return 0;
    }
};

ibv_send_wr send_of(uint64_t id, ibv_sge* sge, int nsge, bool inl) {
    ibv_send_wr w{};
    w.wr_id = id;
    w.sg_list = sge;
    w.num_sge = nsge;
    w.opcode = IBV_WR_SEND;
    if (inl) w.send_flags = IBV_SEND_INLINE;
    return w;
}

TEST(PostBatch, HeldUntilACallWithoutMoreThenOneChainInOrder) {
    auto b = post_batch<ibv_send_wr>::make(16, 64);
    ASSERT_TRUE(b);
    fake_queue q;
    char buf[8] = "abcdefg";
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf), 4, 7};
    for (uint64_t i = 1; i <= 3; ++i) {
        ibv_send_wr w = send_of(i, &sge, 1, false);
        EXPECT_EQ(0, b->submit(w, true, fake_queue::post<ibv_send_wr>, &q));
    }
    EXPECT_TRUE(q.posts.empty());
    EXPECT_TRUE(b->holding());
    EXPECT_EQ(3u, b->held());
    ibv_send_wr last = send_of(4, &sge, 1, false);
    EXPECT_EQ(0, b->submit(last, false, fake_queue::post<ibv_send_wr>, &q));
    ASSERT_EQ(1u, q.posts.size());
    EXPECT_EQ((std::vector<uint64_t>{1, 2, 3, 4}), q.posts[0]);
    EXPECT_FALSE(b->holding());
}

TEST(PostBatch, AFullBatchIsPostedBeforeTheNextIsHeld) {
    auto b = post_batch<ibv_send_wr>::make(4, 64);
    fake_queue q;
    for (uint64_t i = 1; i <= 6; ++i) {
        ibv_send_wr w = send_of(i, nullptr, 0, false);
        EXPECT_EQ(0, b->submit(w, true, fake_queue::post<ibv_send_wr>, &q));
    }
    ASSERT_EQ(1u, q.posts.size());
    EXPECT_EQ((std::vector<uint64_t>{1, 2, 3, 4}), q.posts[0]);
    EXPECT_EQ(2u, b->held());
    EXPECT_EQ(0, b->flush(fake_queue::post<ibv_send_wr>, &q));
    ASSERT_EQ(2u, q.posts.size());
    EXPECT_EQ((std::vector<uint64_t>{5, 6}), q.posts[1]);
}

TEST(PostBatch, AnInlineSendsDataIsCopiedWhenItIsHeld) {
    auto b = post_batch<ibv_send_wr>::make(8, 16);
    fake_queue q;
    char a[6] = "hello", c[6] = "world";
    ibv_sge sge[2] = {{reinterpret_cast<uintptr_t>(a), 5, 0}, {reinterpret_cast<uintptr_t>(c), 5, 0}};
    ibv_send_wr w = send_of(1, sge, 2, true);
    EXPECT_EQ(0, b->submit(w, true, fake_queue::post<ibv_send_wr>, &q));
    memset(a, 'x', 5);  // FI_INJECT: the buffer is the caller's again
    memset(c, 'y', 5);
    ibv_send_wr last = send_of(2, nullptr, 0, false);
    EXPECT_EQ(0, b->submit(last, false, fake_queue::post<ibv_send_wr>, &q));
    ASSERT_EQ(1u, q.data.size());
    EXPECT_EQ("helloworld", q.data[0]);
}

TEST(PostBatch, AnInlineSendHeldByReferenceIsReadAtTheFlush) {
    // a send that is not an inject: the buffer stays the caller's until
    // the completion, so the batch keeps the caller's scatter list and
    // copies nothing
    auto b = post_batch<ibv_send_wr>::make(8, 16);
    fake_queue q;
    char a[6] = "hello";
    ibv_sge sge{reinterpret_cast<uintptr_t>(a), 5, 9};
    ibv_send_wr w = send_of(1, &sge, 1, true);
    EXPECT_EQ(0, b->submit(w, true, fake_queue::post<ibv_send_wr>, &q,
                           evd::held_data::referenced));
    sge.addr = 0;  // the caller's own scatter list may go
    memcpy(a, "jelly", 5);
    ibv_send_wr last = send_of(2, nullptr, 0, false);
    EXPECT_EQ(0, b->submit(last, false, fake_queue::post<ibv_send_wr>, &q));
    ASSERT_EQ(1u, q.data.size());
    EXPECT_EQ("jelly", q.data[0]);
}

TEST(PostBatch, RequestsHeldAfterAPartialPostFollowTheMovedOnesInOrder) {
    auto b = post_batch<ibv_send_wr>::make(16, 64);
    fake_queue q;
    char d[6][2] = {"a", "b", "c", "d", "e", "f"};
    ibv_sge sge[6];
    for (uint64_t i = 0; i < 6; ++i) sge[i] = {reinterpret_cast<uintptr_t>(d[i]), 1, 0};
    for (uint64_t i = 0; i < 3; ++i) {
        ibv_send_wr w = send_of(i + 1, &sge[i], 1, i != 1);  // 2 by reference, not inline
        EXPECT_EQ(0, b->submit(w, true, fake_queue::post<ibv_send_wr>, &q));
    }
    q.room = 2;  // takes 1 and 2; 3 moves to the front
    ibv_send_wr w4 = send_of(4, &sge[3], 1, true);
    EXPECT_EQ(ENOMEM, b->submit(w4, false, fake_queue::post<ibv_send_wr>, &q));
    EXPECT_EQ(1u, b->held());
    q.room = 1000;
    ibv_send_wr w5 = send_of(5, &sge[4], 1, true);
    EXPECT_EQ(0, b->submit(w5, true, fake_queue::post<ibv_send_wr>, &q));
    ibv_send_wr w6 = send_of(6, &sge[5], 1, false);
    EXPECT_EQ(0, b->submit(w6, true, fake_queue::post<ibv_send_wr>, &q,
                           evd::held_data::referenced));
    EXPECT_EQ(0, b->submit(w4, false, fake_queue::post<ibv_send_wr>, &q));
    ASSERT_EQ(2u, q.posts.size());
    EXPECT_EQ((std::vector<uint64_t>{1, 2}), q.posts[0]);
    EXPECT_EQ((std::vector<uint64_t>{3, 5, 6, 4}), q.posts[1]);
    EXPECT_EQ((std::vector<std::string>{"a", "b", "c", "e", "f", "d"}), q.data);
    EXPECT_FALSE(b->holding());
}

TEST(PostBatch, ARequestItCannotKeepGoesAtOnceBehindWhatIsHeld) {
    auto b = post_batch<ibv_send_wr>::make(8, 4);
    fake_queue q;
    ibv_send_wr w1 = send_of(1, nullptr, 0, false);
    EXPECT_EQ(0, b->submit(w1, true, fake_queue::post<ibv_send_wr>, &q));
    char big[9] = "12345678";  // inline, larger than the batch copies
    ibv_sge s{reinterpret_cast<uintptr_t>(big), 8, 0};
    ibv_send_wr w2 = send_of(2, &s, 1, true);
    EXPECT_EQ(0, b->submit(w2, true, fake_queue::post<ibv_send_wr>, &q));
    ibv_sge many[evd::kBatchSge + 1] = {};
    ibv_send_wr w3 = send_of(3, many, evd::kBatchSge + 1, false);
    EXPECT_EQ(0, b->submit(w3, true, fake_queue::post<ibv_send_wr>, &q));
    ASSERT_EQ(2u, q.posts.size());
    EXPECT_EQ((std::vector<uint64_t>{1, 2}), q.posts[0]);
    EXPECT_EQ((std::vector<uint64_t>{3}), q.posts[1]);
    EXPECT_FALSE(b->holding());
}

TEST(PostBatch, AFullQueueKeepsTheRestHeldInOrderAndARetrySendsItFirst) {
    auto b = post_batch<ibv_send_wr>::make(16, 64);
    fake_queue q;
    char d[4][2] = {"a", "b", "c", "d"};
    ibv_sge sge[4];
    for (uint64_t i = 0; i < 3; ++i) {
        sge[i] = {reinterpret_cast<uintptr_t>(d[i]), 1, 0};
        ibv_send_wr w = send_of(i + 1, &sge[i], 1, true);
        EXPECT_EQ(0, b->submit(w, true, fake_queue::post<ibv_send_wr>, &q));
    }
    q.room = 1;  // takes request 1, then is full
    sge[3] = {reinterpret_cast<uintptr_t>(d[3]), 1, 0};
    ibv_send_wr last = send_of(4, &sge[3], 1, true);
    EXPECT_EQ(ENOMEM, b->submit(last, false, fake_queue::post<ibv_send_wr>, &q));
    EXPECT_EQ(2u, b->held());  // 2 and 3 wait; 4 was refused to its caller
    q.room = 1000;
    EXPECT_EQ(0, b->submit(last, false, fake_queue::post<ibv_send_wr>, &q));
    ASSERT_EQ(2u, q.posts.size());
    EXPECT_EQ((std::vector<uint64_t>{1}), q.posts[0]);
    EXPECT_EQ((std::vector<uint64_t>{2, 3, 4}), q.posts[1]);
    // the moved requests still carry their own copies
    EXPECT_EQ((std::vector<std::string>{"a", "b", "c", "d"}), q.data);
}

TEST(PostBatch, AQueuePairThatTakesNoMoreWorkDropsWhatIsHeld) {
    auto b = post_batch<ibv_recv_wr>::make(8, 0);
    fake_queue q;
    for (uint64_t i = 1; i <= 3; ++i) {
        ibv_recv_wr w{};
        w.wr_id = i;
        EXPECT_EQ(0, b->submit(w, true, fake_queue::post<ibv_recv_wr>, &q));
    }
    q.room = 0;
    q.refuse = EINVAL;
    ibv_recv_wr last{};
    last.wr_id = 4;
    EXPECT_EQ(EINVAL, b->submit(last, false, fake_queue::post<ibv_recv_wr>, &q));
    EXPECT_FALSE(b->holding());
    q.room = 1000;
    EXPECT_EQ(0, b->submit(last, false, fake_queue::post<ibv_recv_wr>, &q));
    EXPECT_EQ((std::vector<uint64_t>{4}), q.posts.back());
}

TEST(PostBatch, DepthIsClampedToTheLimit) {
    EXPECT_EQ(evd::kBatchMax, post_batch<ibv_send_wr>::make(100000, 64)->depth());
    EXPECT_EQ(1u, post_batch<ibv_recv_wr>::make(0, 0)->depth());
}

}  // namespace
