// How the flat parameter vector is split between PS tasks: P contiguous
// ranges of (almost) equal size, so a large tensor is split across PS tasks
// and every PS holds about the same bytes.  Arithmetic only: the client and
// every server compute the same partition from (n, P).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pstrain::ps {

// [begin, end) of the flat vector, in elements.
struct shard_range {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    std::uint64_t size() const { return end - begin; }
    bool contains(const shard_range& r) const { return begin <= r.begin && r.begin <= r.end && r.end <= end; }
    bool operator==(const shard_range&) const = default;
};

// P ranges covering [0, n) in order, sizes differing by at most one element.
std::vector<shard_range> make_partition(std::uint64_t n, int num_shards);

}  // namespace pstrain::ps
