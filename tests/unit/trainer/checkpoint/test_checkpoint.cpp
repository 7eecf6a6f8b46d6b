#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE checkpoint
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/checkpoint/checkpoint.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

#include <sys/stat.h>

using namespace pstrain;
using namespace pstrain::checkpoint;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
    temp_dir()
    {
        char tmpl[] = "/tmp/pstrain-test-checkpoint-XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~temp_dir() { fs::remove_all(path); }
    std::string path;
};

// A model of `n` parameters with Adam state, as `ps` equal shards, written
// at `step`; values[i] = step + i, state slot k = -(i + k * n).
manifest write_checkpoint(const std::string& dir, std::uint64_t step, std::size_t n, int num_ps)
{
    manifest m;
    m.global_step = step;
    m.mode = "sync";
    m.model = "test model";
    m.num_params = n;
    m.optimizer = "adam";
    m.state_slots = 2;
    m.seed = 1;
    m.batch_size = 10;
    m.worker_batches = {step, step};
    for (const auto& r : ps::make_partition(n, num_ps)) {
        shard_meta meta;
        meta.global_step = step;
        meta.ps_index = static_cast<int>(m.shards.size());
        meta.num_ps = num_ps;
        meta.range = r;
        meta.total_params = n;
        meta.optimizer = "adam";
        meta.state_slots = 2;
        meta.updates = step;
        meta.worker_batches = m.worker_batches;
        std::vector<float> values(r.size()), state(2 * r.size());
        for (std::size_t i = r.begin; i < r.end; ++i) {
            values[i - r.begin] = static_cast<float>(step + i);
            state[i - r.begin] = -static_cast<float>(i);
            state[r.size() + i - r.begin] = -static_cast<float>(i + n);
        }
        m.shards.push_back(write_shard(dir, meta, values, state));
    }
    write_manifest(dir, m);
    return m;
}

void flip_byte(const std::string& path, std::streamoff at)
{
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    char c = 0;
    f.get(c);
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x01));
}

std::string error_of(const std::function<void()>& f)
{
    try {
        f();
    } catch (const error& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

BOOST_AUTO_TEST_CASE(names_sort_by_step)
{
    BOOST_TEST(manifest_name(1200) == "ckpt-0000001200.json");
    BOOST_TEST(shard_name(1200, 1, 2) == "ckpt-0000001200.shard-1-of-2");
}

BOOST_AUTO_TEST_CASE(shard_round_trip_and_private_files)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 7, 101, 2);
    auto s = read_shard(d.path, m.shards[1].file);
    BOOST_TEST(s.meta.range.begin == 50u);
    BOOST_TEST(s.meta.range.end == 101u);
    BOOST_TEST(s.meta.updates == 7u);
    BOOST_TEST(s.values[0] == 57.0f);
    BOOST_TEST(s.state[51] == -151.0f);  // slot 1 of parameter 50
    BOOST_TEST(s.crc32 == m.shards[1].crc32);
    struct stat st{};
    ::stat((d.path + "/" + m.shards[1].file).c_str(), &st);
    BOOST_TEST((st.st_mode & 0777) == 0600u);
    ::stat((d.path + "/" + manifest_name(7)).c_str(), &st);
    BOOST_TEST((st.st_mode & 0777) == 0600u);
    // no temporary file is left behind
    for (const auto& e : fs::directory_iterator(d.path)) BOOST_TEST(e.path().string().find(".tmp.") == std::string::npos);
}

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

BOOST_AUTO_TEST_CASE(corrupt_truncated_and_missing_shards_are_named)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 5, 300, 2);
    const auto path = d.path + "/" + m.shards[0].file;
    flip_byte(path, 400);
    BOOST_TEST(error_of([&] { read_shard(d.path, m.shards[0].file); }) == "ckpt-0000000005.shard-0-of-2 is corrupt (checksum mismatch)");
    fs::resize_file(path, 1000);
    BOOST_TEST(error_of([&] { read_shard(d.path, m.shards[0].file); }).find("ckpt-0000000005.shard-0-of-2 is truncated (1000 of ") == 0u);
    fs::resize_file(path, 100);
    BOOST_TEST(error_of([&] { read_shard(d.path, m.shards[0].file); }) ==
               "ckpt-0000000005.shard-0-of-2 is truncated (100 bytes, shorter than its own header)");
    fs::remove(path);
    BOOST_TEST(error_of([&] { read_shard(d.path, m.shards[0].file); }) ==
               "ckpt-0000000005.shard-0-of-2 is missing (No such file or directory)");
    {
        std::ofstream f(path);
        f << "not a shard at all";
    }
    BOOST_TEST(error_of([&] { read_shard(d.path, m.shards[0].file); }) ==
               "ckpt-0000000005.shard-0-of-2 is not a pstrain checkpoint shard (bad magic number)");
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

BOOST_AUTO_TEST_CASE(a_changed_manifest_is_refused)
{
    temp_dir d;
    write_checkpoint(d.path, 10, 300, 1);
    const auto path = d.path + "/" + manifest_name(10);
    std::string text;
    {
        std::ifstream f(path);
        text.assign(std::istreambuf_iterator<char>(f), {});
    }
    text.replace(text.find("\"global_step\": 10"), 17, "\"global_step\": 11");
    {
        std::ofstream f(path);
        f << text;
    }
    BOOST_TEST(error_of([&] { read_manifest(d.path, manifest_name(10)); }) ==
               "ckpt-0000000010.json: checksum mismatch (the manifest was changed or is corrupt)");
    BOOST_TEST(error_of([&] { find_latest(d.path); }).find("no usable checkpoint in ") == 0u);
}

BOOST_AUTO_TEST_CASE(shards_without_manifest_are_ignored_and_pruned)
{
    temp_dir d;
    write_checkpoint(d.path, 10, 300, 2);
    auto m = write_checkpoint(d.path, 20, 300, 2);
    fs::remove(d.path + "/" + manifest_name(20));  // as if killed before the manifest
    BOOST_TEST(find_latest(d.path)->global_step == 10u);
    write_checkpoint(d.path, 30, 300, 2);
    write_checkpoint(d.path, 40, 300, 2);
    {
        std::ofstream f(d.path + "/ckpt-0000000035.shard-0-of-2.tmp.123");  // a killed writer's temporary file
    }
    prune(d.path, 2);
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(d.path)) left.push_back(e.path().filename().string());
    std::sort(left.begin(), left.end());
    const std::vector<std::string> expected{"ckpt-0000000030.json", "ckpt-0000000030.shard-0-of-2", "ckpt-0000000030.shard-1-of-2",
                                            "ckpt-0000000035.shard-0-of-2.tmp.123", "ckpt-0000000040.json",
                                            "ckpt-0000000040.shard-0-of-2", "ckpt-0000000040.shard-1-of-2"};
    BOOST_TEST(left == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(prepare_directory_creates_0700_and_names_the_problem)
{
    temp_dir d;
    const auto dir = d.path + "/ckpt";
    prepare_directory(dir);
    struct stat st{};
    ::stat(dir.c_str(), &st);
    BOOST_TEST((st.st_mode & 0777) == 0700u);
    prepare_directory(dir);  // twice is fine
    BOOST_TEST(error_of([&] { prepare_directory(d.path + "/missing/ckpt"); }) ==
               "cannot create checkpoint directory " + d.path +
                   "/missing/ckpt: its parent does not exist: create it or choose a --checkpoint-dir on a shared filesystem "
                   "this job can write");
    { std::ofstream f(d.path + "/file"); }
    BOOST_TEST(error_of([&] { prepare_directory(d.path + "/file"); }) ==
               "checkpoint directory " + d.path +
                   "/file is not a directory: choose a --checkpoint-dir on a shared filesystem this job can write");
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
