#include "trainer/checkpoint/inspect.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "trainer/checkpoint/store.hpp"

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
    fmt::print("  {:>12}  {:<20}  {:>3}  {:>10}  {:<10}  {}\n", "global_step", "created", "ps", "params", "optimizer", "status");
    const listing_entry* newest = nullptr;
    for (const auto& e : entries) {
        const bool ok = e.problem.empty();
        if (ok && !newest) newest = &e;
        fmt::print("  {:>12}  {:<20}  {:>3}  {:>10}  {:<10}  {}\n", e.step, e.m ? e.m->created : "-",
                   e.m ? std::to_string(e.m->shards.size()) : "-", e.m ? std::to_string(e.m->num_params) : "-",
                   e.m ? e.m->optimizer : "-", ok ? "complete, checksums good" : e.problem);
    }
    if (!newest) {
        const bool any_manifest = std::any_of(entries.begin(), entries.end(), [](auto& e) { return !e.manifest_file.empty(); });
        if (!any_manifest) {
            fmt::print("no complete checkpoint: a job started with --checkpoint-dir {} starts from scratch\n", dir);
            return 0;
        }
        fmt::print("no complete checkpoint: a job started with --checkpoint-dir {} fails; move it away to start from scratch\n", dir);
        return 1;
    }
    fmt::print("newest complete: {} (global step {}, {}, {})\n", newest->manifest_file, newest->step, newest->m->model,
               newest->m->mode);
    return 0;
}

}  // namespace pstrain::checkpoint
