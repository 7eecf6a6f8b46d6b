#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE checkpoint_restore
#include <boost/test/unit_test.hpp>

#include "tests/unit/allocation_probe.hpp"
#include "tests/unit/trainer/checkpoint/helpers.hpp"
#include "trainer/checkpoint/restore.hpp"
#include "trainer/checkpoint/store.hpp"

using namespace pstrain;
using namespace pstrain::checkpoint;
using namespace pstrain::testing;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_CASE(load_range_recuts_shards_for_another_ps_count)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 3, 1000, 3);
    for (int ps = 1; ps <= 4; ++ps) {
        for (const auto& r : ps::make_partition(1000, ps)) {
            auto got = load_range(d.path, m, r);
            BOOST_TEST(got.updates == 3u);
            for (std::size_t i = r.begin; i < r.end; ++i) {
                BOOST_TEST(got.values[i - r.begin] == static_cast<float>(3 + i));
                BOOST_TEST(got.state[i - r.begin] == -static_cast<float>(i));
                BOOST_TEST(got.state[r.size() + i - r.begin] == -static_cast<float>(i + 1000));
            }
        }
    }
}

// Three PS tasks wrote [0, 4), [4, 7), [7, 10); two now hold [0, 5) and
// [5, 10): each range takes its part of every shard it overlaps, values and
// both state slots, and nothing else.
BOOST_AUTO_TEST_CASE(three_shards_are_recut_into_two_ranges_element_by_element)
{
    temp_dir d;
    const std::vector<ps::shard_range> written{{0, 4}, {4, 7}, {7, 10}};
    auto m = write_checkpoint(d.path, 20, 10, written, 100);  // PS p applied 20 + 100 p updates
    auto first = load_range(d.path, m, {0, 5});
    auto second = load_range(d.path, m, {5, 10});
    BOOST_TEST(first.values == (std::vector<float>{20, 21, 22, 23, 24}), boost::test_tools::per_element());
    BOOST_TEST(first.state == (std::vector<float>{-0, -1, -2, -3, -4, -10, -11, -12, -13, -14}),
               boost::test_tools::per_element());
    BOOST_TEST(second.values == (std::vector<float>{25, 26, 27, 28, 29}), boost::test_tools::per_element());
    BOOST_TEST(second.state == (std::vector<float>{-5, -6, -7, -8, -9, -15, -16, -17, -18, -19}),
               boost::test_tools::per_element());
    // the update count is that of the shard that held the range's first parameter
    BOOST_TEST(first.updates == 20u);
    BOOST_TEST(second.updates == 120u);
    BOOST_TEST(load_range(d.path, m, {7, 8}).updates == 220u);
    // one range inside one shard, and the whole vector
    auto middle = load_range(d.path, m, {5, 6});
    BOOST_TEST(middle.values == (std::vector<float>{25}), boost::test_tools::per_element());
    BOOST_TEST(middle.state == (std::vector<float>{-5, -15}), boost::test_tools::per_element());
    auto all = load_range(d.path, m, {0, 10});
    for (std::size_t i = 0; i < 10; ++i) {
        BOOST_TEST(all.values[i] == static_cast<float>(20 + i));
        BOOST_TEST(all.state[i] == -static_cast<float>(i));
        BOOST_TEST(all.state[10 + i] == -static_cast<float>(10 + i));
    }
}

// Only the shards a range overlaps are read: a damaged shard elsewhere does
// not stop this task, one it needs does.
BOOST_AUTO_TEST_CASE(load_range_reads_only_the_shards_it_needs)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 20, 300, 3);
    fs::remove(d.path + "/" + m.shards[2].file);
    BOOST_TEST(load_range(d.path, m, {0, 200}).values[199] == 219.0f);
    BOOST_TEST(error_of([&] {
                   load_range(d.path, m, {150, 250});
               }) == "ckpt-0000000020.shard-2-of-3 is missing (No such file or directory)");
    flip_byte(d.path + "/" + m.shards[0].file, 300);
    BOOST_TEST(error_of([&] {
                   load_range(d.path, m, {0, 10});
               }) == "ckpt-0000000020.shard-0-of-3 is corrupt (checksum mismatch)");
}

BOOST_AUTO_TEST_CASE(load_range_refuses_what_the_manifest_does_not_hold)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 20, 300, 2);
    BOOST_TEST(error_of([&] {
                   load_range(d.path, m, {200, 301});
               }) == "internal error: range beyond the checkpoint's parameters");
    auto other = m;
    other.state_slots = 1;
    BOOST_TEST(error_of([&] {
                   load_range(d.path, other, {0, 10});
               }) == "ckpt-0000000020.shard-0-of-2 does not hold what its manifest names");
    other = m;
    std::swap(other.shards[0].file, other.shards[1].file);  // with their sizes: a swap the size check cannot see
    std::swap(other.shards[0].bytes, other.shards[1].bytes);
    BOOST_TEST(error_of([&] {
                   load_range(d.path, other, {0, 10});
               }) == "ckpt-0000000020.shard-1-of-2 does not hold what its manifest names");
    std::swap(other.shards[0].bytes, other.shards[1].bytes);  // without: the size check refuses it before reading
    BOOST_TEST(error_of([&] { load_range(d.path, other, {0, 10}); }).starts_with("ckpt-0000000020.shard-1-of-2 is "));
}

BOOST_AUTO_TEST_CASE(find_latest_skips_a_broken_newer_checkpoint)
{
    temp_dir d;
    write_checkpoint(d.path, 10, 300, 2);
    auto newer = write_checkpoint(d.path, 20, 300, 2);
    BOOST_TEST(find_latest(d.path)->global_step == 20u);
    flip_byte(d.path + "/" + newer.shards[1].file, 300);
    BOOST_TEST(find_latest(d.path)->global_step == 10u);
    auto listing = list(d.path, true);
    BOOST_TEST(listing.size() == 2u);
    BOOST_TEST(listing[0].problem == "ckpt-0000000020.shard-1-of-2 is corrupt (checksum mismatch)");
    BOOST_TEST(listing[1].problem.empty());
}

BOOST_AUTO_TEST_CASE(find_latest_ignores_shards_without_a_manifest)
{
    temp_dir d;
    write_checkpoint(d.path, 10, 300, 2);
    write_checkpoint(d.path, 20, 300, 2);
    fs::remove(d.path + "/" + manifest_name(20));  // as if killed before the manifest
    BOOST_TEST(find_latest(d.path)->global_step == 10u);
    fs::remove(d.path + "/" + manifest_name(10));
    BOOST_TEST(!find_latest(d.path).has_value());  // only interrupted writes: start from scratch
}

BOOST_AUTO_TEST_CASE(find_latest_finds_nothing_in_an_empty_directory)
{
    temp_dir d;
    BOOST_TEST(!find_latest(d.path).has_value());
    BOOST_TEST(error_of([&] { find_latest(d.path + "/missing"); }).find("cannot read checkpoint directory ") == 0u);
}

// A manifest is there but nothing is usable: the job stops rather than
// start from scratch over the user's checkpoints.
BOOST_AUTO_TEST_CASE(find_latest_refuses_when_no_checkpoint_is_usable)
{
    temp_dir d;
    write_checkpoint(d.path, 10, 300, 1);
    change_manifest_step(d.path, 10);
    const auto e = error_of([&] { find_latest(d.path); });
    BOOST_TEST(e.find("no usable checkpoint in " + d.path + ": the checkpoint at global step 10 in " + d.path +
                      ": ckpt-0000000010.json: checksum mismatch (the manifest was changed or is corrupt)") == 0u,
               e);
    BOOST_TEST(e.ends_with(": move the directory away to start from scratch"), e);
}

// A restore allocates the range times its state slots: a manifest (with a
// good checksum) naming 2^30 slots, or a shard past the model's end, is
// refused before anything of that size is allocated.
BOOST_AUTO_TEST_CASE(a_restore_refuses_a_manifest_whose_sizes_cannot_be_true_before_allocating)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 10, 300, 2);
    m.state_slots = 1 << 30;
    write_manifest(d.path, m);
    allocation_probe probe;
    auto e = error_of([&] { find_latest(d.path); });
    BOOST_TEST(
        e.find("no usable checkpoint in " + d.path + ": the checkpoint at global step 10 in " + d.path +
               ": ckpt-0000000010.json: it names 1073741824 optimizer state slots, where an optimizer has 0 to 2") ==
            0u,
        e);
    // What a PS's restore hook does with the manifest the chief names.
    e = error_of([&] { load_range(d.path, read_manifest(d.path, manifest_name(10)), {0, 300}); });
    BOOST_TEST(e == "ckpt-0000000010.json: it names 1073741824 optimizer state slots, where an optimizer has 0 to 2");
    BOOST_TEST(probe.largest() < std::size_t(1) << 20);

    m.state_slots = 2;
    m.num_params = std::uint64_t(1) << 40;
    m.shards[1].range.end = m.num_params;
    write_manifest(d.path, m);
    allocation_probe again;
    e = error_of([&] { find_latest(d.path); });
    BOOST_TEST(
        e.find(": ckpt-0000000010.shard-1-of-2 holds another range than its manifest names") != std::string::npos, e);
    BOOST_TEST(again.largest() < std::size_t(1) << 20);
}

// A shard is read whole: its size is checked against the manifest's before
// it is read, so a file that grew (or was replaced by a larger one) is
// refused without reading it into memory.
BOOST_AUTO_TEST_CASE(load_range_checks_a_shards_size_against_the_manifest_before_reading_it)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 20, 300, 2);
    const auto path = d.path + "/" + m.shards[0].file;
    const auto bytes = fs::file_size(path);
    {
        std::ofstream grow(path, std::ios::app | std::ios::binary);
        grow << std::string(std::size_t(4) << 20, 'x');
    }
    allocation_probe probe;
    BOOST_TEST(error_of([&] {
                   load_range(d.path, m, {0, 10});
               }) ==
               fmt::format("{} is too long ({} of {} bytes)", m.shards[0].file, bytes + (std::size_t(4) << 20), bytes));
    BOOST_TEST(probe.largest() < std::size_t(1) << 20);
    BOOST_TEST(load_range(d.path, m, {200, 300}).values[0] == 220.0f);  // the other shard is whole
}
