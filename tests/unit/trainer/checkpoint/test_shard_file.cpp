#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE checkpoint_shard_file
#include <boost/test/unit_test.hpp>

#include "tests/unit/allocation_probe.hpp"
#include "tests/unit/trainer/checkpoint/helpers.hpp"
#include "trainer/checkpoint/shard_file.hpp"

#include <cstring>
#include <limits>
#include <new>

#include <sys/stat.h>
#include <zlib.h>

#include <nlohmann/json.hpp>

using namespace pstrain;
using namespace pstrain::checkpoint;
using namespace pstrain::testing;
namespace fs = std::filesystem;

namespace {

void append_u32(std::string& b, std::uint32_t v)
{
    char raw[4];
    std::memcpy(raw, &v, 4);
    b.append(raw, 4);
}

std::uint32_t u32_at(const std::string& b, std::size_t at)
{
    std::uint32_t v = 0;
    std::memcpy(&v, b.data() + at, 4);
    return v;
}

// A shard file made by hand, as another writer (or an attacker) could: the
// header, `json`, `payload_bytes` zero bytes and a correct crc32.
std::string shard_bytes(const std::string& json, std::size_t payload_bytes, std::uint32_t version = 1)
{
    std::string b("PSTRCKPT", 8);
    append_u32(b, version);
    append_u32(b, static_cast<std::uint32_t>(json.size()));
    b += json;
    b.append(payload_bytes, '\0');
    append_u32(
        b, static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(b.data()), static_cast<uInt>(b.size()))));
    return b;
}

std::string meta_json(std::uint64_t begin, std::uint64_t end, int slots)
{
    return nlohmann::json{{"global_step", 1},      {"ps_index", 0},       {"num_ps", 1},
                          {"range", {begin, end}}, {"total_params", end}, {"optimizer", "sgd"},
                          {"state_slots", slots},  {"updates", 0},        {"worker_batches", {0}}}
        .dump();
}

// The error reading `file` gives, and the largest allocation it made.
std::pair<std::string, std::size_t> read_with_allocations(const std::string& dir, const std::string& file,
                                                          bool header_only)
{
    allocation_probe probe;
    auto e = error_of([&] { read_shard(dir, file, header_only); });
    return {e, probe.largest()};
}

}  // namespace

BOOST_AUTO_TEST_CASE(shard_round_trip_and_private_files)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 7, 101, 2);
    auto s = read_shard(d.path, m.shards[1].file);
    BOOST_TEST(s.meta.range.begin == 50u);
    BOOST_TEST(s.meta.range.end == 101u);
    BOOST_TEST(s.meta.updates == 7u);
    BOOST_TEST(s.meta.global_step == 7u);
    BOOST_TEST(s.meta.ps_index == 1);
    BOOST_TEST(s.meta.num_ps == 2);
    BOOST_TEST(s.meta.optimizer == "adam");
    BOOST_TEST(s.meta.positions == (std::vector<std::uint64_t>{7, 7}), boost::test_tools::per_element());
    BOOST_TEST(s.values.size() == 51u);
    BOOST_TEST(s.values[0] == 57.0f);
    BOOST_TEST(s.state.size() == 102u);
    BOOST_TEST(s.state[51] == -151.0f);  // slot 1 of parameter 50
    BOOST_TEST(s.crc32 == m.shards[1].crc32);
    struct stat st {};
    ::stat((d.path + "/" + m.shards[1].file).c_str(), &st);
    BOOST_TEST((st.st_mode & 0777) == 0600u);
    BOOST_TEST(static_cast<std::uint64_t>(st.st_size) == m.shards[1].bytes);
    // no temporary file is left behind
    for (const auto& e : fs::directory_iterator(d.path))
        BOOST_TEST(e.path().string().find(".tmp.") == std::string::npos);
}

// Found by tests/fuzz/fuzz_shard under UBSan: a shard of an empty range
// (a PS with no parameters) made read_shard memcpy to the null data() of
// an empty vector (undefined behaviour: the sanitizer build aborted).
BOOST_AUTO_TEST_CASE(a_shard_of_an_empty_range_reads_back_empty)
{
    temp_dir d;
    for (int slots : {0, 2}) {
        shard_meta m;
        m.global_step = 3;
        m.range = {5, 5};
        m.total_params = 10;
        m.optimizer = slots ? "adam" : "sgd";
        m.state_slots = slots;
        const auto entry = write_shard(d.path, m, {}, {});
        const auto s = read_shard(d.path, entry.file);
        BOOST_TEST(s.values.empty());
        BOOST_TEST(s.state.empty());
        BOOST_TEST(s.meta.range.begin == 5u);
        BOOST_TEST(s.crc32 == entry.crc32);
        fs::remove(d.path + "/" + entry.file);
    }
}

// The bytes on disk are the documented format: a checkpoint written by
// this pstrain must be readable by the last and the next one.
BOOST_AUTO_TEST_CASE(a_shard_file_has_the_documented_layout)
{
    temp_dir d;
    shard_meta meta;
    meta.global_step = 7;
    meta.ps_index = 1;
    meta.num_ps = 3;
    meta.range = {2, 5};
    meta.total_params = 10;
    meta.optimizer = "momentum";
    meta.state_slots = 1;
    meta.updates = 6;
    meta.positions = {3, 4};
    const std::vector<float> values{1.5f, 2.5f, 3.5f}, state{-1.0f, -2.0f, -3.0f};
    auto e = write_shard(d.path, meta, values, state);
    BOOST_TEST(e.file == "ckpt-0000000007.shard-1-of-3");
    BOOST_TEST(e.step == 7u);
    BOOST_TEST(e.range.begin == 2u);
    BOOST_TEST(e.range.end == 5u);

    const auto b = read_text(d.path + "/" + e.file);
    BOOST_TEST(b.size() == e.bytes);
    BOOST_TEST(b.substr(0, 8) == "PSTRCKPT");
    BOOST_TEST(std::string(b.data() + 8, 4) == std::string("\x01\x00\x00\x00", 4));  // version 1, little-endian
    const std::uint32_t json_bytes = u32_at(b, 12);
    const auto j = nlohmann::json::parse(b.substr(16, json_bytes));
    BOOST_TEST(j.at("global_step").get<int>() == 7);
    BOOST_TEST(j.at("ps_index").get<int>() == 1);
    BOOST_TEST(j.at("num_ps").get<int>() == 3);
    BOOST_TEST(j.at("range").dump() == "[2,5]");
    BOOST_TEST(j.at("total_params").get<int>() == 10);
    BOOST_TEST(j.at("optimizer").get<std::string>() == "momentum");
    BOOST_TEST(j.at("state_slots").get<int>() == 1);
    BOOST_TEST(j.at("updates").get<int>() == 6);
    BOOST_TEST(j.at("worker_batches").dump() == "[3,4]");
    BOOST_TEST(b.size() == 16 + json_bytes + 3 * 4 + 3 * 4 + 4);
    float floats[6];
    std::memcpy(floats, b.data() + 16 + json_bytes, sizeof floats);
    const std::vector<float> got(floats, floats + 6), want{1.5f, 2.5f, 3.5f, -1.0f, -2.0f, -3.0f};
    BOOST_TEST(got == want, boost::test_tools::per_element());
    const auto crc =
        static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(b.data()), static_cast<uInt>(b.size() - 4)));
    BOOST_TEST(u32_at(b, b.size() - 4) == crc);
    BOOST_TEST(e.crc32 == crc);
}

BOOST_AUTO_TEST_CASE(a_header_only_read_checks_the_size_not_the_checksum)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 5, 300, 1);
    const auto file = m.shards[0].file, path = d.path + "/" + file;
    auto h = read_shard(d.path, file, true);
    BOOST_TEST(h.meta.range.end == 300u);
    BOOST_TEST(h.meta.updates == 5u);
    BOOST_TEST(h.values.empty());
    BOOST_TEST(h.state.empty());
    BOOST_TEST(h.crc32 == 0u);
    flip_byte(path, 400);  // a value: only a full read notices
    BOOST_TEST(error_of([&] { read_shard(d.path, file, true); }) == "no error");
    BOOST_TEST(error_of([&] { read_shard(d.path, file); }) == file + " is corrupt (checksum mismatch)");
    fs::resize_file(path, 1000);
    BOOST_TEST(error_of([&] { read_shard(d.path, file, true); }).find(file + " is truncated (1000 of ") == 0u);
}

BOOST_AUTO_TEST_CASE(corrupt_truncated_and_missing_shards_are_named)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 5, 300, 2);
    const auto path = d.path + "/" + m.shards[0].file;
    flip_byte(path, 400);
    BOOST_TEST(error_of([&] { read_shard(d.path, m.shards[0].file); }) ==
               "ckpt-0000000005.shard-0-of-2 is corrupt (checksum mismatch)");
    fs::resize_file(path, 1000);
    BOOST_TEST(error_of([&] {
                   read_shard(d.path, m.shards[0].file);
               }).find("ckpt-0000000005.shard-0-of-2 is truncated (1000 of ") == 0u);
    fs::resize_file(path, 100);
    BOOST_TEST(error_of([&] { read_shard(d.path, m.shards[0].file); }) ==
               "ckpt-0000000005.shard-0-of-2 is truncated (100 bytes, shorter than its own header)");
    fs::remove(path);
    BOOST_TEST(error_of([&] { read_shard(d.path, m.shards[0].file); }) ==
               "ckpt-0000000005.shard-0-of-2 is missing (No such file or directory)");
    BOOST_CHECK_THROW(read_shard(d.path, m.shards[0].file), missing_file);
    {
        std::ofstream f(path);
        f << "not a shard at all";
    }
    BOOST_TEST(error_of([&] { read_shard(d.path, m.shards[0].file); }) ==
               "ckpt-0000000005.shard-0-of-2 is not a pstrain checkpoint shard (bad magic number)");
}

BOOST_AUTO_TEST_CASE(a_shard_with_bytes_after_its_end_is_refused)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 5, 300, 1);
    const auto path = d.path + "/" + m.shards[0].file;
    {
        std::ofstream f(path, std::ios::app | std::ios::binary);
        f << "more";
    }
    BOOST_TEST(error_of([&] { read_shard(d.path, m.shards[0].file); }) ==
               fmt::format("ckpt-0000000005.shard-0-of-1 is too long ({} of {} bytes)", m.shards[0].bytes + 4,
                           m.shards[0].bytes));
}

BOOST_AUTO_TEST_CASE(another_format_version_is_refused)
{
    temp_dir d;
    write_text(d.path + "/v2", shard_bytes(meta_json(0, 1, 0), 4, 2));
    BOOST_TEST(error_of([&] { read_shard(d.path, "v2"); }) == "v2 has format version 2, this pstrain reads version 1");
}

BOOST_AUTO_TEST_CASE(unreadable_metadata_is_refused)
{
    temp_dir d;
    write_text(d.path + "/garbage", shard_bytes("{not json", 4));
    BOOST_TEST(error_of([&] { read_shard(d.path, "garbage"); }).find("garbage has unreadable metadata (") == 0u);
    write_text(d.path + "/slots", shard_bytes(meta_json(0, 1, 3), 16));
    BOOST_TEST(error_of([&] { read_shard(d.path, "slots"); }) ==
               "slots has unreadable metadata (metadata out of range)");
    write_text(d.path + "/range", shard_bytes(meta_json(2, 1, 0), 0));
    BOOST_TEST(error_of([&] { read_shard(d.path, "range"); }) ==
               "range has unreadable metadata (metadata out of range)");
}

// A length in the header larger than the file: refused before anything of
// that size is allocated.
BOOST_AUTO_TEST_CASE(a_metadata_length_beyond_the_file_is_refused_without_allocating_it)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 5, 300, 1);
    const auto file = m.shards[0].file, path = d.path + "/" + file;
    auto b = read_text(path);
    const std::uint32_t huge = 0xfffffff0u;
    std::memcpy(b.data() + 12, &huge, 4);
    write_text(path, b);
    for (bool header_only : {false, true}) {
        auto [e, largest] = read_with_allocations(d.path, file, header_only);
        BOOST_TEST(e == fmt::format("{} is truncated ({} bytes, shorter than its own header)", file, b.size()));
        BOOST_TEST(largest < std::size_t(1) << 20);
    }
}

// Metadata naming more values than the file holds, even so many that their
// byte count wraps around 2^64 to the file's size: refused, nothing of
// that size allocated.
BOOST_AUTO_TEST_CASE(a_range_beyond_the_file_is_refused_without_allocating_it)
{
    temp_dir d;
    write_text(d.path + "/big", shard_bytes(meta_json(0, 1000000000, 2), 12));
    auto [e, largest] = read_with_allocations(d.path, "big", false);
    BOOST_TEST(e == fmt::format("big is truncated ({} of {} bytes)", fs::file_size(d.path + "/big"),
                                fs::file_size(d.path + "/big") - 12 + 12000000000ull));
    BOOST_TEST(largest < std::size_t(1) << 20);

    const std::uint64_t wraps = std::uint64_t(1) << 62;  // 4 * 2^62 bytes is 0 modulo 2^64
    write_text(d.path + "/wraps", shard_bytes(meta_json(0, wraps, 0), 0));
    for (bool header_only : {false, true}) {
        auto [e2, largest2] = read_with_allocations(d.path, "wraps", header_only);
        BOOST_TEST(e2 == fmt::format("wraps is truncated ({} bytes, its metadata names {} values)",
                                     fs::file_size(d.path + "/wraps"), wraps));
        BOOST_TEST(largest2 < std::size_t(1) << 20);
    }
}

BOOST_AUTO_TEST_CASE(write_shard_refuses_sizes_its_metadata_does_not_name_and_leaves_nothing)
{
    temp_dir d;
    shard_meta meta;
    meta.range = {0, 3};
    meta.total_params = 3;
    meta.state_slots = 2;
    const std::vector<float> values(3), short_state(5), state(6), short_values(2);
    BOOST_TEST(error_of([&] { write_shard(d.path, meta, values, short_state); }) ==
               "internal error: shard sizes do not match their metadata");
    BOOST_TEST(error_of([&] { write_shard(d.path, meta, short_values, state); }) ==
               "internal error: shard sizes do not match their metadata");
    BOOST_TEST(names_in(d.path).empty());
}
