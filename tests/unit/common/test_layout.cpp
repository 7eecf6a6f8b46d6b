#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE layout
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "common/layout.hpp"

using namespace pstrain;
using ints = std::vector<int>;

BOOST_AUTO_TEST_CASE(block_fills_nodes_in_order)
{
    auto l = make_layout({"a", "b", "c"}, {2, 2, 1}, distribution::block);
    BOOST_TEST(l.node_of_rank == (ints{0, 0, 1, 1, 2}));
    BOOST_TEST(l.local_index(3) == 1);
    BOOST_TEST(l.max_tasks_per_node() == 2);
}

BOOST_AUTO_TEST_CASE(cyclic_deals_round_robin)
{
    auto l = make_layout({"a", "b", "c"}, {2, 2, 2}, distribution::cyclic);
    BOOST_TEST(l.node_of_rank == (ints{0, 1, 2, 0, 1, 2}));
    BOOST_TEST(l.ranks_of_node[1] == (ints{1, 4}));
}

BOOST_AUTO_TEST_CASE(cyclic_skips_full_nodes_when_uneven)
{
    // What Slurm does for -N3 -n6 -m cyclic on nodes of 4 CPUs: 4,1,1.
    auto l = make_layout({"n1", "n2", "n3"}, {4, 1, 1}, distribution::cyclic);
    BOOST_TEST(l.node_of_rank == (ints{0, 1, 2, 0, 0, 0}));
}

BOOST_AUTO_TEST_CASE(plane_deals_blocks)
{
    auto l = make_layout({"a", "b"}, {3, 2}, distribution::plane, 2);
    BOOST_TEST(l.node_of_rank == (ints{0, 0, 1, 1, 0}));
}

BOOST_AUTO_TEST_CASE(distribution_names)
{
    BOOST_TEST((parse_distribution("") == distribution::block));
    BOOST_TEST((parse_distribution("cyclic:block") == distribution::cyclic));
    BOOST_TEST((parse_distribution("block:cyclic,Pack") == distribution::block));
    BOOST_TEST((parse_distribution("plane") == distribution::plane));
    BOOST_CHECK_THROW(parse_distribution("arbitrary"), error);
    BOOST_CHECK_THROW(parse_distribution("sideways"), error);
}

BOOST_AUTO_TEST_CASE(mismatched_lists_are_errors)
{
    BOOST_CHECK_THROW(make_layout({"a", "b"}, {1}, distribution::block), error);
    BOOST_CHECK_THROW(make_layout({"a"}, {0}, distribution::block), error);
}
