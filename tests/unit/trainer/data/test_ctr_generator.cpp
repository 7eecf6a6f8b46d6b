// datagen's planted-teacher data set, read back by the reader.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE ctr_generator
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/data/ctr_generator.hpp"
#include "trainer/data/ctr_reader.hpp"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

using namespace pstrain::data;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
    fs::path path = fs::temp_directory_path() / ("pstrain-ctr-test-" + std::to_string(::getpid()));
    temp_dir() { fs::create_directories(path); }
    ~temp_dir() { fs::remove_all(path); }
};

}  // namespace

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
    BOOST_TEST(
        (std::string((std::istreambuf_iterator<char>(a)), {}) == std::string((std::istreambuf_iterator<char>(b)), {})));

    o.test_fraction = 1.5;
    BOOST_CHECK_THROW(generate_ctr(d.path / "three", o), pstrain::error);
}
