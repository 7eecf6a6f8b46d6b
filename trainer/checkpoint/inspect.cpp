#include "trainer/checkpoint/inspect.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "trainer/checkpoint/store.hpp"
#include "trainer/checkpoint/table_file.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pstrain::checkpoint {

int inspect(const std::string& dir)
{
    std::vector<listing_entry> entries;
    try {
        entries = list(dir, true);
    } catch (const error& e) {
        log::error("{}", e.what());
        return 1;
    }
    if (entries.empty()) {
        fmt::print("no checkpoints in {}\n", dir);
        return 0;
    }
    fmt::print("checkpoints in {} (newest first):\n", dir);
    fmt::print("  {:>12}  {:<20}  {:>3}  {:>10}  {:<10}  {}\n", "global_step", "created", "ps", "params", "optimizer",
               "status");
    const listing_entry* newest = nullptr;
    for (const auto& e : entries) {
        const bool ok = e.problem.empty();
        if (ok && !newest) newest = &e;
        fmt::print("  {:>12}  {:<20}  {:>3}  {:>10}  {:<10}  {}\n", e.step, e.m ? e.m->created : "-",
                   e.m ? std::to_string(e.m->shards.size()) : "-", e.m ? std::to_string(e.m->num_params) : "-",
                   e.m ? e.m->optimizer : "-", ok ? "complete, checksums good" : e.problem);
    }
    // Embedding tables: each PS task's table file and its chain.
    for (const auto& e : entries) {
        if (!e.m || e.m->table_files.empty()) continue;
        fmt::print("  tables of global step {}:\n", e.step);
        for (const auto& f : e.m->table_files) {
            std::string rows = "-";
            try {
                const auto d = read_tables(dir, f.file, true);
                std::uint64_t n = 0, removed = 0;
                for (std::size_t t = 0; t < d.meta.rows.size(); ++t) {
                    n += d.meta.rows[t];
                    removed += d.meta.removed[t];
                }
                rows = f.full ? fmt::format("{} rows", n) : fmt::format("{} rows changed, {} removed", n, removed);
            } catch (const error& err) {
                rows = err.what();
            }
            fmt::print("    {:<40} {:<11} {:>12} bytes  {}  chain from step {} ({} file{})\n", f.file,
                       f.full ? "full" : "incremental", f.bytes, rows, f.base_step, f.chain.size(),
                       f.chain.size() == 1 ? "" : "s");
        }
    }
    if (!newest) {
        const bool any_manifest =
            std::any_of(entries.begin(), entries.end(), [](auto& e) { return !e.manifest_file.empty(); });
        if (!any_manifest) {
            fmt::print("no complete checkpoint: a job started with --checkpoint-dir {} starts from scratch\n", dir);
            return 0;
        }
        fmt::print("no complete checkpoint: a job started with --checkpoint-dir {} fails; move it away to start from "
                   "scratch\n",
                   dir);
        return 1;
    }
    fmt::print("newest complete: {} (global step {}, {}, {})\n", newest->manifest_file, newest->step, newest->m->model,
               newest->m->mode);
    // Whose it is: a job started with --resume own resumes only its own.
    const auto& m = *newest->m;
    const auto trained = m.trained_samples > 0 ? fmt::format(", after {:.1f} s of training on {} examples",
                                                             m.trained_seconds, m.trained_samples)
                                               : std::string();
    if (m.job) fmt::print("written by {}{}\n", m.job->describe(), trained);
    else fmt::print("written by no recorded job (a run outside Slurm, or an older pstrain){}\n", trained);
    return 0;
}

}  // namespace pstrain::checkpoint
