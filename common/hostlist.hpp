// Slurm hostlist expressions ("n[1-3,10],gpu[01-02]") and task-count lists
// ("2(x3),1").  A well-tested equivalent of Slurm's own hostlist code: the
// SPANK plugin cannot link libslurm safely (it would load a second copy of
// Slurm's internals into slurmstepd), and the trainer needs it too.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pstrain {

// Expands a hostlist expression into host names, in order; duplicates kept.
// Throws pstrain::error naming the expression on malformed input.
std::vector<std::string> expand_hostlist(std::string_view expr);

// Expands "2(x3),1" (SLURM_STEP_TASKS_PER_NODE) into {2,2,2,1}.
std::vector<int> expand_task_counts(std::string_view expr);

}  // namespace pstrain
