#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE shard
#include <boost/test/unit_test.hpp>

#include "trainer/ps/shard.hpp"

using namespace pstrain::ps;

BOOST_AUTO_TEST_CASE(shard_map_balances_bytes_and_covers_everything)
{
    for (int p = 1; p <= 7; ++p) {
        auto map = make_shard_map(79510, p);
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
