// How a client lays out its flat vector: its tensors (in order,
// as client_config::tensor_sizes says), the ranges of them that hold moving
// averages (adjacent ones merged, for the chief's hello), and the bytes of
// the exchange buffers (the values, then the gradients).  Each is checked
// before anything of its size is allocated.
#pragma once

#include "pstrain/client.hpp"
#include "pstrain/partition.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pstrain::ps {

struct tensor_layout {
    std::vector<shard_range> tensors;  // in order, covering the vector
    std::vector<shard_range> moving;   // moving-average ranges, merged, in order
};

// Throws pstrain::error naming what does not add up.
tensor_layout lay_out_tensors(const client_config& c);

// Two copies of num_params floats; throws when that does not fit in memory's addresses.
std::size_t exchange_bytes(std::uint64_t num_params);

}  // namespace pstrain::ps
