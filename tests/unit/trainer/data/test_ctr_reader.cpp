// The sharded streaming reader of Criteo-format files.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE ctr_reader
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/data/ctr_reader.hpp"

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

using namespace pstrain::data;
namespace fs = std::filesystem;

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

struct temp_dir {
    fs::path path = fs::temp_directory_path() / ("pstrain-ctr-test-" + std::to_string(::getpid()));
    temp_dir() { fs::create_directories(path); }
    ~temp_dir() { fs::remove_all(path); }
};

}  // namespace

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
        while (strict.next(s)) {}
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
