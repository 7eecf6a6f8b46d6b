// A contiguous range of the flat parameter vector with its optimizer state:
// what one PS task owns.  The shard map splits the vector into P ranges of
// (almost) equal bytes, so large tensors are split across PS tasks.
#pragma once

#include "trainer/ps/optimizer.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace pstrain::ps {

struct shard_range {
    std::size_t begin = 0;
    std::size_t end = 0;
    std::size_t size() const { return end - begin; }
};

// P ranges covering [0, n) with sizes differing by at most one element.
std::vector<shard_range> make_shard_map(std::size_t n, int num_shards);

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

    // Sets values (from the chief's initialisation or a checkpoint).
    void assign(std::span<const float> values);
    void restore(std::span<const float> values, std::span<const float> state, std::uint64_t updates);
    // Applies one gradient of this shard's range.
    void apply(std::span<const float> grads);
    // The same, writing the new values into `spare` and swapping it with
    // the shard's values: afterwards `spare` holds the old values, untouched
    // (a reply may still be sending them).
    void apply_into(std::vector<float>& spare, std::span<const float> grads);

private:
    shard_range range_;
    optimizer_config cfg_;
    std::vector<float> values_;
    std::vector<float> state_;
    std::uint64_t updates_ = 0;
};

}  // namespace pstrain::ps
