// Criteo-format click data: the line parser and its errors, the sharded
// streaming reader, the AUC, and datagen's planted-teacher data set.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE ctr
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/data/ctr.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

using namespace pstrain::data;
namespace fs = std::filesystem;

namespace {

std::string criteo_line(const std::string& label, const std::string& first_int = "5", const std::string& first_cat = "68fd1e64")
{
    std::string l = label + "\t" + first_int;
    for (int i = 1; i < ctr_numeric_fields; ++i) l += "\t" + std::to_string(i);
    l += "\t" + first_cat;
    for (int i = 1; i < ctr_categorical_fields; ++i) l += i % 5 == 0 ? "\t" : "\t0a0b0c0" + std::to_string(i % 10);
    return l;
}

struct temp_dir {
    fs::path path = fs::temp_directory_path() / ("pstrain-ctr-test-" + std::to_string(::getpid()));
    temp_dir() { fs::create_directories(path); }
    ~temp_dir() { fs::remove_all(path); }
};

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

BOOST_AUTO_TEST_CASE(shards_split_the_lines_of_all_files_without_overlap_and_bad_lines_name_file_and_line)
{
    temp_dir d;
    {
        std::ofstream a(d.path / "a.tsv"), b(d.path / "b.tsv"), t(d.path / "test.tsv");
        for (int i = 0; i < 7; ++i) a << criteo_line(i % 2 ? "1" : "0", std::to_string(i)) << "\n";
        for (int i = 7; i < 12; ++i) b << criteo_line("0", std::to_string(i)) << "\n";
        t << criteo_line("1") << "\n";
    }
    const auto files = ctr_train_files(d.path);
    BOOST_TEST(files.size() == 2u);  // test.tsv is the held-out part
    std::multiset<float> seen;
    for (std::size_t shard = 0; shard < 3; ++shard) {
        ctr_reader r(files, shard, 3);
        ctr_sample s;
        int n = 0;
        while (r.next(s)) {
            seen.insert(s.numeric[0]);
            ++n;
        }
        BOOST_TEST(n == 4, "shard " << shard);
    }
    BOOST_TEST(seen.size() == 12u);
    BOOST_TEST(std::set<float>(seen.begin(), seen.end()).size() == 12u);

    {
        std::ofstream b(d.path / "b.tsv", std::ios::app);
        b << "1\tnot a line\n";
    }
    ctr_reader strict(files, 0, 1);
    ctr_sample s;
    try {
        while (strict.next(s)) {
        }
        BOOST_ERROR("a malformed line was read without an error");
    } catch (const pstrain::error& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find("b.tsv:6:") != std::string::npos, what);
        BOOST_TEST(what.find("--skip-bad-lines") != std::string::npos, what);
    }
    ctr_reader lenient(files, 0, 1, true);
    int n = 0;
    while (lenient.next(s)) ++n;
    BOOST_TEST(n == 12);
    BOOST_TEST(lenient.bad_lines() == 1u);
    BOOST_CHECK_THROW(ctr_train_files(d.path / "nothing-here"), pstrain::error);
}

BOOST_AUTO_TEST_CASE(auc_counts_pairs_ranked_right_and_ties_as_half)
{
    BOOST_TEST(auc(std::vector<float>{0.1f, 0.4f, 0.35f, 0.8f}, std::vector<float>{0, 0, 1, 1}) == 0.75);
    BOOST_TEST(auc(std::vector<float>{1, 2, 3}, std::vector<float>{0, 1, 1}) == 1.0);
    BOOST_TEST(auc(std::vector<float>{3, 2, 1}, std::vector<float>{0, 1, 1}) == 0.0);
    BOOST_TEST(auc(std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}, std::vector<float>{0, 1, 0, 1}) == 0.5);
    BOOST_TEST(auc(std::vector<float>{1, 2}, std::vector<float>{1, 1}) == 0.5);
}

BOOST_AUTO_TEST_CASE(datagen_writes_readable_files_and_the_teachers_auc_deterministically)
{
    temp_dir d;
    ctr_generator_options o;
    o.samples = 30000;
    o.seed = 5;
    o.lines_per_file = 10000;
    const auto g = generate_ctr(d.path / "one", o);
    BOOST_TEST(g.train_samples == 27000u);
    BOOST_TEST(g.test_samples == 3000u);
    BOOST_TEST(g.files.size() == 4u);  // three train files and test.tsv
    BOOST_TEST(g.oracle_auc > 0.7);
    BOOST_TEST(g.oracle_auc < 0.9);
    BOOST_TEST(g.click_rate > 0.1);
    BOOST_TEST(g.click_rate < 0.5);
    std::ifstream oracle(d.path / "one" / "oracle.json");
    std::string text((std::istreambuf_iterator<char>(oracle)), {});
    BOOST_TEST(text.find("\"oracle_auc\":") != std::string::npos, text);

    // Every line reads back; a second run with the seed writes the same bytes.
    ctr_reader r(ctr_train_files(d.path / "one"), 0, 1);
    ctr_sample s;
    std::uint64_t n = 0;
    while (r.next(s)) ++n;
    BOOST_TEST(n == 27000u);
    generate_ctr(d.path / "two", o);
    std::ifstream a(d.path / "one" / "train-00001.tsv"), b(d.path / "two" / "train-00001.tsv");
    BOOST_TEST((std::string((std::istreambuf_iterator<char>(a)), {}) == std::string((std::istreambuf_iterator<char>(b)), {})));

    o.test_fraction = 1.5;
    BOOST_CHECK_THROW(generate_ctr(d.path / "three", o), pstrain::error);
}
