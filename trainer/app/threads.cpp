#include "trainer/app/threads.hpp"

#include "common/hostlist.hpp"
#include "common/parse.hpp"
#include "pstrain/error.hpp"

#include <algorithm>
#include <optional>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <sched.h>

namespace pstrain::trainer {
namespace {

// A positive count from the environment, or nothing when unset or not one.
std::optional<int> positive(const environment& env, const char* name)
{
    const char* v = env(name);
    if (!v) return std::nullopt;
    if (auto n = parse_count(v, 1, 1 << 20)) return static_cast<int>(*n);
    return std::nullopt;
}

// How many of the step's tasks run on this node: this node's place in the
// step's node list, that entry of its task counts (else the job's).
std::optional<int> local_tasks(const environment& env)
{
    const char* self = env("SLURMD_NODENAME");
    if (!self || !*self) return std::nullopt;
    for (auto [nodes_var, counts_var] : {std::pair{"SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"},
                                         std::pair{"SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE"}}) {
        const char* nodes = env(nodes_var);
        const char* counts = env(counts_var);
        if (!nodes || !counts) continue;
        try {
            const auto names = expand_hostlist(nodes);
            const auto per_node = expand_task_counts(counts);
            const auto at = std::find(names.begin(), names.end(), self);
            const auto k = static_cast<std::size_t>(at - names.begin());
            if (at != names.end() && k < per_node.size() && per_node[k] > 0) return per_node[k];
        } catch (const error&) {
            // Slurm's own variables, malformed: the next source decides.
        }
    }
    return std::nullopt;
}

}  // namespace

thread_fit fit_threads(int flag, const environment& env, int affinity)
{
    affinity = std::max(1, affinity);
    if (flag > 0) return {flag, "--threads"};
    if (const char* omp = env("OMP_NUM_THREADS"); omp && *omp) {
        // OpenMP's form: a number, or a list per nesting level ("8,1"), spaces around allowed.
        std::string_view v(omp);
        while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
        v = v.substr(0, v.find(','));
        while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
        if (auto n = parse_count(v, 1, 1 << 20)) return {static_cast<int>(*n), fmt::format("OMP_NUM_THREADS={}", *n)};
        throw error(fmt::format("OMP_NUM_THREADS={} is not a positive number: set it to the threads a task should run, "
                                "or unset it (each task then uses the CPUs Slurm gave it)",
                                omp));
    }
    if (auto n = positive(env, "SLURM_CPUS_PER_TASK"))
        return {std::min(*n, affinity), fmt::format("SLURM_CPUS_PER_TASK={}", *n)};
    if (auto cpus = positive(env, "SLURM_CPUS_ON_NODE")) {
        if (auto tasks = local_tasks(env))
            return {std::clamp(*cpus / *tasks, 1, affinity),
                    fmt::format("SLURM_CPUS_ON_NODE={} shared by {} task{} on this node", *cpus, *tasks,
                                *tasks == 1 ? "" : "s")};
    }
    return {affinity, fmt::format("the affinity mask's {} CPU{}", affinity, affinity == 1 ? "" : "s")};
}

int affinity_cpus()
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace pstrain::trainer
