#include "common/layout.hpp"

#include "pstrain/error.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pstrain {

distribution parse_distribution(std::string_view text)
{
    std::string_view node_level = text.substr(0, text.find(':'));
    // srun may add ",Pack"/",NoPack" to the distribution.
    node_level = node_level.substr(0, node_level.find(','));
    if (node_level.empty() || node_level == "block" || node_level == "*" || node_level == "unknown")
        return distribution::block;
    if (node_level == "cyclic") return distribution::cyclic;
    if (node_level == "plane") return distribution::plane;
    if (node_level == "arbitrary")
        throw error("task distribution 'arbitrary' is not supported by pstrain: use -m block, -m cyclic or -m plane=N");
    throw error(fmt::format("unknown task distribution '{}': use -m block, -m cyclic or -m plane=N", text));
}

int task_layout::local_index(int rank) const
{
    const auto& on_node = ranks_of_node.at(static_cast<std::size_t>(node_of_rank.at(static_cast<std::size_t>(rank))));
    return static_cast<int>(std::find(on_node.begin(), on_node.end(), rank) - on_node.begin());
}

int task_layout::max_tasks_per_node() const
{
    std::size_t most = 0;
    for (const auto& r : ranks_of_node) most = std::max(most, r.size());
    return static_cast<int>(most);
}

task_layout make_layout(std::vector<std::string> nodes, const std::vector<int>& counts, distribution dist,
                        int plane_size)
{
    if (nodes.size() != counts.size())
        throw error(fmt::format("the step has {} nodes but tasks are counted for {}", nodes.size(), counts.size()));
    long total = 0;
    for (int c : counts) total += c;
    if (total <= 0) throw error("the step has no tasks");
    if (plane_size < 1) plane_size = 1;

    task_layout layout;
    layout.nodes = std::move(nodes);
    layout.ranks_of_node.resize(counts.size());
    layout.node_of_rank.reserve(static_cast<std::size_t>(total));
    auto place = [&](std::size_t node) {
        layout.ranks_of_node[node].push_back(static_cast<int>(layout.node_of_rank.size()));
        layout.node_of_rank.push_back(static_cast<int>(node));
    };

    if (dist == distribution::block) {
        for (std::size_t n = 0; n < counts.size(); ++n)
            for (int t = 0; t < counts[n]; ++t) place(n);
        return layout;
    }
    // cyclic is plane with a block of one task.
    const int block = dist == distribution::cyclic ? 1 : plane_size;
    std::vector<int> left(counts);
    while (static_cast<long>(layout.node_of_rank.size()) < total) {
        for (std::size_t n = 0; n < counts.size(); ++n) {
            for (int t = 0; t < block && left[n] > 0; ++t, --left[n]) place(n);
        }
    }
    return layout;
}

}  // namespace pstrain
