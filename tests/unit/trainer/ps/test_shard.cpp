#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE shard
#include <boost/test/unit_test.hpp>

#include "trainer/ps/shard.hpp"

using namespace pstrain::ps;

BOOST_AUTO_TEST_CASE(shard_map_balances_bytes_and_covers_everything)
{
    for (int p = 1; p <= 7; ++p) {
        auto map = make_partition(79510, p);
        BOOST_TEST(map.size() == std::size_t(p));
        BOOST_TEST(map.front().begin == 0u);
        BOOST_TEST(map.back().end == 79510u);
        for (std::size_t i = 0; i + 1 < map.size(); ++i) BOOST_TEST(map[i].end == map[i + 1].begin);
        std::size_t lo = map[0].size(), hi = lo;
        for (auto& r : map) {
            lo = std::min(lo, r.size());
            hi = std::max(hi, r.size());
        }
        BOOST_TEST(hi - lo <= 1u);
    }
}

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

BOOST_AUTO_TEST_CASE(apply_into_matches_apply_and_leaves_the_old_values_in_the_spare)
{
    for (auto kind : {optimizer_kind::sgd, optimizer_kind::momentum, optimizer_kind::adagrad, optimizer_kind::adam}) {
        optimizer_config c;
        c.kind = kind;
        parameter_shard a({0, 5}, c), b({0, 5}, c);
        std::vector<float> init{1, -2, 3, -4, 5}, g1{0.5f, 0.1f, -0.3f, 2, -1}, g2{-1, 0.2f, 0.4f, -2, 3}, spare;
        a.assign(init);
        b.assign(init);
        a.apply(g1);
        a.apply(g2);
        b.apply_into(spare, g1);
        BOOST_TEST(spare == init, boost::test_tools::per_element());  // a reply sending the old values still sees them
        const std::vector<float> after_first(b.values().begin(), b.values().end());
        b.apply_into(spare, g2);
        BOOST_TEST(spare == after_first, boost::test_tools::per_element());
        BOOST_TEST(std::vector<float>(a.values().begin(), a.values().end()) ==
                       std::vector<float>(b.values().begin(), b.values().end()),
                   boost::test_tools::per_element());
        BOOST_TEST(a.updates() == b.updates());
    }
}
