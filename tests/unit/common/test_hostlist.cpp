#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE hostlist
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "common/hostlist.hpp"

using pstrain::expand_hostlist;
using pstrain::expand_task_counts;
using strings = std::vector<std::string>;

BOOST_AUTO_TEST_CASE(single_and_plain_lists)
{
    BOOST_TEST(expand_hostlist("n1") == strings{"n1"});
    BOOST_TEST(expand_hostlist("alpha,beta") == (strings{"alpha", "beta"}));
}

BOOST_AUTO_TEST_CASE(ranges_keep_slurm_order_not_text_order)
{
    BOOST_TEST(expand_hostlist("n[9-11]") == (strings{"n9", "n10", "n11"}));
    BOOST_TEST(expand_hostlist("n[1,3-4],gpu7") == (strings{"n1", "n3", "n4", "gpu7"}));
}

BOOST_AUTO_TEST_CASE(zero_padding_is_kept)
{
    BOOST_TEST(expand_hostlist("c[08-10]") == (strings{"c08", "c09", "c10"}));
}

BOOST_AUTO_TEST_CASE(several_bracket_groups_and_suffixes)
{
    BOOST_TEST(expand_hostlist("r[1-2]n[1-2]") == (strings{"r1n1", "r1n2", "r2n1", "r2n2"}));
    BOOST_TEST(expand_hostlist("n[1-2]-ib") == (strings{"n1-ib", "n2-ib"}));
}

BOOST_AUTO_TEST_CASE(malformed_lists_are_errors)
{
    for (const char* bad : {"", "n[1-", "n1]", "n[3-1]", "n[a-b]", "n[[1]]", "a,,b", "n[1-2", "n 1"})
        BOOST_CHECK_THROW(expand_hostlist(bad), pstrain::error);
}

BOOST_AUTO_TEST_CASE(task_counts_with_repeats)
{
    BOOST_TEST(expand_task_counts("2(x2),1") == (std::vector<int>{2, 2, 1}));
    BOOST_TEST(expand_task_counts("4") == (std::vector<int>{4}));
    BOOST_TEST(expand_task_counts("1,3(x3)") == (std::vector<int>{1, 3, 3, 3}));
}

BOOST_AUTO_TEST_CASE(malformed_task_counts_are_errors)
{
    for (const char* bad : {"", "2(x)", "2(3)", "x", "2,", "2(x2"})
        BOOST_CHECK_THROW(expand_task_counts(bad), pstrain::error);
}
