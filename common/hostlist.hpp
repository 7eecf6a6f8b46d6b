// Expands the two compressed lists of a Slurm step that the SPANK plugin
// reads: the node list (SLURM_STEP_NODELIST, "n[1-3,10],gpu[01-02]") and the
// tasks per node (SLURM_STEP_TASKS_PER_NODE, "2(x3),1").  Written here
// because the plugin does not link libslurm (loading it into slurmstepd
// would bring a second copy of Slurm's internals).
//
// Only the forms Slurm writes for these variables, not all of Slurm's
// hostlist syntax: items are separated by commas outside brackets; an item
// may hold several bracket groups, expanded left group outermost
// ("r[1-2]n[1-2]" is r1n1 r1n2 r2n1 r2n2); a group is a comma list of N or
// N-M (0 <= N <= M <= 999999999), each number zero-padded to the width N is
// written with ("[08-10]" is 08 09 10).  Hosts come out in the order written,
// duplicates kept, at most 2^20.  Nested brackets, empty items and white
// space are errors.
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
