// Where Slurm placed each rank of a step, reconstructed from what every task
// can see: the step's node list, its tasks per node and its distribution.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pstrain {

enum class distribution { block, cyclic, plane };

// SLURM_DISTRIBUTION as srun sets it ("" when the user gave no -m: block).
// Only the node-level part (before ':') matters.  Throws for "arbitrary" and
// unknown values.
distribution parse_distribution(std::string_view slurm_distribution);

struct task_layout {
    std::vector<std::string> nodes;               // in step order
    std::vector<int> node_of_rank;                // rank -> index into nodes
    std::vector<std::vector<int>> ranks_of_node;  // node -> its ranks, ascending

    int local_index(int rank) const;  // position of rank on its node
    int max_tasks_per_node() const;
};

// Replays Slurm's task distribution given the final per-node counts: block
// fills nodes in order; cyclic deals one task per node per round, skipping
// full nodes; plane deals blocks of plane_size.  Throws pstrain::error when
// the lists disagree (different lengths, zero tasks in total).
task_layout make_layout(std::vector<std::string> nodes, const std::vector<int>& tasks_per_node, distribution dist,
                        int plane_size = 1);

}  // namespace pstrain
