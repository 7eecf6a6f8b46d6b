#include "library/ps/tensor_layout.hpp"

#include "pstrain/error.hpp"
#include "library/ps/protocol.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace pstrain::ps {

tensor_layout lay_out_tensors(const client_config& c)
{
    tensor_layout out;
    std::uint64_t at = 0;
    for (auto size : c.tensor_sizes) {
        if (size > c.num_params - at)
            throw error(fmt::format("the tensors' sizes add up to more than the model's {} parameters", c.num_params));
        out.tensors.push_back({at, at + size});
        at += size;
    }
    if (out.tensors.empty()) out.tensors.push_back({0, c.num_params});
    if (!c.tensor_sizes.empty() && at != c.num_params)
        throw error(fmt::format("the tensors' sizes add up to {}, the model has {} parameters", at, c.num_params));
    if (!c.tensor_kinds.empty() && c.tensor_kinds.size() != out.tensors.size())
        throw error(fmt::format("{} tensor kinds for {} tensors: give one kind per tensor, or none (all trainable)",
                                c.tensor_kinds.size(), out.tensors.size()));
    auto& moving = out.moving;
    for (std::size_t k = 0; k < c.tensor_kinds.size(); ++k) {
        const auto& tensor = out.tensors[k];
        if (c.tensor_kinds[k] != client_config::tensor_kind::moving_average || tensor.size() == 0) continue;
        if (!moving.empty() && moving.back().end == tensor.begin)
            moving.back().end = tensor.end;  // adjacent tensors: one range
        else moving.push_back(tensor);
    }
    if (moving.size() > wire::max_moving_ranges)
        throw error(fmt::format("{} separate moving-average ranges, at most {}: put the moving averages side by side",
                                moving.size(), wire::max_moving_ranges));
    return out;
}

// Checked before they are allocated: 2 * 4 * num_params must not wrap.
std::size_t exchange_bytes(std::uint64_t num_params)
{
    const std::uint64_t one = wire::float_bytes(num_params);
    if ((num_params > 0 && one == 0) || one > std::numeric_limits<std::size_t>::max() / 2)
        throw error(fmt::format("{} parameters are more than this machine can address", num_params));
    return std::max<std::size_t>(1, 2 * one);
}

}  // namespace pstrain::ps
