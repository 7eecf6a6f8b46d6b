// How many compute (BLAS) threads a task runs: the CPUs Slurm gave it, so
// that the tasks of a node never oversubscribe its cores.
#pragma once

#include <functional>
#include <string>

namespace pstrain::trainer {

struct thread_fit {
    int threads = 1;
    std::string source;  // what decided, for the log: "--threads", "SLURM_CPUS_PER_TASK=2", ...
};

using environment = std::function<const char*(const char* name)>;

// In order: --threads (flag > 0); OMP_NUM_THREADS, the user's own setting;
// SLURM_CPUS_PER_TASK; this task's share of the node's allocated CPUs
// (SLURM_CPUS_ON_NODE over the step's tasks on SLURMD_NODENAME, from
// SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE), the PS tasks counted
// like any other; else the CPUs of the affinity mask.  Slurm's figures are capped
// by the affinity mask.  Throws pstrain::error naming a malformed
// OMP_NUM_THREADS and the fix.
thread_fit fit_threads(int flag, const environment& env, int affinity_cpus);

// The CPUs this process may run on (sched_getaffinity), at least 1.
int affinity_cpus();

}  // namespace pstrain::trainer
