#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE sampler
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/data/sampler.hpp"

#include <algorithm>
#include <set>

using pstrain::data::sampler;

BOOST_AUTO_TEST_CASE(shards_are_disjoint_and_cover_the_data)
{
    std::set<std::uint32_t> seen;
    std::size_t total = 0;
    for (int w = 0; w < 3; ++w) {
        sampler s(100, 3, w, 7, false);
        std::vector<std::uint32_t> batch;
        s.next_batch(s.shard_size(), batch);
        total += batch.size();
        for (auto i : batch) {
            BOOST_TEST(int(i % 3) == w);
            seen.insert(i);
        }
    }
    BOOST_TEST(total == 100u);
    BOOST_TEST(seen.size() == 100u);
}

BOOST_AUTO_TEST_CASE(each_epoch_is_a_new_permutation_of_the_shard)
{
    sampler s(50, 2, 1, 3, false);
    std::vector<std::uint32_t> e1, e2;
    s.next_batch(25, e1);
    s.next_batch(25, e2);
    BOOST_TEST(s.epoch() == 1u);
    BOOST_TEST(e1 != e2);
    auto a = e1, b = e2;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    BOOST_TEST(a == b);
    BOOST_TEST((std::adjacent_find(a.begin(), a.end()) == a.end()));
}

BOOST_AUTO_TEST_CASE(same_seed_same_order_other_seed_other_order)
{
    std::vector<std::uint32_t> a, b, c;
    sampler(1000, 1, 0, 42, false).next_batch(64, a);
    sampler(1000, 1, 0, 42, false).next_batch(64, b);
    sampler(1000, 1, 0, 43, false).next_batch(64, c);
    BOOST_TEST(a == b);
    BOOST_TEST(a != c);
}

BOOST_AUTO_TEST_CASE(a_peek_is_the_next_batch_within_the_epoch_and_draws_nothing)
{
    sampler s(50, 2, 0, 3, false), t(50, 2, 0, 3, false);  // shards of 25
    std::vector<std::uint32_t> peeked, drawn, expected;
    std::size_t position = 0, known_batches = 0;  // in the epoch's order
    for (int b = 0; b < 8; ++b) {
        const bool known = s.peek_batch(10, peeked);
        t.next_batch(10, expected);
        s.next_batch(10, drawn);
        BOOST_TEST(drawn == expected);  // peeking changed nothing
        // A batch that runs past the epoch's end takes rows of an order not
        // shuffled yet.
        const bool inside = position + 10 <= 25;
        BOOST_TEST(known == inside, "batch " << b);
        if (known) BOOST_TEST(peeked == drawn);
        known_batches += known;
        position = inside ? position + 10 : position + 10 - 25;
    }
    BOOST_TEST(known_batches == 5u);
    sampler r(30, 3, 2, 5, true);
    BOOST_TEST(!r.peek_batch(4, peeked), "rows drawn at random are not known ahead");
}

BOOST_AUTO_TEST_CASE(with_replacement_stays_in_the_shard)
{
    sampler s(30, 3, 2, 5, true);
    std::vector<std::uint32_t> batch;
    s.next_batch(100, batch);
    std::set<std::uint32_t> distinct(batch.begin(), batch.end());
    BOOST_TEST(distinct.size() <= 10u);
    BOOST_TEST(distinct.size() > 1u);
    for (auto i : batch) BOOST_TEST(i % 3 == 2u);
}

BOOST_AUTO_TEST_CASE(skipped_batches_leave_the_order_a_full_run_sees)
{
    for (bool with_replacement : {false, true}) {
        sampler full(1000, 3, 1, 7, with_replacement), resumed(1000, 3, 1, 7, with_replacement);
        std::vector<std::uint32_t> a, b;
        for (int i = 0; i < 25; ++i) full.next_batch(32, a);  // past an epoch of 333 rows
        resumed.skip_batches(25, 32);
        full.next_batch(32, a);
        resumed.next_batch(32, b);
        BOOST_TEST(a == b, boost::test_tools::per_element());
        BOOST_TEST(full.epoch() == resumed.epoch());
    }
}

// An elastic job lost worker 1 of 3 mid-epoch: the two left re-split the
// data in two, so the lost one's examples are trained on again, and a
// pass over the new shards covers the training set once.
BOOST_AUTO_TEST_CASE(a_resplit_among_the_live_workers_covers_the_data_once)
{
    sampler w0(100, 3, 0, 7, false), w2(100, 3, 2, 7, false);
    std::vector<std::uint32_t> batch;
    w0.next_batch(5, batch);
    w2.next_batch(7, batch);
    w0.reshard(2, 0);
    w2.reshard(2, 1);
    BOOST_TEST(w0.shard_size() == 50u);
    BOOST_TEST(w2.shard_size() == 50u);
    std::multiset<std::uint32_t> seen;
    for (auto* s : {&w0, &w2}) {
        s->next_batch(s->shard_size(), batch);
        seen.insert(batch.begin(), batch.end());
        BOOST_TEST(s->epoch() == 0u);
    }
    BOOST_TEST(seen.size() == 100u);
    BOOST_TEST(std::set<std::uint32_t>(seen.begin(), seen.end()).size() == 100u);
    BOOST_CHECK_THROW(w0.reshard(2, 2), pstrain::error);
}

// A worker that returns to a split it had (worker 1 lost and back within
// an epoch) draws a new order of its shard, not the head of the old one
// again: a worker that keeps failing does not make the others retrain the
// start of their shards.
BOOST_AUTO_TEST_CASE(a_return_to_an_earlier_split_draws_a_new_order)
{
    sampler a(100, 3, 2, 7, false), b(100, 3, 2, 7, false);
    std::vector<std::uint32_t> x, y;
    b.reshard(2, 1);
    b.next_batch(3, y);
    b.reshard(3, 2);
    a.next_batch(a.shard_size(), x);
    b.next_batch(b.shard_size(), y);
    BOOST_TEST(x != y);
    std::sort(x.begin(), x.end());
    std::sort(y.begin(), y.end());
    BOOST_TEST(x == y, boost::test_tools::per_element());  // the same shard, once each
    sampler c(100, 3, 2, 7, true), d(100, 3, 2, 7, true);
    d.reshard(3, 2);
    c.next_batch(8, x);
    d.next_batch(8, y);
    BOOST_TEST(x != y);  // with replacement too
}

// The orders of a job that never re-splits are those of earlier releases:
// a resumed data position replays them (pinned from the sampler before
// reshard() existed).
BOOST_AUTO_TEST_CASE(the_orders_before_any_resplit_are_pinned)
{
    std::vector<std::uint32_t> x;
    sampler(100, 3, 1, 7, false).next_batch(8, x);
    BOOST_TEST(x == (std::vector<std::uint32_t>{55, 97, 70, 61, 4, 64, 34, 13}), boost::test_tools::per_element());
    sampler(100, 3, 1, 7, true).next_batch(8, x);
    BOOST_TEST(x == (std::vector<std::uint32_t>{31, 49, 1, 76, 1, 43, 91, 13}), boost::test_tools::per_element());
}
