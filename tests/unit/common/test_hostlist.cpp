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

// Found by tests/fuzz/fuzz_plugin_options: a node list with a byte that is
// not UTF-8 expanded to a host name that nlohmann::json's dump() refused
// with its own exception, which escaped the plugin's task_init.
BOOST_AUTO_TEST_CASE(bytes_that_are_not_printable_ascii_are_errors)
{
    for (const char* bad : {"n[1-2]\xff", "n\x01", "caf\xc3\xa9", "n1,\x7f"}) {
        try {
            expand_hostlist(bad);
            BOOST_ERROR("no error for a host name with a byte outside printable ASCII");
        } catch (const pstrain::error& e) {
            BOOST_TEST(std::string(e.what()).find("host names are printable ASCII") != std::string::npos, e.what());
        }
    }
    BOOST_TEST(expand_hostlist("n-1_a.b") == strings{"n-1_a.b"});
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
