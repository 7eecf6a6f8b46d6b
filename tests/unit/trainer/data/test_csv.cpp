#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE csv
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "tests/unit/allocation_probe.hpp"
#include "trainer/data/dataset.hpp"

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace {
fs::path write(const std::string& name, const std::string& text)
{
    auto p = fs::temp_directory_path() / (name + std::to_string(::getpid()));
    std::ofstream(p) << text;
    return p;
}
std::string error_of(const fs::path& p)
{
    try {
        pstrain::data::read_csv(p);
    } catch (const pstrain::error& e) {
        return e.what();
    }
    return "";
}
}  // namespace

BOOST_AUTO_TEST_CASE(reads_with_and_without_header)
{
    auto with = write("h.csv", "label,pixel0,pixel1\n3,0,255\n1,51,102\r\n");
    auto d = pstrain::data::read_csv(with);
    BOOST_TEST(d.rows == 2u);
    BOOST_TEST(d.cols == 2u);
    BOOST_TEST(d.labels[0] == 3);
    BOOST_TEST(d.features[1] == 1.0f);
    BOOST_TEST(d.features[2] == 0.2f, boost::test_tools::tolerance(1e-6f));
    BOOST_TEST(d.num_classes == 4);
    auto without = write("n.csv", "0,1,2\n");
    BOOST_TEST(pstrain::data::read_csv(without).rows == 1u);
    fs::remove(with);
    fs::remove(without);
}

BOOST_AUTO_TEST_CASE(bad_rows_name_the_line)
{
    auto p = write("b.csv", "1,2,3\n1,x,3\n");
    BOOST_TEST(error_of(p).find(":2: field 2 'x' is not a number") != std::string::npos);
    auto q = write("c.csv", "1,2,3\n1,2\n");
    BOOST_TEST(error_of(q).find(":2: 1 pixel columns, but the first example has 2") != std::string::npos);
    auto r = write("d.csv", "-1,2\n");
    BOOST_TEST(error_of(r).find("label '-1' is not a class number") != std::string::npos);
    BOOST_TEST(error_of("/nonexistent/x.csv").find("cannot open") != std::string::npos);
    for (auto& f : {p, q, r}) fs::remove(f);
}

// A label decides the number of classes, hence the model's output layer:
// one past 65535, a huge one, NaN or infinity is refused by its text (and
// never converted to an int first, which is undefined out of range); a
// file of no examples is an error.  Nothing is allocated beyond what the
// file holds.
BOOST_AUTO_TEST_CASE(labels_that_are_no_class_number_and_empty_files_are_refused)
{
    pstrain::testing::allocation_probe probe;
    for (const std::string label : {"65536", "4294967296", "1e30", "nan", "inf", "2.5"}) {
        auto p = write("l.csv", "1,2\n" + label + ",3\n");
        BOOST_TEST(error_of(p) == p.string() + ":2: label '" + label + "' is not a class number (0 to 65535)");
        fs::remove(p);
    }
    auto top = write("t.csv", "65535,1\n");
    BOOST_TEST(pstrain::data::read_csv(top).num_classes == 65536);
    for (const std::string text : {"", "label,pixel0\n", "\n\n"}) {
        auto p = write("e.csv", text);
        BOOST_TEST(error_of(p) == p.string() + ": no examples");
        fs::remove(p);
    }
    fs::remove(top);
    BOOST_TEST(probe.largest() < std::size_t(1) << 20);
}

// Found by tests/fuzz/fuzz_csv under UBSan: a label beyond int's range was
// cast to int before the range check (undefined behaviour: the sanitizer
// build aborted).  It is refused like any other bad label.
BOOST_AUTO_TEST_CASE(a_label_beyond_int_is_refused_without_a_cast)
{
    for (const char* label : {"1e30", "-1e30", "inf", "nan", "3e9"}) {
        auto p = write("big.csv", std::string(label) + ",1,2\n");
        BOOST_TEST(error_of(p).find("is not a class number") != std::string::npos, label << ": " << error_of(p));
        fs::remove(p);
    }
}
