#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE shard
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "common/random.hpp"
#include "library/ps/shard.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

using namespace pstrain::ps;

namespace {

// What is wrong with a shard map of n elements over p PS tasks, or "".
std::string shard_map_problem(const std::vector<shard_range>& map, std::size_t n, std::size_t p)
{
    std::ostringstream why;
    if (map.size() != p) {
        why << map.size() << " ranges";
        return why.str();
    }
    if (map.front().begin != 0) why << "the first range begins at " << map.front().begin << "; ";
    if (map.back().end != n) why << "the last range ends at " << map.back().end << "; ";
    std::size_t smallest = n, largest = 0;
    for (std::size_t i = 0; i < p; ++i) {
        const auto& r = map[i];
        if (r.end < r.begin) why << "range " << i << " is [" << r.begin << ", " << r.end << "); ";
        if (i + 1 < p && r.end != map[i + 1].begin)
            why << "range " << i << " ends at " << r.end << ", range " << i + 1 << " begins at " << map[i + 1].begin
                << "; ";
        smallest = std::min(smallest, r.size());
        largest = std::max(largest, r.size());
    }
    // Equal bytes per PS task, to one element (one float).
    if (largest - smallest > 1) why << "range sizes from " << smallest << " to " << largest << "; ";
    return why.str();
}

}  // namespace

BOOST_AUTO_TEST_CASE(shard_map_covers_every_element_once_in_order_with_balanced_sizes)
{
    // The map is arithmetic only, so sizes up to 2^40 cost nothing.
    std::vector<std::size_t> sizes{0,
                                   1,
                                   2,
                                   3,
                                   5,
                                   7,
                                   13,
                                   61,
                                   63,
                                   64,
                                   65,
                                   127,
                                   8191,
                                   79510,
                                   131071,
                                   235146,
                                   524287,
                                   2147483647,
                                   std::size_t{1} << 32,
                                   4294967311,
                                   (std::size_t{1} << 40) - 87,
                                   std::size_t{1} << 40};
    // and random ones, log-uniform from 0 to 2^40, from a fixed seed
    pstrain::random::splitmix64 rng(20240611);
    for (int i = 0; i < 2000; ++i) {
        const int bits = static_cast<int>(rng() % 41);
        sizes.push_back(bits == 0 ? 0 : rng() >> (64 - bits));
    }
    for (std::size_t n : sizes)
        for (int p = 1; p <= 64; ++p) {
            const auto problem = shard_map_problem(make_partition(n, p), n, static_cast<std::size_t>(p));
            BOOST_TEST(problem.empty(), n << " elements over " << p << " PS tasks: " << problem);
        }
}

BOOST_AUTO_TEST_CASE(shard_map_needs_a_shard) { BOOST_CHECK_THROW(make_partition(10, 0), pstrain::error); }

BOOST_AUTO_TEST_CASE(shard_applies_and_counts_updates)
{
    optimizer_config c;
    c.kind = optimizer_kind::adam;
    parameter_shard s({10, 13}, c);
    BOOST_TEST(s.values().size() == 3u);
    BOOST_TEST(s.state().size() == 6u);
    std::vector<float> v{1, 2, 3}, g{1, 1, 1};
    s.assign(v);
    s.apply(g);
    s.apply(g);
    BOOST_TEST(s.updates() == 2u);
    BOOST_TEST(s.values()[0] < 1.0f);
}

BOOST_AUTO_TEST_CASE(apply_into_matches_apply_and_leaves_the_old_values_in_the_back_buffer)
{
    for (auto kind : {optimizer_kind::sgd, optimizer_kind::momentum, optimizer_kind::adagrad, optimizer_kind::adam}) {
        optimizer_config c;
        c.kind = kind;
        parameter_shard a({0, 5}, c), b({0, 5}, c);
        std::vector<float> init{1, -2, 3, -4, 5}, g1{0.5f, 0.1f, -0.3f, 2, -1}, g2{-1, 0.2f, 0.4f, -2, 3};
        float_buffer back;
        a.assign(init);
        b.assign(init);
        a.apply(g1);
        a.apply(g2);
        b.apply_into(back, g1, b.range());
        BOOST_TEST(back == init, boost::test_tools::per_element());  // a reply sending the old values still sees them
        const std::vector<float> after_first(b.values().begin(), b.values().end());
        b.apply_into(back, g2, b.range());
        BOOST_TEST(back == after_first, boost::test_tools::per_element());
        BOOST_TEST(std::vector<float>(a.values().begin(), a.values().end()) ==
                       std::vector<float>(b.values().begin(), b.values().end()),
                   boost::test_tools::per_element());
        BOOST_TEST(a.updates() == b.updates());
    }
}

BOOST_AUTO_TEST_CASE(a_part_of_the_shard_is_updated_alone_with_its_own_state)
{
    // Momentum: the state of the part moves, the rest keeps its values and state.
    pstrain::ps::optimizer_config cfg;
    cfg.kind = pstrain::ps::optimizer_kind::momentum;
    cfg.learning_rate = 0.5f;
    cfg.momentum = 0.5f;
    parameter_shard whole({100, 110}, cfg), part({100, 110}, cfg);
    std::vector<float> init(10, 1.0f), grads(10, 0.0f);
    whole.assign(init);
    part.assign(init);
    for (std::size_t i = 3; i < 7; ++i) grads[i] = 2.0f;
    whole.apply(grads);
    part.apply(std::span<const float>(grads).subspan(3, 4), {103, 107});
    for (std::size_t i = 0; i < 10; ++i) {
        BOOST_TEST(part.values()[i] == whole.values()[i]);
        BOOST_TEST(part.state()[i] == whole.state()[i]);
    }
    BOOST_TEST(part.values()[4] == 0.0f);  // 1 - 0.5 * (0.5 * 0 + 2)
    BOOST_TEST(part.values()[0] == 1.0f);
    float_buffer back;
    part.apply_into(back, std::span<const float>(grads).subspan(3, 4), {103, 107});
    BOOST_TEST(back[4] == 0.0f);            // the old values stay in the back buffer
    BOOST_TEST(part.values()[4] == -1.5f);  // a = 0.5 * 2 + 2 = 3; 0 - 0.5 * 3
    BOOST_TEST(part.values()[9] == 1.0f);
}

BOOST_AUTO_TEST_CASE(shard_buffers_sit_where_the_workers_slice_sits_in_its_page)
{
    // A CMA copy between buffers at different offsets within a cache line
    // runs at a quarter of its speed.  A worker's buffers start on a page, so
    // its slice of a shard [begin, end) starts begin * 4 bytes past a page
    // boundary (mod 4096): the shard's values, and a back buffer after the swap,
    // start at that offset too.
    for (std::uint64_t begin : {0ull, 4ull, 1000ull, 39755ull, (1ull << 33) + 7}) {
        optimizer_config c;
        parameter_shard s({begin, begin + 70000}, c);
        const auto offset = begin * sizeof(float) % 4096;
        BOOST_TEST(reinterpret_cast<std::uintptr_t>(s.values().data()) % 4096 == offset);
        float_buffer back;
        std::vector<float> g(70000, 0.5f);
        s.apply_into(back, g);
        BOOST_TEST(reinterpret_cast<std::uintptr_t>(s.values().data()) % 4096 == offset);
        BOOST_TEST(reinterpret_cast<std::uintptr_t>(back.data()) % 4096 == offset);
        BOOST_TEST(back[0] == 0.0f);
        BOOST_TEST(s.values()[0] == -0.005f);
    }
}

BOOST_AUTO_TEST_CASE(float_buffer_resizes_keeping_values_and_offset)
{
    float_buffer b(3, 8);
    BOOST_TEST(b.size() == 3u);
    BOOST_TEST(b[0] == 0.0f);
    b[2] = 7.0f;
    b.resize(5000);
    BOOST_TEST(b.size() == 5000u);
    BOOST_TEST(b[2] == 7.0f);
    BOOST_TEST(b[4999] == 0.0f);
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(b.data()) % 4096 == 8u);
    float_buffer other(1, 0);
    b.swap(other);
    BOOST_TEST(b.size() == 1u);
    BOOST_TEST(other[2] == 7.0f);
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(other.data()) % 4096 == 8u);
    BOOST_CHECK_THROW(float_buffer(1, 6), pstrain::error);  // not a float's offset
}

// Moving averages (a batch normalization's moving mean and variance): the
// optimizer leaves them alone and an update adds the pushed delta; every
// other element gets the optimizer's update, with its state, as without
// moving averages.  Checked through apply, apply_into and apply_block
// (blocks that cut across the ranges), for sgd and adam.
BOOST_AUTO_TEST_CASE(moving_average_elements_add_the_pushed_delta_and_skip_the_optimizer)
{
    const shard_range range{10, 40};
    const std::vector<shard_range> moving{{0, 12}, {20, 25}, {28, 29}, {39, 50}};
    auto is_moving = [&](std::uint64_t i) {
        return std::any_of(moving.begin(), moving.end(),
                           [&](const shard_range& r) { return r.begin <= i && i < r.end; });
    };
    for (auto kind : {optimizer_kind::sgd, optimizer_kind::adam}) {
        optimizer_config c;
        c.kind = kind;
        c.learning_rate = 0.5f;
        for (int mode = 0; mode < 3; ++mode) {
            parameter_shard with(range, c), plain(range, c);
            with.set_moving_averages(moving);
            std::vector<float> init(range.size());
            for (std::size_t i = 0; i < init.size(); ++i) init[i] = 0.25f * static_cast<float>(i);
            with.assign(init);
            plain.assign(init);
            float_buffer back;
            for (int step = 1; step <= 3; ++step) {
                std::vector<float> g(range.size());
                for (std::size_t i = 0; i < g.size(); ++i)
                    g[i] = 0.1f * static_cast<float>(step) - 0.01f * static_cast<float>(i);
                const std::vector<float> before(with.values().begin(), with.values().end());
                if (mode == 0) {
                    with.apply(g);
                } else if (mode == 1) {
                    with.apply_into(back, g);
                } else {
                    const auto u = with.begin_update();
                    for (std::size_t at = 0; at < g.size(); at += 7)
                        with.apply_block(std::span(g).subspan(at, std::min<std::size_t>(7, g.size() - at)), at, u);
                }
                plain.apply(g);
                for (std::size_t i = 0; i < g.size(); ++i) {
                    const auto at = range.begin + i;
                    if (is_moving(at))
                        BOOST_TEST_REQUIRE(with.values()[i] == before[i] + g[i],
                                           "mode " << mode << " step " << step << ": moving element " << at);
                    else
                        BOOST_TEST_REQUIRE(with.values()[i] == plain.values()[i],
                                           "mode " << mode << " step " << step << ": trainable element " << at);
                }
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(overlapping_moving_average_ranges_are_refused)
{
    parameter_shard s({0, 10}, optimizer_config{});
    BOOST_CHECK_EXCEPTION(s.set_moving_averages({{0, 5}, {4, 8}}), pstrain::error, [](const pstrain::error& e) {
        return std::string(e.what()).find("overlaps") != std::string::npos;
    });
}
