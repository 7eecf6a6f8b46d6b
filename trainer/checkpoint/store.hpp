// The checkpoint directory as a whole: making it ready, finding what is in
// it (and whether each checkpoint is whole), waiting for a file another
// node wrote, and removing what is no longer kept.  Files get into it only
// through atomic_file (file_io.hpp), by write_shard and write_manifest.
#pragma once

#include "trainer/checkpoint/manifest.hpp"
#include "trainer/checkpoint/shard_file.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pstrain::checkpoint {

// Creates DIR with mode 0700 when it is missing (its parent must exist),
// then proves that a file can be written, synced and removed there.
// Throws pstrain::error naming the directory, the reason and the fix.
void prepare_directory(const std::string& dir);

// read_shard(header_only) for a file another node has just written: on NFS
// a name can take a moment to appear (attribute and lookup caches), so a
// missing file is looked for again, re-reading the directory, for up to
// `patience`; then missing_file is thrown.
shard_data read_new_shard(const std::string& dir, const std::string& file, std::chrono::milliseconds patience);

// What a PS's snapshot hook gave back for its shard file of a snapshot:
// the file's size and crc32, and that PS's own global step.
struct shard_receipt {
    std::uint64_t bytes = 0;
    std::uint32_t crc32 = 0;
    std::uint64_t step = 0;
};
// The files of the snapshot at m.global_step, entered into `m` for its
// manifest: m.shards (one per receipt, in PS order, each file's range read
// from its header on the shared path: proof that the chief sees it),
// m.positions (PS 0's), and with `tables` each PS's table file
// (m.table_files, m.tables).  A name another node has just written is
// looked for again for up to `patience`.  Returns the files' bytes.
// Throws pstrain::error naming a missing or damaged file.
std::uint64_t enter_snapshot_files(const std::string& dir, manifest& m, std::span<const shard_receipt> receipts,
                                   bool tables, std::chrono::milliseconds patience);

// Empty when the shard file `s` names has the size the manifest records
// (checked before it is read: a shard is read whole); else what is wrong.
std::string check_size(const std::string& dir, const shard_entry& s);

// Empty when the checkpoint `m` names is whole: its shards follow each
// other from parameter 0 to num_params and each file has the size the
// manifest records; with `verify`, each is also read fully and its range
// and checksum match the manifest.  Else what is wrong, naming the file.
std::string check_complete(const std::string& dir, const manifest& m, bool verify);

// Empty when every PS task's chain of table files `m` names is there: each
// file from the full save to the checkpoint's own, continuing that chain,
// with the manifest's table layout (and the last with its recorded size);
// with `verify`, each is read fully and its checksum checked (the last
// against the manifest's).  Else what is wrong, naming the file.
// (check_complete calls it.)
std::string check_table_chains(const std::string& dir, const manifest& m, bool verify);

// The table files a restore of `m` reads: each PS task's chain.
std::vector<std::string> chain_files(const manifest& m);

// A checkpoint found in the directory, newest first.
struct listing_entry {
    std::uint64_t step = 0;
    std::string manifest_file;  // empty: shards without a manifest (an interrupted write)
    std::optional<manifest> m;
    std::string problem;  // empty: complete and, if verified, every checksum good
};
// Every checkpoint (by manifest) and every step with orphaned shard files.
// `verify` reads every shard fully and checks its checksum.  Throws
// pstrain::error when the directory cannot be read.
std::vector<listing_entry> list(const std::string& dir, bool verify);

// Keeps the newest `keep` complete checkpoints (complete as list() sees it
// without verify) and removes the checkpoint files (manifests, shards,
// table files, temporary files) of every older step: older checkpoints,
// complete or broken, interrupted writes and stale temporary files, but
// never a table file a kept checkpoint's chain needs (chain_files).  Files of steps
// from the oldest kept one on stay, a newer broken checkpoint included;
// with no complete checkpoint, or `keep` < 1, nothing is removed.  Never
// fails the job: problems are warnings.
void prune(const std::string& dir, int keep);

}  // namespace pstrain::checkpoint
