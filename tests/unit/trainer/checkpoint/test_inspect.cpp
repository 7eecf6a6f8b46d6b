#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE checkpoint_inspect
#include <boost/test/unit_test.hpp>

#include "tests/unit/allocation_probe.hpp"
#include "tests/unit/trainer/checkpoint/helpers.hpp"
#include "trainer/checkpoint/inspect.hpp"

#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

using namespace pstrain;
using namespace pstrain::checkpoint;
using namespace pstrain::testing;
namespace fs = std::filesystem;

namespace {

struct inspected {
    int status = -1;
    std::string out;
};

// What `pstrain checkpoint inspect DIR` prints on stdout, and its status.
inspected run_inspect(const std::string& dir)
{
    temp_dir t;
    const auto file = t.path + "/stdout";
    std::fflush(stdout);
    const int saved = ::dup(1);
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::close(fd);
    inspected r;
    r.status = inspect(dir);
    std::fflush(stdout);
    ::dup2(saved, 1);
    ::close(saved);
    r.out = read_text(file);
    return r;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(an_empty_directory_has_no_checkpoints)
{
    temp_dir d;
    auto r = run_inspect(d.path);
    BOOST_TEST(r.status == 0);
    BOOST_TEST(r.out == "no checkpoints in " + d.path + "\n");
}

BOOST_AUTO_TEST_CASE(the_table_names_each_checkpoint_and_the_newest_complete_one)
{
    temp_dir d;
    write_checkpoint(d.path, 100, 300, 2);
    auto newer = write_checkpoint(d.path, 200, 300, 2);
    flip_byte(d.path + "/" + newer.shards[0].file, 300);
    auto r = run_inspect(d.path);
    BOOST_TEST(r.status == 0);
    BOOST_TEST(contains(r.out, "checkpoints in " + d.path + " (newest first):\n"), r.out);
    BOOST_TEST(r.out.find("           200") < r.out.find("           100"), r.out);
    BOOST_TEST(contains(r.out, "ckpt-0000000200.shard-0-of-2 is corrupt (checksum mismatch)"), r.out);
    BOOST_TEST(contains(r.out, "  2         300  adam        complete, checksums good\n"), r.out);
    BOOST_TEST(contains(r.out, "newest complete: ckpt-0000000100.json (global step 100, test model, sync)\n"), r.out);
}

BOOST_AUTO_TEST_CASE(the_newest_says_which_job_wrote_it)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 100, 300, 1);
    auto r = run_inspect(d.path);
    BOOST_TEST(contains(r.out, "written by no recorded job (a run outside Slurm, or an older pstrain)\n"), r.out);
    m.job = checkpoint::job_identity{"c1", "4", "20261124T193000-a1b2c3d4", "2026-11-24T19:30:00Z"};
    m.trained_seconds = 12.3;
    m.trained_samples = 5000;
    checkpoint::write_manifest(d.path, m);
    r = run_inspect(d.path);
    BOOST_TEST(r.status == 0);
    BOOST_TEST(
        contains(r.out,
                 "written by cluster c1, job 4, submission 20261124T193000-a1b2c3d4 (submitted 2026-11-24T19:30:00Z), "
                 "after 12.3 s of training on 5000 examples\n"),
        r.out);
}

BOOST_AUTO_TEST_CASE(only_broken_checkpoints_fail_and_say_a_job_would)
{
    temp_dir d;
    auto m = write_checkpoint(d.path, 100, 300, 1);
    fs::resize_file(d.path + "/" + m.shards[0].file, 1000);
    auto r = run_inspect(d.path);
    BOOST_TEST(r.status == 1);
    BOOST_TEST(contains(r.out, "no complete checkpoint: a job started with --checkpoint-dir " + d.path +
                                   " fails; move it away to start from scratch\n"),
               r.out);
}

BOOST_AUTO_TEST_CASE(only_interrupted_writes_mean_a_fresh_start)
{
    temp_dir d;
    write_checkpoint(d.path, 100, 300, 1);
    fs::remove(d.path + "/" + manifest_name(100));
    auto r = run_inspect(d.path);
    BOOST_TEST(r.status == 0);
    BOOST_TEST(contains(r.out, "interrupted: shard files without a manifest"), r.out);
    BOOST_TEST(contains(r.out, "no complete checkpoint: a job started with --checkpoint-dir " + d.path +
                                   " starts from scratch\n"),
               r.out);
}

BOOST_AUTO_TEST_CASE(an_unreadable_directory_fails)
{
    temp_dir d;
    auto r = run_inspect(d.path + "/missing");
    BOOST_TEST(r.status == 1);
    BOOST_TEST(r.out.empty());
}

// Inspecting reads every manifest and shard: sizes in them that cannot be
// true are named in the table, and nothing of their size is allocated.
BOOST_AUTO_TEST_CASE(hostile_sizes_are_named_without_allocating_them)
{
    temp_dir d;
    auto slots = write_checkpoint(d.path, 300, 300, 1);  // a manifest naming 2^30 state slots
    slots.state_slots = 1 << 30;
    write_manifest(d.path, slots);
    auto header = write_checkpoint(d.path, 200, 300, 1);  // a shard whose metadata length is past its end
    auto bytes = read_text(d.path + "/" + header.shards[0].file);
    const std::uint32_t huge = 0xfffffff0u;
    std::memcpy(bytes.data() + 12, &huge, 4);
    write_text(d.path + "/" + header.shards[0].file, bytes);
    auto range = write_checkpoint(d.path, 100, 300, 1);  // a manifest naming 2^40 parameters in that shard
    range.num_params = range.shards[0].range.end = std::uint64_t(1) << 40;
    write_manifest(d.path, range);

    allocation_probe probe;
    auto r = run_inspect(d.path);
    BOOST_TEST(r.status == 1);
    BOOST_TEST(
        contains(r.out,
                 "ckpt-0000000300.json: it names 1073741824 optimizer state slots, where an optimizer has 0 to 2\n"),
        r.out);
    BOOST_TEST(contains(r.out, "ckpt-0000000200.shard-0-of-1 is truncated (" + std::to_string(bytes.size()) +
                                   " bytes, shorter than its own header)\n"),
               r.out);
    BOOST_TEST(contains(r.out, "ckpt-0000000100.shard-0-of-1 holds another range than its manifest names\n"), r.out);
    BOOST_TEST(probe.largest() < std::size_t(1) << 20);
}

// Embedding tables: each PS's table file with its kind, rows and chain.
BOOST_AUTO_TEST_CASE(the_table_files_of_a_checkpoint_are_shown_with_their_kind_and_rows)
{
    temp_dir d;
    ps::embedding_config c;
    c.dim = 2;
    std::vector<ps::embedding_table> tables;
    tables.emplace_back(c);
    const std::vector<std::uint64_t> keys{1, 2, 3};
    std::vector<float> out(6), g(6, 0.5f);
    tables[0].pull(keys, out, 1);
    for (std::uint64_t step : {1, 2}) {
        auto m = write_checkpoint(d.path, step, 4, 1);
        table_meta t;
        t.global_step = step;
        t.full = step == 1;
        t.chain = step == 1 ? std::vector<std::uint64_t>{1} : std::vector<std::uint64_t>{1, 2};
        if (step == 2)
            tables[0].push(std::span<const std::uint64_t>(keys).first(1), std::span<const float>(g).first(2), 2);
        m.table_files.push_back(write_tables(d.path, t, tables));
        tables[0].clear_changed();
        m.tables = layout_of(tables);
        write_manifest(d.path, m);
    }
    const auto r = run_inspect(d.path);
    BOOST_TEST(r.status == 0);
    BOOST_TEST(contains(r.out, table_name(1, 0, 1)), r.out);
    BOOST_TEST(contains(r.out, "full"), r.out);
    BOOST_TEST(contains(r.out, "3 rows"), r.out);
    BOOST_TEST(contains(r.out, "incremental"), r.out);
    BOOST_TEST(contains(r.out, "1 rows changed, 0 removed"), r.out);
}
