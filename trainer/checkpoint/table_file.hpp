// One table file, DIR/ckpt-<step>.tables-<p>-of-<P>: the rows of every
// embedding table PS task p of P held, in full or since its previous save.
// Numbers in the writing host's byte order, like the shard file:
//
//   offset 0    8 bytes   magic "PSTRTABL"
//          8    uint32    format_version
//         12    uint32    J, the length of the metadata
//         16    J bytes   JSON metadata: table_meta's fields ("tables" as
//                         [{"dim", "optimizer", "slots", "rows",
//                         "removed"}])
//     16 + J    per table: `rows` records of
//                 uint64 key, last_seen, count, updates,
//                 float32 values[dim], state[slots * dim] (slot after slot),
//               then `removed` uint64 keys (tombstones: rows evicted since
//               the previous save)
//               uint32    crc32 (zlib) of every byte before it
//
// A FULL file holds every row; an INCREMENTAL one the rows made, pulled or
// pushed since the PS's previous save and the keys evicted since.  A
// file's chain is the steps of the files it builds on: the full save's
// first, its own step last; restoring applies them in order.  A reader
// checks every size against the file's real size before it allocates.
#pragma once

#include "pstrain/embedding.hpp"
#include "trainer/checkpoint/manifest.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace pstrain::checkpoint {

// What a PS task writes.
struct table_meta {
    std::uint64_t global_step = 0;  // names the file
    int ps_index = 0, num_ps = 1;
    bool full = true;
    std::vector<std::uint64_t> chain;  // steps from the full save to this one (this one last)
    std::vector<table_layout> tables;
    std::vector<std::uint64_t> rows, removed;  // per table (filled by write_tables)
};

// The layout of `tables` (what a checkpoint must match to restore into them).
std::vector<table_layout> layout_of(std::span<const ps::embedding_table> tables);

// Writes the table file of `meta` (global_step, ps_index, num_ps, full,
// chain) atomically: every row of each table when meta.full, else the
// changed rows and removed keys.  Touches no changed mark: the caller
// clears them once this returns (the file is durable then).  Returns its
// manifest entry.  Throws pstrain::error naming what failed.
table_entry write_tables(const std::string& dir, table_meta meta, std::span<const ps::embedding_table> tables);

// Reads and checks a table file: magic, version, sizes, checksum (unless
// `header_only`), then calls on_row for every row and on_removed for every
// tombstone, table by table.  Throws missing_file when it is not there,
// pstrain::error naming the file and the damage otherwise.
struct table_data {
    table_meta meta;
    std::uint64_t bytes = 0;
    std::uint32_t crc32 = 0;  // not filled with header_only
};
table_data read_tables(const std::string& dir, const std::string& file, bool header_only,
                       const std::function<void(std::size_t table, const ps::embedding_row&)>& on_row = {},
                       const std::function<void(std::size_t table, std::uint64_t key)>& on_removed = {});

// The manifest's entry for a table file just written (by another node:
// looked for again for up to `patience`, like read_new_shard).
table_entry read_new_table_entry(const std::string& dir, const std::string& file, std::chrono::milliseconds patience);

}  // namespace pstrain::checkpoint
