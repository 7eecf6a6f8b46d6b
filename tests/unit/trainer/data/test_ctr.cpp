// Criteo-format click data: the line parser and its errors, and the AUC.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE ctr
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/data/ctr.hpp"

#include <cmath>
#include <string>
#include <vector>

using namespace pstrain::data;

namespace {

std::string criteo_line(const std::string& label, const std::string& first_int = "5",
                        const std::string& first_cat = "68fd1e64")
{
    std::string l = label + "\t" + first_int;
    for (int i = 1; i < ctr_numeric_fields; ++i) l += "\t" + std::to_string(i);
    l += "\t" + first_cat;
    for (int i = 1; i < ctr_categorical_fields; ++i) l += i % 5 == 0 ? "\t" : "\t0a0b0c0" + std::to_string(i % 10);
    return l;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_criteo_line_parses_with_blanks_and_keys_per_field)
{
    ctr_sample s;
    std::string why;
    BOOST_TEST_REQUIRE(parse_ctr_line(criteo_line("1"), s, why), why);
    BOOST_TEST(s.label == 1.0f);
    BOOST_TEST(s.numeric[0] == std::log1p(5.0f), boost::test_tools::tolerance(1e-6f));
    // The same hex value in two fields is two keys; a blank is a key of its own.
    ctr_sample t;
    BOOST_TEST_REQUIRE(parse_ctr_line(criteo_line("0", "", "0a0b0c01"), t, why), why);
    BOOST_TEST(t.numeric[0] == 0.0f);
    BOOST_TEST(t.keys[0] != s.keys[0]);
    BOOST_TEST(t.keys[0] != t.keys[1]);  // "0a0b0c01" in C1 and in C2
    BOOST_TEST(s.keys[5] == t.keys[5]);  // both blank in C6
    BOOST_TEST(parse_ctr_line(criteo_line("0") + "\r", t, why), why);
    BOOST_TEST(parse_ctr_line(criteo_line("0", "-3"), t, why), why);
    BOOST_TEST(t.numeric[0] == -std::log1p(3.0f), boost::test_tools::tolerance(1e-6f));
}

// A field may hold several ids (an embedding bag): each its own key, the
// same key a single id of that field gets; the other fields keep one each.
BOOST_AUTO_TEST_CASE(a_multi_hot_field_holds_several_ids)
{
    ctr_sample one, many;
    std::string why;
    BOOST_TEST_REQUIRE(parse_ctr_line(criteo_line("1", "5", "68fd1e64"), one, why), why);
    BOOST_TEST(one.keys.size() == static_cast<std::size_t>(ctr_categorical_fields));
    BOOST_TEST(one.field(0).size() == 1u);
    BOOST_TEST_REQUIRE(parse_ctr_line(criteo_line("1", "5", "68fd1e64,a,68fd1e64"), many, why), why);
    BOOST_TEST(many.keys.size() == static_cast<std::size_t>(ctr_categorical_fields) + 2);
    BOOST_TEST_REQUIRE(many.field(0).size() == 3u);
    BOOST_TEST(many.field(0)[0] == one.field(0)[0]);
    BOOST_TEST(many.field(0)[2] == one.field(0)[0]);
    BOOST_TEST(many.field(0)[1] != one.field(0)[0]);
    for (int f = 1; f < ctr_categorical_fields; ++f) {
        BOOST_TEST_REQUIRE(many.field(f).size() == 1u);
        BOOST_TEST(many.field(f)[0] == one.field(f)[0], "field " << f);
    }
    // Parsing again into the same sample starts afresh.
    BOOST_TEST_REQUIRE(parse_ctr_line(criteo_line("0"), many, why), why);
    BOOST_TEST(many.keys == one.keys, boost::test_tools::per_element());

    BOOST_TEST(!parse_ctr_line(criteo_line("1", "5", "a,,b"), many, why));
    BOOST_TEST(why.find("C1 is 'a,,b': id 2 of its list is ''") != std::string::npos, why);
    BOOST_TEST(!parse_ctr_line(criteo_line("1", "5", "a,"), many, why));
    BOOST_TEST(why.find("id 2 of its list") != std::string::npos, why);
    std::string huge = "1";
    for (std::size_t i = 0; i < ctr_max_bag; ++i) huge += ",1";
    BOOST_TEST(!parse_ctr_line(criteo_line("1", "5", huge), many, why));
    BOOST_TEST(why.find("holds more than 1024 ids") != std::string::npos, why);
}

BOOST_AUTO_TEST_CASE(a_malformed_line_names_what_is_wrong)
{
    ctr_sample s;
    std::string why;
    BOOST_TEST(!parse_ctr_line(criteo_line("2"), s, why));
    BOOST_TEST(why.find("label is '2'") != std::string::npos, why);
    BOOST_TEST(!parse_ctr_line(criteo_line("1", "x7"), s, why));
    BOOST_TEST(why.find("I1 is 'x7'") != std::string::npos, why);
    BOOST_TEST(!parse_ctr_line(criteo_line("1", "5", "zz"), s, why));
    BOOST_TEST(why.find("C1 is 'zz'") != std::string::npos, why);
    BOOST_TEST(!parse_ctr_line(criteo_line("1") + "\textra", s, why));
    BOOST_TEST(why.find("41 tab-separated fields where a Criteo line has 40") != std::string::npos, why);
    BOOST_TEST(!parse_ctr_line("1\t2\t3", s, why));
    BOOST_TEST(why.find("3 tab-separated fields") != std::string::npos, why);
}

BOOST_AUTO_TEST_CASE(auc_counts_pairs_ranked_right_and_ties_as_half)
{
    BOOST_TEST(auc(std::vector<float>{0.1f, 0.4f, 0.35f, 0.8f}, std::vector<float>{0, 0, 1, 1}) == 0.75);
    BOOST_TEST(auc(std::vector<float>{1, 2, 3}, std::vector<float>{0, 1, 1}) == 1.0);
    BOOST_TEST(auc(std::vector<float>{3, 2, 1}, std::vector<float>{0, 1, 1}) == 0.0);
    BOOST_TEST(auc(std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}, std::vector<float>{0, 1, 0, 1}) == 0.5);
    BOOST_TEST(auc(std::vector<float>{1, 2}, std::vector<float>{1, 1}) == 0.5);
}
