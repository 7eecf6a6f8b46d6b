// The framed file both data files share: written whole with its checksum,
// read back with its size and checksum checked; and the wait for a file
// another node is writing.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE file_io
#include <boost/test/unit_test.hpp>

#include "tests/unit/trainer/checkpoint/helpers.hpp"
#include "trainer/checkpoint/file_io.hpp"

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

using namespace pstrain;
using namespace pstrain::checkpoint;
using pstrain::testing::error_of;
using pstrain::testing::flip_byte;
using pstrain::testing::temp_dir;

namespace {

constexpr char magic[8] = {'P', 'S', 'T', 'R', 'T', 'E', 'S', 'T'};

framed_receipt write_example(const std::string& dir)
{
    return write_framed(dir, "f", magic, 7, "{\"n\":1}", [](atomic_file& f) { f.write("body", 4); });
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_framed_file_is_its_head_metadata_body_and_checksum)
{
    temp_dir d;
    const auto r = write_example(d.path);
    BOOST_TEST(r.bytes == 16u + 7u + 4u + 4u);
    const auto f = read_framed(d.path, "f", magic, 7, "a test file", false);
    BOOST_TEST(f.size == r.bytes);
    BOOST_TEST(f.json_bytes == 7u);
    BOOST_TEST(std::string(f.bytes.data() + 16, 7) == "{\"n\":1}");
    BOOST_TEST(std::string(f.bytes.data() + 23, 4) == "body");
    BOOST_TEST(check_framed_checksum(f, "f") == r.crc32);
    BOOST_TEST(crc32_of(0, f.bytes.data(), f.size - 4) == r.crc32);
    BOOST_TEST(error_of([&] { check_framed_size(f, "f", r.bytes); }) == "no error");
}

BOOST_AUTO_TEST_CASE(a_size_other_than_the_metadatas_or_a_changed_byte_is_refused)
{
    temp_dir d;
    write_example(d.path);
    const auto f = read_framed(d.path, "f", magic, 7, "a test file", false);
    BOOST_TEST(error_of([&] { check_framed_size(f, "f", 40); }) == "f is truncated (31 of 40 bytes)");
    BOOST_TEST(error_of([&] { check_framed_size(f, "f", 20); }) == "f is too long (31 of 20 bytes)");
    flip_byte(d.path + "/f", 24);
    const auto damaged = read_framed(d.path, "f", magic, 7, "a test file", false);
    BOOST_TEST(error_of([&] { check_framed_checksum(damaged, "f"); }) == "f is corrupt (checksum mismatch)");
    const auto head = read_framed(d.path, "f", magic, 7, "a test file", true);
    BOOST_TEST(error_of([&] { check_framed_checksum(head, "f"); }) == "f changed while it was read");
}

BOOST_AUTO_TEST_CASE(a_body_that_throws_leaves_no_file)
{
    temp_dir d;
    BOOST_CHECK_THROW(write_framed(d.path, "f", magic, 7, "{}", [](atomic_file&) { throw error("no"); }), error);
    BOOST_TEST(testing::names_in(d.path).empty());
}

BOOST_AUTO_TEST_CASE(a_file_that_appears_late_is_read_and_one_that_never_does_is_missing)
{
    temp_dir d;
    std::thread writer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        write_example(d.path);
    });
    int tries = 0;
    retry_while_missing(d.path, std::chrono::seconds(5), [&] {
        ++tries;
        read_framed(d.path, "f", magic, 7, "a test file", true);
    });
    writer.join();
    BOOST_TEST(tries > 1);
    const auto t0 = std::chrono::steady_clock::now();
    BOOST_CHECK_THROW(retry_while_missing(d.path, std::chrono::milliseconds(200),
                                          [&] { read_framed(d.path, "g", magic, 7, "a test file", true); }),
                      missing_file);
    BOOST_TEST((std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2)));
    // Any other error goes through at once.
    tries = 0;
    BOOST_CHECK_THROW(retry_while_missing(d.path, std::chrono::seconds(5),
                                          [&] {
                                              ++tries;
                                              throw error("damaged");
                                          }),
                      error);
    BOOST_TEST(tries == 1);
}
