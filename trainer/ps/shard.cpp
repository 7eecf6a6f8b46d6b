#include "trainer/ps/shard.hpp"

#include "common/error.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pstrain::ps {

std::vector<shard_range> make_shard_map(std::size_t n, int num_shards)
{
    if (num_shards < 1) throw error("a shard map needs at least one shard");
    std::vector<shard_range> map;
    const std::size_t p = static_cast<std::size_t>(num_shards);
    for (std::size_t s = 0; s < p; ++s) map.push_back({n * s / p, n * (s + 1) / p});
    return map;
}

parameter_shard::parameter_shard(shard_range range, optimizer_config cfg)
    : range_(range), cfg_(cfg), values_(range.size()), state_(range.size() * static_cast<std::size_t>(state_slots(cfg.kind)))
{
    initialize_state(cfg_, state_);
}

void parameter_shard::assign(std::span<const float> values)
{
    if (values.size() != values_.size())
        throw error(fmt::format("shard of {} values given {}", values_.size(), values.size()));
    std::copy(values.begin(), values.end(), values_.begin());
}

void parameter_shard::restore(std::span<const float> values, std::span<const float> state, std::uint64_t updates)
{
    assign(values);
    if (state.size() != state_.size())
        throw error(fmt::format("shard optimizer state of {} values given {}", state_.size(), state.size()));
    std::copy(state.begin(), state.end(), state_.begin());
    updates_ = updates;
}

void parameter_shard::apply_into(std::vector<float>& spare, std::span<const float> grads)
{
    spare.resize(values_.size());
    ++updates_;
    apply_update_to(cfg_, values_, spare, grads, state_, updates_);
    values_.swap(spare);
}

void parameter_shard::apply(std::span<const float> grads)
{
    ++updates_;
    apply_update(cfg_, values_, grads, state_, updates_);
}

}  // namespace pstrain::ps
