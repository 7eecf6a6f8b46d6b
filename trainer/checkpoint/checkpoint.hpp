// Checkpoints on a shared path: one shard file per PS task and a manifest
// the chief writes last.  A checkpoint exists when its manifest does; every
// file is written to a temporary name, fsynced, renamed and its directory
// fsynced, so a crash leaves the previous checkpoint intact.
//
//   DIR/ckpt-<step>.shard-<p>-of-<P>   magic "PSTRCKPT", format version,
//                                      JSON metadata (range, optimizer,
//                                      update count, data positions), the
//                                      shard's values, its optimizer state
//                                      (slot after slot), crc32 of it all
//   DIR/ckpt-<step>.json               manifest: global step, model shape,
//                                      optimizer, data positions, every
//                                      shard with its range, bytes, crc32;
//                                      a crc32 of its own content
//
// <step> is zero-padded to 10 digits so that `ls` sorts by step.
#pragma once

#include "pstrain/error.hpp"
#include "pstrain/partition.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pstrain::checkpoint {

inline constexpr int format_version = 1;

// A file of a checkpoint is not there (or not yet visible from this node).
class missing_file : public error {
public:
    using error::error;
};

// What a PS task writes.
struct shard_meta {
    std::uint64_t global_step = 0;      // the PS's global_step when it wrote the shard
    int ps_index = 0, num_ps = 1;
    ps::shard_range range;
    std::uint64_t total_params = 0;
    std::string optimizer;              // sgd, momentum, adagrad, adam
    int state_slots = 0;
    std::uint64_t updates = 0;          // updates applied (Adam's bias correction)
    std::vector<std::uint64_t> worker_batches;  // batches each worker had drawn
};

struct shard_entry {
    std::string file;                   // name inside the directory
    ps::shard_range range;
    std::uint64_t bytes = 0;
    std::uint32_t crc32 = 0;            // of the whole file but its last 4 bytes
    std::uint64_t step = 0;
};

struct manifest {
    std::uint64_t global_step = 0;
    std::string created;                // UTC, ISO 8601
    std::string mode;                   // sync, async or standalone
    std::string model;                  // "784-100-10 mlp": the shape key
    std::uint64_t num_params = 0;
    nlohmann::json tensors = nlohmann::json::array();  // [{"name", "shape"}]
    std::string optimizer;
    int state_slots = 0;
    std::uint64_t seed = 0;
    int batch_size = 0;
    std::vector<std::uint64_t> worker_batches;
    std::vector<shard_entry> shards;
};

std::string manifest_name(std::uint64_t step);
std::string shard_name(std::uint64_t step, int ps_index, int num_ps);

// Creates DIR with mode 0700 when it is missing (its parent must exist),
// then proves that a file can be written, synced and removed there.
// Throws pstrain::error naming the directory, the reason and the fix.
void prepare_directory(const std::string& dir);

// Writes one shard atomically; returns its entry for the manifest.  On any
// failure (a full disk included) the temporary file is removed and
// pstrain::error says what failed; an older checkpoint is never touched.
shard_entry write_shard(const std::string& dir, const shard_meta& meta, std::span<const float> values,
                        std::span<const float> state);

struct shard_data {
    shard_meta meta;
    std::vector<float> values, state;
    std::uint32_t crc32 = 0;            // the stored checksum (not filled with header_only)
};
// Reads and checks a shard file: magic, version, sizes, checksum.  With
// `header_only` it stops after the metadata (and checks the file's size).
// Throws missing_file when it is not there.
shard_data read_shard(const std::string& dir, const std::string& file, bool header_only = false);

// read_shard(header_only) for a file another node has just written: on NFS
// a name can take a moment to appear (attribute and lookup caches), so a
// missing file is looked for again, re-reading the directory, for up to
// `patience`.
shard_data read_new_shard(const std::string& dir, const std::string& file, std::chrono::milliseconds patience);

void write_manifest(const std::string& dir, const manifest& m);
manifest read_manifest(const std::string& dir, const std::string& file);

// A checkpoint found in the directory, newest first.
struct listing_entry {
    std::uint64_t step = 0;
    std::string manifest_file;          // empty: shards without a manifest (an interrupted write)
    std::optional<manifest> m;
    std::string problem;                // empty: complete and, if verified, every checksum good
};
// Every checkpoint (by manifest) and every step with orphaned shard files.
// `verify` reads every shard fully and checks its checksum.
std::vector<listing_entry> list(const std::string& dir, bool verify);

// The newest complete checkpoint, every shard verified; each newer broken
// one is named in a warning.  Throws when checkpoints exist but none is
// usable (nothing is thrown away silently).
std::optional<manifest> find_latest(const std::string& dir);

// The values, optimizer state (slot after slot, for `range` only) and
// update count of `range` of the flat vector, from the checkpoint's shards,
// whatever number of PS tasks wrote them.
struct range_data {
    std::vector<float> values, state;
    std::uint64_t updates = 0;
};
range_data load_range(const std::string& dir, const manifest& m, ps::shard_range range);

// Keeps the newest `keep` complete checkpoints; removes older ones, shards
// of interrupted writes older than the newest complete checkpoint, and
// stale temporary files.  Never fails the job: problems are warnings.
void prune(const std::string& dir, int keep);

// `pstrain checkpoint inspect DIR`: a table of the checkpoints; returns the
// exit status (0 when the directory is readable and, if it holds any
// checkpoint, one of them is complete).
int inspect(const std::string& dir);

}  // namespace pstrain::checkpoint
