// Going back to a checkpoint: which one (the newest whole one) and the
// part of it one task needs, whatever number of PS tasks wrote it.
#pragma once

#include "pstrain/embedding.hpp"
#include "trainer/checkpoint/manifest.hpp"

#include <span>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pstrain::checkpoint {

// The newest complete checkpoint, every shard verified.  Newer ones with a
// manifest but a problem are skipped and, when an older one is used, each
// is named in a warning; shards without a manifest (an interrupted write)
// are skipped quietly.  nullopt when there is no manifest at all; throws
// pstrain::error when manifests exist but none is usable (nothing is
// thrown away silently).
std::optional<manifest> find_latest(const std::string& dir);

// The values, optimizer state (slot after slot, for `range` only) and
// update count of `range` of the flat vector, from the checkpoint's shards,
// whatever number of PS tasks wrote them: each shard overlapping `range`
// is read (its size checked against the manifest's first, then its
// checksum) and its part of the values and of every state slot copied into
// place.  `updates` is that of the shard that
// held range.begin.  The manifest is trusted to cover `range` (find_latest
// checked it).
struct range_data {
    std::vector<float> values, state;
    std::uint64_t updates = 0;
};
range_data load_range(const std::string& dir, const manifest& m, ps::shard_range range);

// Puts back into `tables` (empty, PS task `index` of `num_ps`) the rows of
// the checkpoint's embedding tables whose keys shard_of_key gives to this
// task: every old PS task's chain is read (its full save, then each
// incremental one: its rows, then its tombstones), whatever number of PS
// tasks wrote it, so a restore onto another count re-hashes the rows.  A
// checkpoint with another table layout (count, dims, optimizer) is
// refused, naming both.  Returns the rows restored.
std::uint64_t load_tables(const std::string& dir, const manifest& m, int index, int num_ps,
                          std::span<ps::embedding_table> tables);

}  // namespace pstrain::checkpoint
