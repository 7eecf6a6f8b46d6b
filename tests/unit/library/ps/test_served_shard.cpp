#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE served_shard
#include <boost/test/unit_test.hpp>

#include "library/ps/served_shard.hpp"

#include <span>
#include <vector>

using namespace pstrain::ps;

namespace {

optimizer_config sgd(float lr)
{
    optimizer_config c;
    c.kind = optimizer_kind::sgd;
    c.learning_rate = lr;
    return c;
}

optimizer_config adam()
{
    optimizer_config c;
    c.kind = optimizer_kind::adam;
    c.learning_rate = 0.001f;
    return c;
}

std::vector<float> values_of(const served_shard& s)
{
    const auto v = s.shard().values();
    return {v.begin(), v.end()};
}

const auto nobody_reads = [](const float*, shard_range) { return false; };

}  // namespace

BOOST_AUTO_TEST_CASE(a_push_nobody_reads_applies_in_place)
{
    served_shard s({10, 14}, sgd(0.5f), 1);
    s.shard().assign(std::vector<float>{1, 2, 3, 4});
    const float* before = s.shard().values().data();
    s.apply(std::vector<float>{2, 2}, {11, 13}, nobody_reads);
    BOOST_TEST(values_of(s) == (std::vector<float>{1, 1, 2, 4}), boost::test_tools::per_element());
    BOOST_TEST(s.shard().values().data() == before);
    BOOST_TEST(s.shard().updates() == 1u);
}

BOOST_AUTO_TEST_CASE(while_a_reply_reads_the_values_a_push_goes_into_a_back_buffer_and_the_old_values_stay)
{
    served_shard s({0, 4}, sgd(1.0f), 1);
    s.shard().assign(std::vector<float>{1, 2, 3, 4});
    const float* read = s.shard().values().data();
    s.apply(std::vector<float>{1, 1, 1, 1}, {0, 4}, [&](const float* v, shard_range) { return v == read; });
    BOOST_TEST(values_of(s) == (std::vector<float>{0, 1, 2, 3}), boost::test_tools::per_element());
    BOOST_TEST(s.shard().values().data() != read);
    BOOST_TEST((std::vector<float>(read, read + 4) == std::vector<float>{1, 2, 3, 4}),
               boost::test_tools::per_element());
    // Another while that reply still reads the first buffer: a buffer that nobody reads, not the first.
    const float* second = s.shard().values().data();
    s.apply(std::vector<float>{1, 1, 1, 1}, {0, 4},
            [&](const float* v, shard_range) { return v == read || v == second; });
    BOOST_TEST(s.shard().values().data() != read);
    BOOST_TEST(values_of(s) == (std::vector<float>{-1, 0, 1, 2}), boost::test_tools::per_element());
}

// A reply that reads another part of the values (an async bucket's,
// while the next bucket comes) leaves this part free to change in place.
BOOST_AUTO_TEST_CASE(while_a_reply_reads_another_part_a_push_applies_in_place)
{
    served_shard s({0, 4}, sgd(1.0f), 1);
    s.shard().assign(std::vector<float>{1, 2, 3, 4});
    const float* read = s.shard().values().data();
    const shard_range reply_part{0, 2};
    const auto reads = [&](const float* v, shard_range part) {
        return v == read && part.begin < reply_part.end && reply_part.begin < part.end;
    };
    s.apply(std::vector<float>{1, 1}, {2, 4}, reads);
    BOOST_TEST(s.shard().values().data() == read);
    BOOST_TEST(values_of(s) == (std::vector<float>{1, 2, 2, 3}), boost::test_tools::per_element());
    s.apply(std::vector<float>{1, 1}, {1, 3}, reads);  // overlaps the reply's part: a back buffer
    BOOST_TEST(s.shard().values().data() != read);
    BOOST_TEST(values_of(s) == (std::vector<float>{1, 1, 1, 3}), boost::test_tools::per_element());
    BOOST_TEST((std::vector<float>(read, read + 2) == std::vector<float>{1, 2}), boost::test_tools::per_element());
}

// An async overlapped step's buckets share one optimizer update: Adam's
// values are those of one whole push, bit for bit, in place, into a back
// buffer, and on the update threads alike.
BOOST_AUTO_TEST_CASE(buckets_applied_as_one_update_give_the_values_of_one_whole_push)
{
    const std::size_t n = served_shard::threaded_update_elements + 1000;
    std::vector<float> init(n), grads(n);
    for (std::size_t i = 0; i < n; ++i) {
        init[i] = 0.01f * static_cast<float>(i % 89) - 0.4f;
        grads[i] = 0.001f * static_cast<float>((i * 7) % 101) - 0.05f;
    }
    const std::vector<shard_range> buckets{{n - 700, n}, {300, n - 700}, {0, 300}};
    const auto run = [&](bool bucketed, int threads, bool read) {
        served_shard s({0, n}, adam(), threads);
        s.shard().assign(init);
        for (int step = 0; step < 3; ++step) {
            const float* reading = s.shard().values().data();
            const auto reads = [&](const float* v, shard_range) { return read && v == reading; };
            if (!bucketed) s.apply(grads, {0, n}, reads);
            else {
                const auto update = s.shard().begin_update();
                for (const auto& b : buckets)
                    s.apply(std::span<const float>(grads).subspan(b.begin, b.size()), b, reads, update);
            }
        }
        BOOST_TEST(s.shard().updates() == 3u);
        return values_of(s);
    };
    const auto whole = run(false, 1, false);
    BOOST_TEST(whole != init);
    BOOST_TEST(run(true, 1, false) == whole, boost::test_tools::per_element());
    BOOST_TEST(run(true, 3, false) == whole, boost::test_tools::per_element());
    BOOST_TEST(run(true, 1, true) == whole, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_large_shard_applies_a_push_in_blocks_on_the_update_threads_as_one_update)
{
    const std::size_t n = served_shard::threaded_update_elements + 5;
    served_shard threaded({0, n}, sgd(1.0f), 3), alone({0, n}, sgd(1.0f), 1);
    std::vector<float> grads(n);
    for (std::size_t i = 0; i < n; ++i) grads[i] = static_cast<float>(i % 7);
    threaded.apply(grads, {0, n}, nobody_reads);
    alone.apply(grads, {0, n}, nobody_reads);
    BOOST_TEST(values_of(threaded) == values_of(alone));
    BOOST_TEST(threaded.shard().updates() == 1u);
}

BOOST_AUTO_TEST_CASE(a_sync_step_applies_the_mean_and_copies_the_new_values)
{
    const std::size_t n = served_shard::update_block + 3;  // two blocks
    served_shard s({0, n}, sgd(1.0f), 1);
    const std::vector<float> a(n, 1.0f), b(n, 3.0f);
    std::vector<float> copy(n, -9.0f);
    const std::vector<const float*> grads{a.data(), b.data()};
    const std::vector<float*> copies{copy.data()};
    s.apply_mean({0, n}, grads, 0.5f, copies, s.shard().begin_update());
    BOOST_TEST(values_of(s) == std::vector<float>(n, -2.0f), boost::test_tools::per_element());
    BOOST_TEST(copy == std::vector<float>(n, -2.0f), boost::test_tools::per_element());
    BOOST_TEST(s.shard().updates() == 1u);
}

// The overlapped step's buckets: ranges of the shard (not on block
// boundaries), in backward's order, each its own apply_mean with the step's
// one update, make the values and the optimizer state of the whole-shard
// mean, bit for bit, step after step.
BOOST_AUTO_TEST_CASE(buckets_of_a_step_make_the_values_of_the_whole_shard_bit_for_bit)
{
    const std::size_t n = 2 * served_shard::update_block + 1001;
    const std::uint64_t b = 100;  // the shard's first element
    served_shard whole({b, b + n}, adam(), 1), bucketed({b, b + n}, adam(), 1);
    std::vector<float> init(n);
    for (std::size_t i = 0; i < n; ++i) init[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
    whole.shard().assign(init);
    bucketed.shard().assign(init);
    const std::vector<shard_range> buckets{{b + 5000, b + n}, {b + 17, b + 5000}, {b, b + 17}};
    std::vector<float> g0(n), g1(n), copy_whole(n), copy_bucketed(n);
    for (int step = 0; step < 5; ++step) {
        for (std::size_t i = 0; i < n; ++i) {
            g0[i] = 0.001f * static_cast<float>((i * 7 + step) % 113) - 0.05f;
            g1[i] = 0.003f * static_cast<float>((i * 3 + step) % 59) - 0.07f;
        }
        const std::vector<const float*> all{g0.data(), g1.data()};
        const std::vector<float*> to_whole{copy_whole.data()}, to_bucketed{copy_bucketed.data()};
        whole.apply_mean({b, b + n}, all, 0.5f, to_whole, whole.shard().begin_update());
        const std::uint64_t update = bucketed.shard().begin_update();
        for (const auto& r : buckets) {
            const std::size_t at = r.begin - b;
            const std::vector<const float*> part{g0.data() + at, g1.data() + at};
            bucketed.apply_mean(r, part, 0.5f, to_bucketed, update);
        }
        BOOST_TEST(values_of(bucketed) == values_of(whole), boost::test_tools::per_element());
        BOOST_TEST(copy_bucketed == copy_whole, boost::test_tools::per_element());
    }
    const auto sw = whole.shard().state(), sb = bucketed.shard().state();
    BOOST_TEST(std::vector<float>(sb.begin(), sb.end()) == std::vector<float>(sw.begin(), sw.end()),
               boost::test_tools::per_element());
    BOOST_TEST(bucketed.shard().updates() == 5u);
}
