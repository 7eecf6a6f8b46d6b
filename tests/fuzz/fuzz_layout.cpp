// libFuzzer target: task layouts, as the plugin builds them from a step's
// environment.  Input lines: SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE,
// SLURM_DISTRIBUTION, SLURM_DIST_PLANESIZE.  Only pstrain::error may come
// out, and a layout must place every rank exactly once.
#include "common/hostlist.hpp"
#include "common/layout.hpp"
#include "common/parse.hpp"
#include "pstrain/error.hpp"
#include "tests/fuzz/lines.hpp"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const auto in = pstrain::fuzz::lines(data, size, 4);
    try {
        const auto dist = pstrain::parse_distribution(in[2]);
        const int plane = static_cast<int>(pstrain::parse_count(in[3], 1, 1 << 20).value_or(1));
        const auto counts = pstrain::expand_task_counts(in[1]);
        auto layout = pstrain::make_layout(pstrain::expand_hostlist(in[0]), counts, dist, plane);
        std::size_t placed = 0;
        for (std::size_t n = 0; n < layout.ranks_of_node.size(); ++n) {
            if (layout.ranks_of_node[n].size() != static_cast<std::size_t>(counts[n])) __builtin_trap();
            placed += layout.ranks_of_node[n].size();
            for (int r : layout.ranks_of_node[n])
                if (layout.node_of_rank.at(static_cast<std::size_t>(r)) != static_cast<int>(n)) __builtin_trap();
        }
        if (placed != layout.node_of_rank.size()) __builtin_trap();
        // local_index searches its node's ranks: the first ranks only, or a
        // big layout takes the fuzzer's whole time.
        const int most = layout.max_tasks_per_node();
        for (std::size_t r = 0; r < layout.node_of_rank.size() && r < 256; ++r) {
            const int local = layout.local_index(static_cast<int>(r));
            if (local < 0 || local >= most) __builtin_trap();
        }
    } catch (const pstrain::error&) {}
    return 0;
}
