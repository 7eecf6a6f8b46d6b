#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE parse
#include <boost/test/unit_test.hpp>

#include "common/parse.hpp"

using pstrain::parse_count;
using pstrain::split;
using views = std::vector<std::string_view>;

BOOST_AUTO_TEST_CASE(counts_are_digits_in_range)
{
    BOOST_TEST(parse_count("42", 1, 100).value() == 42);
    for (const char* bad : {"", "-1", "+1", " 1", "1 ", "1x", "0x10", "101", "0", "99999999999999999999"})
        BOOST_TEST(!parse_count(bad, 1, 100).has_value(), bad);
}

BOOST_AUTO_TEST_CASE(split_keeps_empty_items)
{
    BOOST_TEST(split("a,,b", ',') == (views{"a", "", "b"}));
    BOOST_TEST(split("", ',') == (views{""}));
    BOOST_TEST(split("a,", ',') == (views{"a", ""}));
    BOOST_TEST(split("n1:1", ',') == (views{"n1:1"}));
}
