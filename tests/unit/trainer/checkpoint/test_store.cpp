#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE checkpoint_store
#include <boost/test/unit_test.hpp>

#include "tests/unit/trainer/checkpoint/helpers.hpp"
#include "trainer/checkpoint/file_io.hpp"
#include "trainer/checkpoint/store.hpp"

#include <thread>

#include <sys/stat.h>

using namespace pstrain;
using namespace pstrain::checkpoint;
using namespace pstrain::testing;
namespace fs = std::filesystem;

namespace {

// The steps whose checkpoint list() finds complete, newest first.
std::vector<std::uint64_t> complete_steps(const std::string& dir)
{
    std::vector<std::uint64_t> out;
    for (const auto& e : list(dir, false))
        if (e.problem.empty()) out.push_back(e.step);
    return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(prepare_directory_creates_0700_and_names_the_problem)
{
    temp_dir d;
    const auto dir = d.path + "/ckpt";
    prepare_directory(dir);
    struct stat st {};
    ::stat(dir.c_str(), &st);
    BOOST_TEST((st.st_mode & 0777) == 0700u);
    prepare_directory(dir);             // twice is fine
    BOOST_TEST(names_in(dir).empty());  // the probe file is gone
    BOOST_TEST(
        error_of([&] { prepare_directory(d.path + "/missing/ckpt"); }) ==
        "cannot create checkpoint directory " + d.path +
            "/missing/ckpt: its parent does not exist: create it or choose a --checkpoint-dir on a shared filesystem "
            "this job can write");
    {
        std::ofstream f(d.path + "/file");
    }
    BOOST_TEST(error_of([&] { prepare_directory(d.path + "/file"); }) ==
               "checkpoint directory " + d.path +
                   "/file is not a directory: choose a --checkpoint-dir on a shared filesystem this job can write");
    BOOST_TEST(error_of([&] { prepare_directory(""); }) ==
               "--checkpoint-dir is empty: choose a --checkpoint-dir on a shared filesystem this job can write");
}

BOOST_AUTO_TEST_CASE(an_atomic_file_appears_whole_or_not_at_all)
{
    temp_dir d;
    write_text(d.path + "/f", "old");
    {
        atomic_file f(d.path, "f");
        f.write("new content", 11);
        BOOST_TEST(read_text(d.path + "/f") == "old");  // not yet
        BOOST_TEST(f.size() == 11u);
        BOOST_TEST(f.crc() == crc32_of(0, "new content", 11));
        f.commit();
    }
    BOOST_TEST(read_text(d.path + "/f") == "new content");
    struct stat st {};
    ::stat((d.path + "/f").c_str(), &st);
    BOOST_TEST((st.st_mode & 0777) == 0600u);
    {
        atomic_file f(d.path, "f");
        f.write("abandoned", 9);
    }  // as when a write fails halfway: no commit
    BOOST_TEST(read_text(d.path + "/f") == "new content");
    BOOST_TEST(names_in(d.path) == std::vector<std::string>{"f"}, boost::test_tools::per_element());
}

// Shard files and manifests go through the same atomic write, with the
// same error when it cannot.
BOOST_AUTO_TEST_CASE(a_write_that_cannot_happen_names_the_file_and_the_fix)
{
    temp_dir d;
    const auto gone = d.path + "/gone";
    const std::string fix =
        ": No such file or directory: choose another --checkpoint-dir; the previous checkpoint is intact";
    shard_meta meta;
    meta.global_step = 3;
    meta.range = {0, 1};
    meta.total_params = 1;
    const std::vector<float> one{1.0f}, none;
    auto e = error_of([&] { write_shard(gone, meta, one, none); });
    BOOST_TEST(e.find("cannot create " + gone + "/ckpt-0000000003.shard-0-of-1.tmp.") == 0u, e);
    BOOST_TEST(e.ends_with(fix), e);
    manifest m;
    m.global_step = 3;
    e = error_of([&] { write_manifest(gone, m); });
    BOOST_TEST(e.find("cannot create " + gone + "/ckpt-0000000003.json.tmp.") == 0u, e);
    BOOST_TEST(e.ends_with(fix), e);
}

BOOST_AUTO_TEST_CASE(list_names_every_checkpoint_newest_first_with_its_problem)
{
    temp_dir d;
    write_checkpoint(d.path, 10, 300, 2);
    auto gap = write_checkpoint(d.path, 20, 300, 2);
    auto shorter = write_checkpoint(d.path, 30, 300, 2);
    auto cut = write_checkpoint(d.path, 40, 300, 2);
    auto corrupt = write_checkpoint(d.path, 50, 300, 2);
    write_checkpoint(d.path, 60, 300, 2);
    write_checkpoint(d.path, 70, 300, 2);
    write_text(d.path + "/notes.txt", "mine");
    // 20: the manifest's shards leave a gap; 30: they stop short
    gap.shards[1].range.begin = 151;
    write_manifest(d.path, gap);
    shorter.shards.pop_back();
    write_manifest(d.path, shorter);
    fs::resize_file(d.path + "/" + cut.shards[1].file, 1000);
    flip_byte(d.path + "/" + corrupt.shards[0].file, 400);
    fs::remove(d.path + "/" + shard_name(60, 1, 2));
    fs::remove(d.path + "/" + manifest_name(70));  // as if killed before the manifest
    auto listing = list(d.path, false);
    BOOST_TEST_REQUIRE(listing.size() == 7u);
    std::vector<std::uint64_t> steps;
    for (const auto& e : listing) steps.push_back(e.step);
    BOOST_TEST(steps == (std::vector<std::uint64_t>{70, 60, 50, 40, 30, 20, 10}), boost::test_tools::per_element());
    BOOST_TEST(listing[0].problem == "interrupted: shard files without a manifest");
    BOOST_TEST(listing[0].manifest_file.empty());
    BOOST_TEST(!listing[0].m);
    BOOST_TEST(listing[1].problem == "ckpt-0000000060.shard-1-of-2 is missing (No such file or directory)");
    BOOST_TEST(listing[2].problem.empty());  // without verify the flipped byte is not seen
    BOOST_TEST(listing[3].problem ==
               fmt::format("ckpt-0000000040.shard-1-of-2 is truncated (1000 of {} bytes)", cut.shards[1].bytes));
    BOOST_TEST(listing[4].problem == "the shards cover 150 of 300 parameters");
    BOOST_TEST(listing[5].problem == "ckpt-0000000020.shard-1-of-2 does not continue at parameter 150");
    BOOST_TEST(listing[6].problem.empty());
    BOOST_TEST(listing[6].manifest_file == "ckpt-0000000010.json");
    BOOST_TEST_REQUIRE(listing[6].m.has_value());
    BOOST_TEST(listing[6].m->global_step == 10u);

    auto verified = list(d.path, true);
    BOOST_TEST(verified[2].problem == "ckpt-0000000050.shard-0-of-2 is corrupt (checksum mismatch)");
    BOOST_TEST(verified[6].problem.empty());
}

BOOST_AUTO_TEST_CASE(list_refuses_a_manifest_under_another_step_and_a_swapped_shard)
{
    temp_dir d;
    write_checkpoint(d.path, 10, 300, 1);
    auto m20 = write_checkpoint(d.path, 20, 300, 1);
    fs::copy_file(d.path + "/" + manifest_name(10), d.path + "/" + manifest_name(30));
    // a shard of the right size but other contents than the manifest records
    auto m40 = m20;
    m40.global_step = 40;
    m40.shards[0].crc32 ^= 1;
    write_manifest(d.path, m40);
    auto listing = list(d.path, true);
    BOOST_TEST_REQUIRE(listing.size() == 4u);
    BOOST_TEST(listing[0].problem ==
               "ckpt-0000000020.shard-0-of-1 is not the file its manifest names (another checksum)");
    BOOST_TEST(listing[1].problem == "ckpt-0000000030.json records global step 10");
    BOOST_TEST(listing[2].problem.empty());
    BOOST_TEST(listing[3].problem.empty());
    BOOST_TEST(error_of([&] {
                   list(d.path + "/missing", false);
               }).find("cannot read checkpoint directory " + d.path + "/missing: ") == 0u);
}

BOOST_AUTO_TEST_CASE(shards_without_manifest_are_pruned)
{
    temp_dir d;
    write_checkpoint(d.path, 10, 300, 2);
    write_checkpoint(d.path, 20, 300, 2);
    fs::remove(d.path + "/" + manifest_name(20));  // as if killed before the manifest
    write_checkpoint(d.path, 30, 300, 2);
    write_checkpoint(d.path, 40, 300, 2);
    write_text(d.path + "/ckpt-0000000035.shard-0-of-2.tmp.123", "");  // a killed writer's temporary file
    prune(d.path, 2);
    const std::vector<std::string> expected{"ckpt-0000000030.json",         "ckpt-0000000030.shard-0-of-2",
                                            "ckpt-0000000030.shard-1-of-2", "ckpt-0000000035.shard-0-of-2.tmp.123",
                                            "ckpt-0000000040.json",         "ckpt-0000000040.shard-0-of-2",
                                            "ckpt-0000000040.shard-1-of-2"};
    BOOST_TEST(names_in(d.path) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(retention_keeps_exactly_the_newest_complete_checkpoints)
{
    temp_dir d;
    for (std::uint64_t step = 10; step <= 60; step += 10) write_checkpoint(d.path, step, 300, 2);
    auto broken = write_checkpoint(d.path, 70, 300, 2);
    fs::resize_file(d.path + "/" + broken.shards[0].file, 1000);
    write_text(d.path + "/ckpt-0000000005.json.tmp.9", "");  // stale, older than anything kept
    write_text(d.path + "/notes.txt", "mine");

    prune(d.path, 5);  // six complete: the oldest goes
    BOOST_TEST(complete_steps(d.path) == (std::vector<std::uint64_t>{60, 50, 40, 30, 20}),
               boost::test_tools::per_element());
    prune(d.path, 3);
    BOOST_TEST(complete_steps(d.path) == (std::vector<std::uint64_t>{60, 50, 40}), boost::test_tools::per_element());
    // the broken newer one stays for a user to look at; files of removed
    // steps are gone whole, the user's file is untouched
    const std::vector<std::string> expected{"ckpt-0000000040.json",
                                            "ckpt-0000000040.shard-0-of-2",
                                            "ckpt-0000000040.shard-1-of-2",
                                            "ckpt-0000000050.json",
                                            "ckpt-0000000050.shard-0-of-2",
                                            "ckpt-0000000050.shard-1-of-2",
                                            "ckpt-0000000060.json",
                                            "ckpt-0000000060.shard-0-of-2",
                                            "ckpt-0000000060.shard-1-of-2",
                                            "ckpt-0000000070.json",
                                            "ckpt-0000000070.shard-0-of-2",
                                            "ckpt-0000000070.shard-1-of-2",
                                            "notes.txt"};
    BOOST_TEST(names_in(d.path) == expected, boost::test_tools::per_element());
    prune(d.path, 1);
    BOOST_TEST(complete_steps(d.path) == (std::vector<std::uint64_t>{60}), boost::test_tools::per_element());
    prune(d.path, 10);  // more than there are: nothing goes
    BOOST_TEST(complete_steps(d.path) == (std::vector<std::uint64_t>{60}), boost::test_tools::per_element());
    BOOST_TEST(names_in(d.path).size() == 7u);
}

BOOST_AUTO_TEST_CASE(retention_removes_nothing_without_a_complete_checkpoint_or_with_keep_0)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 10, 300, 1);
    write_checkpoint(d.path, 20, 300, 1);
    prune(d.path, 0);
    BOOST_TEST(names_in(d.path).size() == 4u);
    fs::remove(d.path + "/" + shard_name(20, 0, 1));
    fs::resize_file(d.path + "/" + m.shards[0].file, 10);
    prune(d.path, 1);
    BOOST_TEST(names_in(d.path).size() == 3u);
    prune(d.path + "/missing", 1);  // a warning, no exception
}

BOOST_AUTO_TEST_CASE(a_shard_written_elsewhere_is_waited_for_then_named)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 9, 100, 1);
    const auto file = m.shards[0].file, hidden = d.path + "/hidden";
    fs::rename(d.path + "/" + file, hidden);
    std::thread later([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        fs::rename(hidden, d.path + "/" + file);  // as another node's write becomes visible
    });
    auto s = read_new_shard(d.path, file, std::chrono::seconds(5));
    later.join();
    BOOST_TEST(s.meta.global_step == 9u);
    fs::remove(d.path + "/" + file);
    const auto t0 = std::chrono::steady_clock::now();
    BOOST_CHECK_THROW(read_new_shard(d.path, file, std::chrono::milliseconds(300)), missing_file);
    BOOST_TEST(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 2.0);
}

// Waiting is for a name not yet visible; a file that is there but damaged
// is reported at once.
BOOST_AUTO_TEST_CASE(a_damaged_new_shard_is_not_waited_for)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 9, 100, 1);
    fs::resize_file(d.path + "/" + m.shards[0].file, 100);
    const auto t0 = std::chrono::steady_clock::now();
    BOOST_TEST(error_of([&] { read_new_shard(d.path, m.shards[0].file, std::chrono::seconds(10)); }) ==
               "ckpt-0000000009.shard-0-of-1 is truncated (100 bytes, shorter than its own header)");
    BOOST_TEST(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 1.0);
}

BOOST_AUTO_TEST_CASE(a_snapshots_files_and_receipts_make_a_manifest_that_lists_complete_and_verified)
{
    temp_dir d;
    const auto written = write_checkpoint(d.path, 30, 10, 2);
    fs::remove(d.path + "/" + manifest_name(30));  // the PS tasks' files, no manifest yet
    std::vector<shard_receipt> receipts;
    for (const auto& s : written.shards) receipts.push_back({s.bytes, s.crc32, 31});
    manifest m;
    m.global_step = 30;
    m.mode = "async";
    m.model = "a program's own model";
    m.num_params = 10;
    m.optimizer = "adam";
    m.state_slots = 2;
    const auto bytes = enter_snapshot_files(d.path, m, receipts, false, std::chrono::milliseconds(0));
    BOOST_TEST(bytes == written.shards[0].bytes + written.shards[1].bytes);
    BOOST_TEST_REQUIRE(m.shards.size() == 2u);
    BOOST_TEST((m.shards[1].range == ps::shard_range{5, 10}));
    BOOST_TEST(m.shards[1].step == 31u);
    BOOST_TEST(m.positions == written.positions, boost::test_tools::per_element());
    write_manifest(d.path, m);
    const auto listed = list(d.path, true);
    BOOST_TEST_REQUIRE(listed.size() == 1u);
    BOOST_TEST(listed[0].problem.empty(), listed[0].problem);
}

BOOST_AUTO_TEST_CASE(a_snapshot_file_that_is_missing_or_of_another_step_is_named)
{
    temp_dir d;
    const auto written = write_checkpoint(d.path, 30, 10, 2);
    std::vector<shard_receipt> three(3, shard_receipt{written.shards[0].bytes, written.shards[0].crc32, 30});
    manifest m;
    m.global_step = 30;
    BOOST_TEST(error_of([&] {
                   enter_snapshot_files(d.path, m, three, false, std::chrono::milliseconds(0));
               }).find("ckpt-0000000030.shard-0-of-3") != std::string::npos);
    // A shard file of step 30 renamed as step 40's: its header says so.
    fs::rename(d.path + "/" + shard_name(30, 0, 2), d.path + "/" + shard_name(40, 0, 2));
    fs::copy_file(d.path + "/" + shard_name(30, 1, 2), d.path + "/" + shard_name(40, 1, 2));
    manifest later;
    later.global_step = 40;
    const std::vector<shard_receipt> two(2, shard_receipt{1, 1, 40});
    BOOST_TEST(error_of([&] { enter_snapshot_files(d.path, later, two, false, std::chrono::milliseconds(0)); }) ==
               "ckpt-0000000040.shard-0-of-2 says it is shard 0 of 2 at global step 30: another job writes into " +
                   d.path);
}
