// libFuzzer target: the two Slurm lists the plugin expands,
// SLURM_STEP_NODELIST (expand_hostlist) and SLURM_STEP_TASKS_PER_NODE
// (expand_task_counts), each given the whole input.  Only pstrain::error
// may come out; what comes out keeps the documented limits.
#include "common/hostlist.hpp"
#include "pstrain/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
        auto hosts = pstrain::expand_hostlist(text);
        if (hosts.empty() || hosts.size() > (std::size_t(1) << 20)) __builtin_trap();
        for (const auto& h : hosts)
            if (h.empty()) __builtin_trap();
    } catch (const pstrain::error&) {}
    try {
        auto counts = pstrain::expand_task_counts(text);
        for (int c : counts)
            if (c < 0) __builtin_trap();
    } catch (const pstrain::error&) {}
    return 0;
}
