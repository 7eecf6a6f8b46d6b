// One shard file, DIR/ckpt-<step>.shard-<p>-of-<P>: the values and
// optimizer state of the range of the flat parameter vector that PS task p
// of P held.  Its bytes, numbers in the writing host's byte order (the
// format does not convert: little-endian on x86-64 and AArch64):
//
//   offset 0    8 bytes   magic "PSTRCKPT"
//          8    uint32    format_version
//         12    uint32    J, the length of the metadata
//         16    J bytes   JSON metadata: shard_meta's fields ("range" as
//                         [begin, end])
//     16 + J    4n bytes  the range's n values (float32)
//               4sn bytes its optimizer state, slot after slot (s slots:
//                         state[k * n + i] is slot k of value i)
//               uint32    crc32 (zlib) of every byte before it
//
// A reader checks every size against the file's real size before it
// allocates anything, so a damaged or hostile file is refused, never
// believed.
#pragma once

#include "pstrain/error.hpp"
#include "trainer/checkpoint/file_io.hpp"
#include "trainer/checkpoint/manifest.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pstrain::checkpoint {

// What a PS task writes.
struct shard_meta {
    std::uint64_t global_step = 0;  // the checkpoint's global step (the chief's), which names the file;
                                    // async: the PS may have applied a few more updates
    int ps_index = 0, num_ps = 1;
    ps::shard_range range;
    std::uint64_t total_params = 0;
    std::string optimizer;                 // sgd, momentum, adagrad, adam
    int state_slots = 0;                   // 0 to 2
    std::uint64_t updates = 0;             // updates applied (Adam's bias correction)
    std::vector<std::uint64_t> positions;  // each worker's data position: batches drawn ("worker_batches")
};

// Writes one shard atomically (see atomic_file) as shard_name(global_step,
// ps_index, num_ps); returns its entry for the manifest, with `step` the
// metadata's global_step.  On any failure (a full disk included) the
// temporary file is removed and pstrain::error says what failed; an older
// checkpoint is never touched.
shard_entry write_shard(const std::string& dir, const shard_meta& meta, std::span<const float> values,
                        std::span<const float> state);

struct shard_data {
    shard_meta meta;
    std::vector<float> values, state;
    std::uint32_t crc32 = 0;  // the stored checksum (not filled with header_only)
};
// Reads and checks a shard file: magic, version, sizes, checksum.  With
// `header_only` it stops after the metadata (and checks the file's size,
// not its checksum).  Throws missing_file when it cannot stat the file,
// pstrain::error naming the file and the damage otherwise.
shard_data read_shard(const std::string& dir, const std::string& file, bool header_only = false);

}  // namespace pstrain::checkpoint
