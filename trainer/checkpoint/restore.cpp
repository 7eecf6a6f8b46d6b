#include "trainer/checkpoint/restore.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "trainer/checkpoint/shard_file.hpp"
#include "trainer/checkpoint/store.hpp"
#include "trainer/checkpoint/table_file.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pstrain::checkpoint {

std::optional<manifest> find_latest(const std::string& dir)
{
    auto entries = list(dir, false);
    std::vector<std::string> skipped;
    for (auto& e : entries) {
        if (e.manifest_file.empty()) {
            log::debug("ignoring shard files of global step {} without a manifest (an interrupted checkpoint)", e.step);
            continue;
        }
        // list() without verify checked sizes only: read the newest
        // candidates fully, stopping at the first good one.
        if (e.problem.empty()) e.problem = check_complete(dir, *e.m, true);
        if (e.problem.empty()) {
            for (const auto& s : skipped) log::warn("{}", s);
            return e.m;
        }
        skipped.push_back(fmt::format("skipping the checkpoint at global step {} in {}: {}; using an older one", e.step,
                                      dir, e.problem));
    }
    if (!skipped.empty())
        throw error(fmt::format("no usable checkpoint in {}: {}: move the directory away to start from scratch", dir,
                                skipped.front().substr(std::string("skipping ").size())));
    return std::nullopt;
}

range_data load_range(const std::string& dir, const manifest& m, ps::shard_range range)
{
    const std::size_t n = range.size(), slots = static_cast<std::size_t>(m.state_slots);
    if (range.end > m.num_params) throw error("internal error: range beyond the checkpoint's parameters");
    range_data out;
    out.values.resize(n);
    out.state.resize(n * slots);
    for (const auto& s : m.shards) {
        // [b, e): the part of `range` this shard holds.
        const std::size_t b = std::max(range.begin, s.range.begin), e = std::min(range.end, s.range.end);
        if (b >= e) continue;
        if (auto problem = check_size(dir, s); !problem.empty()) throw error(problem);
        auto d = read_shard(dir, s.file);
        if (d.meta.range.begin != s.range.begin || d.meta.range.end != s.range.end ||
            d.meta.state_slots != m.state_slots)
            throw error(fmt::format("{} does not hold what its manifest names", s.file));
        if (s.range.begin <= range.begin && range.begin < s.range.end) out.updates = d.meta.updates;
        // Slot k of the shard starts at k * sn, slot k of the result at k * n.
        const std::size_t sn = s.range.size();
        std::copy(d.values.begin() + static_cast<std::ptrdiff_t>(b - s.range.begin),
                  d.values.begin() + static_cast<std::ptrdiff_t>(e - s.range.begin),
                  out.values.begin() + static_cast<std::ptrdiff_t>(b - range.begin));
        for (std::size_t k = 0; k < slots; ++k)
            std::copy(d.state.begin() + static_cast<std::ptrdiff_t>(k * sn + (b - s.range.begin)),
                      d.state.begin() + static_cast<std::ptrdiff_t>(k * sn + (e - s.range.begin)),
                      out.state.begin() + static_cast<std::ptrdiff_t>(k * n + (b - range.begin)));
    }
    return out;
}

namespace {

std::string describe(const std::vector<table_layout>& l)
{
    if (l.empty()) return "no embedding tables";
    std::string out = fmt::format("{} table{} (", l.size(), l.size() == 1 ? "" : "s");
    for (std::size_t i = 0; i < l.size(); ++i)
        out += fmt::format("{}dim {} {}", i ? ", " : "", l[i].dim, l[i].optimizer);
    return out + ")";
}

}  // namespace

std::uint64_t load_tables(const std::string& dir, const manifest& m, int index, int num_ps,
                          std::span<ps::embedding_table> tables)
{
    const auto mine = layout_of(tables);
    if (mine != m.tables)
        throw error(fmt::format(
            "{}/{} holds {}, this job has {}: restore with the --embedding-* settings it was saved with, or "
            "start from scratch in another --checkpoint-dir",
            dir, manifest_name(m.global_step), describe(m.tables), describe(mine)));
    const auto me = static_cast<std::size_t>(index), count = static_cast<std::size_t>(num_ps);
    for (const auto& f : chain_files(m)) {
        // Its own tables before any row: a file that is not its manifest's
        // (left by another job, or replaced since) could name a table this
        // job does not have.
        if (const auto theirs = read_tables(dir, f, true).meta.tables; theirs != m.tables)
            throw error(
                fmt::format("{}/{} holds {}, its manifest {} names {}: the checkpoint directory mixes two jobs' files; "
                            "restore from an older checkpoint or start from scratch in another --checkpoint-dir",
                            dir, f, describe(theirs), manifest_name(m.global_step), describe(m.tables)));
        read_tables(
            dir, f, false,
            [&](std::size_t t, const ps::embedding_row& r) {
                if (ps::shard_of_key(r.key, count) == me) tables[t].restore(r);
            },
            [&](std::size_t t, std::uint64_t key) {
                if (ps::shard_of_key(key, count) == me) tables[t].erase(key);
            });
    }
    std::uint64_t rows = 0;
    for (auto& t : tables) {
        t.clear_changed();
        rows += t.rows();
    }
    return rows;
}

}  // namespace pstrain::checkpoint
