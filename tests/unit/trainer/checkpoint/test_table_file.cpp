// Embedding tables in the checkpoint: a table file's round trip, chains of
// full and incremental saves with tombstones, restores onto another PS
// count, damaged and half-written files, prune, and a server over the
// loopback transport saving and restoring through the program's hooks.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE table_file
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "pstrain/embedding.hpp"
#include "tests/unit/trainer/checkpoint/helpers.hpp"
#include "tests/unit/library/ps/loopback_job.hpp"
#include "trainer/app/options.hpp"
#include "trainer/app/tasks.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include <unistd.h>

#include <fmt/format.h>

using namespace pstrain;
using namespace pstrain::checkpoint;
using pstrain::testing::error_of;
using pstrain::testing::names_in;
using pstrain::testing::temp_dir;
namespace bdata = boost::unit_test::data;

namespace {

std::vector<ps::embedding_config> configs()
{
    ps::embedding_config a;
    a.dim = 4;
    a.optimizer = ps::row_optimizer::adagrad;
    a.seed = 3;
    a.evict_after = 5;
    ps::embedding_config b;
    b.dim = 3;
    b.optimizer = ps::row_optimizer::adam;
    b.seed = 4;
    return {a, b};
}

std::vector<ps::embedding_table> make_tables(const std::vector<ps::embedding_config>& c = configs())
{
    std::vector<ps::embedding_table> t;
    for (const auto& x : c) t.emplace_back(x);
    return t;
}

// Everything a row holds, by table and key.
using row_image = std::tuple<std::vector<float>, std::vector<float>, std::uint64_t, std::uint64_t, std::uint64_t>;
using table_image = std::vector<std::map<std::uint64_t, row_image>>;

// The rows of every PS's tables together; each key must be on one PS only,
// the one shard_of_key names.
table_image image_of(const std::vector<std::vector<ps::embedding_table>>& per_ps)
{
    table_image out(per_ps.at(0).size());
    for (std::size_t p = 0; p < per_ps.size(); ++p)
        for (std::size_t t = 0; t < per_ps[p].size(); ++t)
            per_ps[p][t].for_each([&](const ps::embedding_row& r) {
                BOOST_TEST(ps::shard_of_key(r.key, per_ps.size()) == p);
                const bool fresh = out[t]
                                       .emplace(r.key, row_image{{r.values.begin(), r.values.end()},
                                                                 {r.state.begin(), r.state.end()},
                                                                 r.last_seen,
                                                                 r.count,
                                                                 r.updates})
                                       .second;
                BOOST_TEST(fresh, "key " << r.key << " is on two PS tasks");
            });
    return out;
}

// One training step on every PS: pulls of keys [from, from + n) (each on
// its PS), pushes of a gradient that depends on the key and the step,
// then eviction at `step`.
void train(std::vector<std::vector<ps::embedding_table>>& per_ps, std::uint64_t from, std::uint64_t n,
           std::uint64_t step)
{
    for (std::size_t p = 0; p < per_ps.size(); ++p) {
        std::vector<std::uint64_t> keys;
        for (std::uint64_t k = from; k < from + n; ++k)
            if (ps::shard_of_key(k * 7919, per_ps.size()) == p) keys.push_back(k * 7919);
        for (auto& t : per_ps[p]) {
            const std::size_t dim = t.config().dim;
            std::vector<float> out(keys.size() * dim), g(keys.size() * dim);
            t.pull(keys, out, step);
            for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>((i * 31 + step) % 17) - 0.08f;
            t.push(keys, g, step);
            t.evict(step);
        }
    }
}

// What a job's checkpoint at `step` writes: each PS its (one-parameter)
// shard and its table file, full or continuing `chains[p]`, then the
// manifest; the changed marks are cleared after each table file.
manifest save(const std::string& dir, std::uint64_t step, std::vector<std::vector<ps::embedding_table>>& per_ps,
              std::vector<std::vector<std::uint64_t>>& chains, bool full, bool write_the_manifest = true)
{
    const int num_ps = static_cast<int>(per_ps.size());
    manifest m;
    m.global_step = step;
    m.mode = "sync";
    m.model = "tables";
    m.num_params = static_cast<std::uint64_t>(num_ps);
    m.optimizer = "sgd";
    m.positions = {step};
    chains.resize(per_ps.size());
    for (int p = 0; p < num_ps; ++p) {
        shard_meta s;
        s.global_step = step;
        s.ps_index = p;
        s.num_ps = num_ps;
        s.range = {static_cast<std::size_t>(p), static_cast<std::size_t>(p) + 1};
        s.total_params = m.num_params;
        s.optimizer = "sgd";
        s.positions = {step};
        const float v = static_cast<float>(p);
        m.shards.push_back(write_shard(dir, s, std::span<const float>(&v, 1), {}));
        table_meta t;
        t.global_step = step;
        t.ps_index = p;
        t.num_ps = num_ps;
        t.full = full || chains[p].empty();
        if (!t.full) t.chain = chains[p];
        t.chain.push_back(step);
        m.table_files.push_back(write_tables(dir, t, per_ps[p]));
        for (auto& x : per_ps[p]) x.clear_changed();
        chains[p] = t.chain;
    }
    m.tables = layout_of(per_ps[0]);
    if (write_the_manifest) write_manifest(dir, m);
    return m;
}

std::vector<std::vector<ps::embedding_table>> restore_onto(const std::string& dir, const manifest& m, int num_ps)
{
    std::vector<std::vector<ps::embedding_table>> out;
    for (int p = 0; p < num_ps; ++p) {
        out.push_back(make_tables());
        load_tables(dir, m, p, num_ps, out.back());
    }
    return out;
}

std::vector<std::vector<ps::embedding_table>> fresh(int num_ps)
{
    std::vector<std::vector<ps::embedding_table>> out;
    for (int p = 0; p < num_ps; ++p) out.push_back(make_tables());
    return out;
}

std::size_t rows_in(const table_image& im)
{
    std::size_t n = 0;
    for (const auto& t : im) n += t.size();
    return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_table_file_round_trips_every_row_exactly)
{
    temp_dir d;
    auto ps = fresh(1);
    train(ps, 0, 300, 1);
    train(ps, 100, 300, 2);
    const auto before = image_of(ps);
    std::vector<std::vector<std::uint64_t>> chains;
    const auto m = save(d.path, 2, ps, chains, true);
    BOOST_TEST(m.table_files.at(0).full);
    BOOST_TEST(m.table_files[0].bytes == std::filesystem::file_size(d.path + "/" + table_name(2, 0, 1)));
    const auto back = read_manifest(d.path, manifest_name(2));
    BOOST_TEST((back.tables == m.tables));
    BOOST_TEST_REQUIRE(back.table_files.size() == 1u);
    BOOST_TEST(back.table_files[0].crc32 == m.table_files[0].crc32);
    BOOST_TEST(back.table_files[0].chain == (std::vector<std::uint64_t>{2}), boost::test_tools::per_element());
    BOOST_TEST(check_complete(d.path, back, true) == "");
    const auto restored = restore_onto(d.path, back, 1);
    BOOST_TEST((image_of(restored) == before));
    BOOST_TEST(rows_in(before) == 2 * 400u);
}

BOOST_AUTO_TEST_CASE(a_manifest_without_tables_stays_readable)
{
    temp_dir d;
    testing::write_checkpoint(d.path, 5, 10, 2);
    const auto m = read_manifest(d.path, manifest_name(5));
    BOOST_TEST(m.tables.empty());
    BOOST_TEST(m.table_files.empty());
    BOOST_TEST(check_complete(d.path, m, true) == "");
    BOOST_TEST(testing::read_text(d.path + "/" + manifest_name(5)).find("tables") == std::string::npos);
}

// Full, then incrementals with evictions between them: each restore gives
// back exactly the rows of its save, evicted rows not among them.
BOOST_DATA_TEST_CASE(full_incrementals_and_tombstones_restore_exactly_the_last_save, bdata::make({1, 2}), num_ps)
{
    temp_dir d;
    auto ps = fresh(num_ps);
    std::vector<std::vector<std::uint64_t>> chains;
    train(ps, 0, 500, 1);
    save(d.path, 1, ps, chains, true);
    std::uint64_t evicted_before = 0;
    for (std::uint64_t step = 2; step <= 12; ++step) {
        train(ps, step * 40, 100, step);  // keys 0..~80 go unseen and are evicted after step 6
        if (step % 3 != 0) continue;
        const auto m = save(d.path, step, ps, chains, false);
        BOOST_TEST(!m.table_files[0].full);
        BOOST_TEST(m.table_files[0].base_step == 1u);
        const auto image = image_of(ps);
        const auto back = restore_onto(d.path, read_manifest(d.path, manifest_name(step)), num_ps);
        BOOST_TEST((image_of(back) == image), "step " << step);
    }
    for (const auto& p : ps) evicted_before += p[0].evicted_rows();
    BOOST_TEST(evicted_before > 0u);
    // An incremental file is smaller than the full one.
    BOOST_TEST(std::filesystem::file_size(d.path + "/" + table_name(12, 0, num_ps)) <
               std::filesystem::file_size(d.path + "/" + table_name(1, 0, num_ps)));
}

// Saved by some PS count, restored onto another: every row exactly once,
// on the PS its key hashes to, identical to what was saved.
BOOST_DATA_TEST_CASE(a_restore_onto_another_ps_count_rehashes_every_row_exactly_once, bdata::make({12, 21, 23, 32}),
                     counts)
{
    const int from = counts / 10, to = counts % 10;  // PS tasks that save, that restore
    temp_dir d;
    auto ps = fresh(from);
    std::vector<std::vector<std::uint64_t>> chains;
    train(ps, 0, 600, 1);
    save(d.path, 1, ps, chains, true);
    train(ps, 300, 600, 8);  // evicts the rows of keys 0..299
    const auto m = save(d.path, 8, ps, chains, false);
    const auto image = image_of(ps);
    auto back = restore_onto(d.path, m, to);
    BOOST_TEST((image_of(back) == image));
    BOOST_TEST(rows_in(image) > 0u);

    // The restored job's next save starts a chain of its own (full), which
    // restores onto the first count again.
    std::vector<std::vector<std::uint64_t>> fresh_chains;
    train(back, 900, 50, 9);
    const auto m2 = save(d.path, 9, back, fresh_chains, true);
    BOOST_TEST(m2.table_files.size() == static_cast<std::size_t>(to));
    BOOST_TEST((image_of(restore_onto(d.path, m2, from)) == image_of(back)));
}

BOOST_AUTO_TEST_CASE(another_table_layout_is_refused_naming_both)
{
    temp_dir d;
    auto ps = fresh(1);
    train(ps, 0, 10, 1);
    std::vector<std::vector<std::uint64_t>> chains;
    const auto m = save(d.path, 1, ps, chains, true);
    auto c = configs();
    c[1].dim = 8;
    auto other = make_tables(c);
    const auto what = error_of([&] { load_tables(d.path, m, 0, 1, other); });
    BOOST_TEST(what.find("dim 3 adam") != std::string::npos, what);
    BOOST_TEST(what.find("dim 8 adam") != std::string::npos, what);
    BOOST_TEST(what.find("--embedding-") != std::string::npos, what);
    auto one = make_tables({configs()[0]});
    const auto fewer = error_of([&] { load_tables(d.path, m, 0, 1, one); });
    BOOST_TEST(fewer.find("2 tables") != std::string::npos, fewer);
    BOOST_TEST(fewer.find("1 table (") != std::string::npos, fewer);

    // A table file of another job under the manifest's name (three tables
    // where the manifest has two): refused before any of its rows is read.
    temp_dir other_dir;
    auto c3 = configs();
    c3.push_back(c3[0]);
    auto three = make_tables(c3);
    std::vector<float> row(c3[2].dim);
    for (std::uint64_t key = 0; key < 20; ++key) three[2].pull({&key, 1}, row, 1);
    table_meta tm;
    tm.global_step = 1;
    tm.full = true;
    tm.chain = {1};
    const auto e = write_tables(other_dir.path, tm, three);
    std::filesystem::copy_file(other_dir.path + "/" + e.file, d.path + "/" + e.file,
                               std::filesystem::copy_options::overwrite_existing);
    auto mine = make_tables();
    const auto mixed = error_of([&] { load_tables(d.path, m, 0, 1, mine); });
    BOOST_TEST(mixed.find(e.file) != std::string::npos, mixed);
    BOOST_TEST(mixed.find("3 tables") != std::string::npos, mixed);
    BOOST_TEST(mixed.find("mixes two jobs' files") != std::string::npos, mixed);
    BOOST_TEST(mine[0].rows() + mine[1].rows() == 0u);
}

BOOST_AUTO_TEST_CASE(a_corrupt_or_truncated_table_file_is_refused_naming_it)
{
    temp_dir d;
    auto ps = fresh(1);
    train(ps, 0, 50, 1);
    std::vector<std::vector<std::uint64_t>> chains;
    const auto m = save(d.path, 1, ps, chains, true);
    const auto file = table_name(1, 0, 1), path = d.path + "/" + file;
    const auto size = std::filesystem::file_size(path);
    testing::flip_byte(path, static_cast<std::streamoff>(size / 2));
    auto t = make_tables();
    auto what = error_of([&] { load_tables(d.path, m, 0, 1, t); });
    BOOST_TEST(what == file + " is corrupt (checksum mismatch)");
    BOOST_TEST(check_complete(d.path, m, true).find(file) != std::string::npos);
    std::filesystem::resize_file(path, size - 10);
    what = error_of([&] { load_tables(d.path, m, 0, 1, t); });
    BOOST_TEST(what.find(file + " is truncated") == 0u, what);
    BOOST_TEST(check_complete(d.path, m, false).find(file + " is truncated") != std::string::npos);
    std::filesystem::remove(path);
    BOOST_TEST(check_complete(d.path, m, false).find(file + " is missing") == 0u);
    // find_latest skips it, naming the file.
    const auto latest = error_of([&] { find_latest(d.path); });
    BOOST_TEST(latest.find(file) != std::string::npos, latest);
}

// kill -9 during a later save: its table files (whole or a temporary file)
// without a manifest are ignored; the restore is exactly the last save.
BOOST_AUTO_TEST_CASE(a_half_written_later_save_is_ignored)
{
    temp_dir d;
    auto ps = fresh(2);
    std::vector<std::vector<std::uint64_t>> chains;
    train(ps, 0, 200, 1);
    save(d.path, 1, ps, chains, true);
    train(ps, 100, 200, 2);
    save(d.path, 2, ps, chains, false);
    const auto image = image_of(ps);
    train(ps, 150, 300, 3);
    save(d.path, 3, ps, chains, false, false);  // both table files there, no manifest
    testing::write_text(d.path + "/" + table_name(4, 0, 2) + ".tmp.12345", "PSTRTABL half");
    const auto m = find_latest(d.path);
    BOOST_TEST_REQUIRE(m.has_value());
    BOOST_TEST(m->global_step == 2u);
    BOOST_TEST((image_of(restore_onto(d.path, *m, 2)) == image));
    BOOST_TEST((image_of(restore_onto(d.path, *m, 3)) == image));
}

// prune keeps every file a kept checkpoint's chain needs, the full save's
// included, and removes the rest of the older steps.
BOOST_AUTO_TEST_CASE(prune_keeps_the_chains_of_kept_checkpoints)
{
    temp_dir d;
    auto ps = fresh(1);
    std::vector<std::vector<std::uint64_t>> chains;
    for (std::uint64_t step = 1; step <= 7; ++step) {
        train(ps, step * 10, 50, step);
        save(d.path, step, ps, chains, step == 1 || step == 5);  // chains 1-4 and 5-7
    }
    prune(d.path, 2);  // keeps 6 and 7: chain 5, 6, 7
    auto names = names_in(d.path);
    const auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
    BOOST_TEST(!has(manifest_name(5)));
    BOOST_TEST(has(table_name(5, 0, 1)));
    BOOST_TEST(!has(table_name(4, 0, 1)));
    BOOST_TEST(!has(table_name(1, 0, 1)));
    BOOST_TEST(!has(shard_name(5, 0, 1)));
    const auto m = find_latest(d.path);
    BOOST_TEST_REQUIRE(m.has_value());
    BOOST_TEST((image_of(restore_onto(d.path, *m, 1)) == image_of(ps)));

    // A chain from one full save across every kept checkpoint.
    train(ps, 80, 10, 8);
    save(d.path, 8, ps, chains, false);
    prune(d.path, 1);  // keeps 8 alone: 5, 6, 7 stay as its chain
    names = names_in(d.path);
    BOOST_TEST(has(table_name(5, 0, 1)));
    BOOST_TEST(has(table_name(6, 0, 1)));
    BOOST_TEST(has(table_name(7, 0, 1)));
    BOOST_TEST(!has(manifest_name(7)));
    const auto listed = list(d.path, true);
    BOOST_TEST_REQUIRE(listed.size() == 4u);  // 8, and 7, 6, 5 as table files alone
    BOOST_TEST(listed.front().problem == "");
    BOOST_TEST(listed.back().step == 5u);
    BOOST_TEST(listed.back().problem.find("table files without a manifest") == 0u, listed.back().problem);
}

// The program's hooks (server_hooks_for) on servers over the loopback:
// sparse pushes, a full then an incremental snapshot, and a restore onto
// another PS count gives back the rows of the second.
BOOST_DATA_TEST_CASE(a_server_saves_its_tables_through_the_hooks_and_restores_onto_another_ps_count,
                     bdata::make({23, 21}), counts)
{
    using namespace std::chrono_literals;
    const int from = counts / 10, to = counts % 10;  // PS tasks that save, that restore
    temp_dir d;
    trainer::train_options o;
    o.checkpoint_dir = d.path;
    o.full_checkpoint_every = 10;
    ps::server_config c;
    c.training.sync = true;
    c.training.optimizer.kind = ps::optimizer_kind::sgd;
    c.training.tables = configs();
    c.training.tables[0].evict_after = 0;
    c.shutdown_wait = 2s;
    testing::job_options jo;
    jo.num_params = 4;
    jo.table_dims = {4, 3};

    const auto chief_manifest = [&](std::uint64_t step, int num_ps) {
        manifest m;
        m.global_step = step;
        m.mode = "sync";
        m.model = "t";
        m.num_params = 4;
        m.optimizer = "sgd";
        m.positions = {0};
        const auto parts = ps::make_partition(4, static_cast<std::size_t>(num_ps));
        for (int p = 0; p < num_ps; ++p) {
            const auto s = read_shard(d.path, shard_name(step, p, num_ps), true);
            m.shards.push_back({shard_name(step, p, num_ps), parts[static_cast<std::size_t>(p)],
                                std::filesystem::file_size(d.path + "/" + shard_name(step, p, num_ps)), 0, step});
            m.shards.back().crc32 = read_shard(d.path, shard_name(step, p, num_ps)).crc32;
            m.table_files.push_back(read_new_table_entry(d.path, table_name(step, p, num_ps), 1s));
        }
        m.tables = read_tables(d.path, m.table_files[0].file, true).meta.tables;
        write_manifest(d.path, m);
        return m;
    };
    std::vector<std::uint64_t> keys;
    for (std::uint64_t k = 0; k < 200; ++k) keys.push_back(k * 1000003);
    const auto step_once = [&](ps::client& w, std::size_t n) {
        for (std::size_t t = 0; t < 2; ++t) {
            const std::size_t dim = t == 0 ? 4 : 3;
            std::vector<std::uint64_t> ks(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(n));
            std::vector<float> rows(ks.size() * dim), g(ks.size() * dim, 0.25f);
            w.wait(w.async_pull_rows(t, ks, rows));
            w.wait(w.async_push_rows(t, ks, g));
        }
        std::vector<float> grad(4, 0.0f);
        std::copy(grad.begin(), grad.end(), w.grads().begin());
        w.wait(w.async_push());
    };
    std::vector<std::vector<float>> saved(2);
    {
        testing::ps_job job(from, 1, c, trainer::server_hooks_for(o), jo);
        auto& w = job.chief();
        w.wait(w.async_init());
        step_once(w, 100);
        BOOST_TEST_REQUIRE((w.snapshot(1).at(0).outcome == ps::snapshot_result::status::taken));
        const auto m1 = chief_manifest(1, from);
        BOOST_TEST(m1.table_files[0].full);
        step_once(w, 200);
        BOOST_TEST_REQUIRE((w.snapshot(2).at(0).outcome == ps::snapshot_result::status::taken));
        const auto m2 = chief_manifest(2, from);
        BOOST_TEST(!m2.table_files[0].full);
        BOOST_TEST(m2.table_files[0].chain == (std::vector<std::uint64_t>{1, 2}), boost::test_tools::per_element());
        BOOST_TEST(check_complete(d.path, m2, true) == "");
        for (std::size_t t = 0; t < 2; ++t) {
            saved[t].resize(keys.size() * (t == 0 ? 4 : 3));
            w.wait(w.async_lookup_rows(t, keys, saved[t]));
        }
        w.shutdown();
        for (int p = 0; p < from; ++p) BOOST_TEST(job.finish(p).returned);
    }
    testing::ps_job job(to, 1, c, trainer::server_hooks_for(o), jo);
    auto& w = job.chief();
    w.wait(w.async_restore(2));
    for (std::size_t t = 0; t < 2; ++t) {
        std::vector<float> rows(saved[t].size());
        w.wait(w.async_lookup_rows(t, keys, rows));
        BOOST_TEST(rows == saved[t], boost::test_tools::per_element());
    }
    // Its first save after the restore is full, over its own PS count.
    step_once(w, 50);
    BOOST_TEST_REQUIRE((w.snapshot(3).at(0).outcome == ps::snapshot_result::status::taken));
    const auto m3 = chief_manifest(3, to);
    BOOST_TEST(m3.table_files.size() == static_cast<std::size_t>(to));
    BOOST_TEST(m3.table_files[0].full);
    w.shutdown();
    for (int p = 0; p < to; ++p) BOOST_TEST(job.finish(p).returned);
}

// --full-checkpoint-every N: the app's snapshot hook saves every Nth table
// file of a PS in full (the first always), the others incrementally; the
// server clears the changed marks once the hook has returned (here the test
// does, as the server would), so each incremental file holds the rows
// changed since the one before.
BOOST_DATA_TEST_CASE(the_snapshot_hook_saves_every_nth_table_file_in_full, bdata::make({1, 3}), every)
{
    temp_dir d;
    trainer::train_options o;
    o.checkpoint_dir = d.path;
    o.full_checkpoint_every = every;
    auto h = trainer::server_hooks_for(o);
    auto ps = fresh(1);
    const std::vector<float> values{0.0f};
    std::vector<bool> kinds;
    for (std::uint64_t step = 1; step <= 7; ++step) {
        train(ps, step * 10, 30, step);
        ps::shard_snapshot s;
        s.step = step;
        s.range = {0, 1};
        s.num_params = 1;
        s.values = values;
        s.tables = ps[0];
        h.snapshot(s);
        const auto written = read_tables(d.path, table_name(step, 0, 1), true);
        kinds.push_back(written.meta.full);
        std::size_t changed = 0;
        ps[0][0].for_each_changed([&](const ps::embedding_row&) { ++changed; });
        BOOST_TEST(written.meta.rows.at(0) == (written.meta.full ? ps[0][0].rows() : changed));
        for (auto& t : ps[0]) t.clear_changed();
    }
    const std::vector<bool> expect =
        every == 1 ? std::vector<bool>(7, true) : std::vector<bool>{true, false, false, true, false, false, true};
    BOOST_TEST(kinds == expect, boost::test_tools::per_element());

    // The table file alone cannot be written (its temporary name is taken,
    // which atomic_file's exclusive create refuses; the shard file is
    // written): the hook throws, having left the tables as they were.
    train(ps, 500, 10, 8);
    std::size_t marked = 0;
    ps[0][0].for_each_changed([&](const ps::embedding_row&) { ++marked; });
    BOOST_TEST_REQUIRE(marked > 0u);
    std::ofstream(fmt::format("{}/{}.tmp.{}", d.path, table_name(8, 0, 1), ::getpid())) << "taken";
    ps::shard_snapshot s;
    s.step = 8;
    s.range = {0, 1};
    s.num_params = 1;
    s.values = values;
    s.tables = ps[0];
    BOOST_CHECK_THROW(h.snapshot(s), pstrain::error);
    BOOST_TEST(std::filesystem::exists(d.path + "/" + shard_name(8, 0, 1)), "the shard was written before the tables");
    BOOST_TEST(!std::filesystem::exists(d.path + "/" + table_name(8, 0, 1)));
    std::size_t changed = 0;
    ps[0][0].for_each_changed([&](const ps::embedding_row&) { ++changed; });
    BOOST_TEST(changed == marked);
}
