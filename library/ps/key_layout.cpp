#include "library/ps/key_layout.hpp"

#include "pstrain/error.hpp"
#include "library/ps/protocol.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace pstrain::ps {

key_layout lay_out_keys(const client_config& c)
{
    key_layout out;
    std::uint64_t at = 0;
    for (auto size : c.key_sizes) {
        if (size > c.num_params - at)
            throw error(fmt::format("the keys' sizes add up to more than the model's {} parameters", c.num_params));
        out.keys.push_back({at, at + size});
        at += size;
    }
    if (out.keys.empty()) out.keys.push_back({0, c.num_params});
    if (!c.key_sizes.empty() && at != c.num_params)
        throw error(fmt::format("the keys' sizes add up to {}, the model has {} parameters", at, c.num_params));
    if (!c.key_kinds.empty() && c.key_kinds.size() != out.keys.size())
        throw error(fmt::format("{} key kinds for {} keys: give one kind per key, or none (all trainable)",
                                c.key_kinds.size(), out.keys.size()));
    auto& moving = out.moving;
    for (std::size_t k = 0; k < c.key_kinds.size(); ++k) {
        const auto& key = out.keys[k];
        if (c.key_kinds[k] != client_config::key_kind::moving_average || key.size() == 0) continue;
        if (!moving.empty() && moving.back().end == key.begin) moving.back().end = key.end;  // adjacent keys: one range
        else moving.push_back(key);
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
