// What one PS task owns: a contiguous range of the flat parameter vector,
// its values and its optimizer state.  Parts of the vector may be moving
// averages (a batch normalization's moving mean and variance): the
// optimizer leaves them alone and an update adds the pushed value to them
// (in sync mode the step's average of the workers' deltas), the workers
// pushing delta = (1 - momentum) * (batch statistic - moving value).
#pragma once

#include "pstrain/optimizer.hpp"
#include "pstrain/partition.hpp"
#include "library/ps/aligned_buffer.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace pstrain::ps {

class parameter_shard {
public:
    parameter_shard(shard_range range, optimizer_config cfg);

    const shard_range& range() const { return range_; }
    std::span<float> values() { return values_; }
    std::span<const float> values() const { return values_; }
    std::span<float> state() { return state_; }
    std::span<const float> state() const { return state_; }
    std::uint64_t updates() const { return updates_; }
    const optimizer_config& optimizer() const { return cfg_; }

    // The ranges of the flat vector (any, in order, not overlapping) that
    // hold moving averages; the parts inside this shard are kept.
    void set_moving_averages(const std::vector<shard_range>& ranges);
    // Sets values (from the chief's initialisation or a checkpoint).
    void assign(std::span<const float> values);
    void restore(std::span<const float> values, std::span<const float> state, std::uint64_t updates);
    // Applies one gradient of `part` (a range of the flat vector inside
    // this shard; `grads` holds part.size() values) as optimizer update
    // `update` (what begin_update returned: an async overlapped step's
    // buckets share one; 0: a new update).
    void apply(std::span<const float> grads, shard_range part, std::uint64_t update = 0);
    void apply(std::span<const float> grads) { apply(grads, range_); }
    // The same, writing the new values into `back` (a back buffer, sized
    // to the shard's here) and swapping it with the shard's values:
    // afterwards `back` holds the old values, untouched (a reply may still
    // be sending them).
    void apply_into(float_buffer& back, std::span<const float> grads, shard_range part, std::uint64_t update = 0);
    void apply_into(float_buffer& back, std::span<const float> grads) { apply_into(back, grads, range_); }
    // One update in blocks (a server fuses each block's aggregation, update
    // and copies, and may spread the blocks over threads): begin_update()
    // once, then apply_block() on disjoint blocks, from any threads.
    std::uint64_t begin_update() { return ++updates_; }
    // `grads` onto elements [at, at + grads.size()) of the shard, as update
    // `update` (what begin_update returned).
    void apply_block(std::span<const float> grads, std::size_t at, std::uint64_t update);

private:
    // The first state slot's value for element `at` of the shard (none for sgd).
    float* state_at(std::size_t at) { return state_.empty() ? nullptr : state_.data() + at; }
    // Elements [at, at + grads.size()) of the shard from `in` into `out`:
    // the optimizer's update, or in + grad inside a moving average.
    void update_part(std::span<const float> in, std::span<float> out, std::span<const float> grads, std::size_t at,
                     std::uint64_t update);

    shard_range range_;
    optimizer_config cfg_;
    float_buffer values_;
    std::vector<float> state_;
    std::uint64_t updates_ = 0;
    std::vector<shard_range> moving_;  // shard-relative, in order
};

}  // namespace pstrain::ps
