// The manifest, DIR/ckpt-<step>.json: the file that makes a checkpoint
// exist.  The chief (or the standalone trainer) writes it after every shard
// file is in place; it names each shard with its range, size and crc32, so
// a reader can tell a whole checkpoint from a broken one.  Also the names
// of every file of a checkpoint, and the parser the store lists them with.
//
// The manifest is JSON, written with 2-space indentation:
//   {"format": "pstrain-checkpoint", "version": 1, "global_step",
//    "created" (UTC, ISO 8601), "mode",
//    "model": {"description", "num_params", "tensors"},
//    "compute": {"precision"},
//    "optimizer": {"name", "state_slots"},
//    "data": {"seed", "batch_size", "worker_batches"},
//    "shards": [{"file", "range": [begin, end], "bytes", "crc32", "step"}],
//    "tables": {"layout": [{"dim", "optimizer", "slots"}],
//               "files": [{"file", "ps", "num_ps", "bytes", "crc32",
//                          "kind" ("full" or "incremental"), "base_step",
//                          "chain": [steps, the full save's first]}]},
//    "job": {"cluster", "job_id", "submission", "submit_time"},
//    "trained": {"milliseconds", "samples"},
//    "crc32"}
// "tables" is there only when the PS tasks hold embedding tables; a
// manifest without it (older ones too) has none.  "job" is the Slurm job
// that wrote the checkpoint (cluster, job id, the submission id the SPANK
// plugin made at sbatch, and that submission's UTC time): there only under
// Slurm; older manifests and runs outside Slurm have none.  "trained" is the
// training time and examples of every segment up to this checkpoint (a
// requeued job adds its own to them); older manifests have none (0).
// where "crc32" is zlib's crc32 of the compact dump (nlohmann::json's
// dump(), keys sorted) of everything else.
// "compute" says how the products were computed: "precision" is fp32 or
// bf16 (--precision); older manifests have none, which means fp32.  The
// values are float32 at either precision, so a restore may change it.
#pragma once

// The one include of ps::shard_range in trainer/checkpoint: every other
// checkpoint header takes it from here (it is to move to a public header).
#include "pstrain/partition.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pstrain::checkpoint {

// The format version of both the manifest and the shard files.
inline constexpr int format_version = 1;

// What the manifest records of one shard file.
struct shard_entry {
    std::string file;  // name inside the directory
    ps::shard_range range;
    std::uint64_t bytes = 0;  // the file's size
    std::uint32_t crc32 = 0;  // of the whole file but its last 4 bytes (which hold it)
    std::uint64_t step = 0;   // the writing PS's own global step (async: may be past the checkpoint's)
};

// One embedding table as a checkpoint holds it.
struct table_layout {
    std::uint32_t dim = 0;
    std::string optimizer;    // adagrad, adam, ftrl
    std::uint32_t slots = 0;  // optimizer state floats per value
    bool operator==(const table_layout&) const = default;
};

// What the manifest records of one PS task's table file.
struct table_entry {
    std::string file;  // ckpt-<step>.tables-<ps>-of-<num_ps>
    int ps = 0, num_ps = 1;
    std::uint64_t bytes = 0;
    std::uint32_t crc32 = 0;
    bool full = true;
    std::uint64_t base_step = 0;       // the step of the full save its chain starts from
    std::vector<std::uint64_t> chain;  // the steps of the files to apply in order, base_step first, this one's last
};

// The Slurm job that wrote a checkpoint: what tells a requeue of the same
// job (the same submission, kept by Slurm with the job's environment) from
// another job that found the directory, also one with the same job id (a
// controller started afresh, another cluster sharing the path).  The
// application decides it from the environment; this layer only records it.
struct job_identity {
    std::string cluster;      // SLURM_CLUSTER_NAME; empty: unknown
    std::string job_id;       // SLURM_JOB_ID
    std::string submission;   // PSTRAIN_SUBMISSION, e.g. "20261124T193000-a1b2c3d4"; empty: unknown
    std::string submit_time;  // UTC, ISO 8601; empty: unknown
    // The same job: cluster, job id and submission (the submit time is the
    // submission's, for people).
    bool same_job(const job_identity& o) const
    {
        return cluster == o.cluster && job_id == o.job_id && submission == o.submission;
    }
    // "cluster c1, job 4, submission 20261124T193000-a1b2c3d4 (submitted
    // 2026-11-24T19:30:00Z)", leaving out what is unknown.
    std::string describe() const;
};

struct manifest {
    std::uint64_t global_step = 0;
    std::string created;  // UTC, ISO 8601; write_manifest fills it when empty
    std::string mode;     // sync, async or standalone
    std::string model;    // "784-100-10 mlp": the shape key
    std::uint64_t num_params = 0;
    nlohmann::json tensors = nlohmann::json::array();  // [{"name", "shape"}]
    std::string optimizer;
    int state_slots = 0;
    std::uint64_t seed = 0;
    int batch_size = 0;
    std::vector<std::uint64_t> positions;  // each worker's data position: batches drawn ("worker_batches")
    std::vector<shard_entry> shards;       // complete: in range order, together covering [0, num_params)
    std::vector<table_layout> tables;      // embedding tables; empty: none
    std::vector<table_entry> table_files;  // one per PS task, in PS order
    std::optional<job_identity> job;       // the job that wrote it; none: not under Slurm, or an older manifest
    double trained_seconds = 0;            // training time of every segment up to this step (0: unknown)
    std::uint64_t trained_samples = 0;     // examples trained on in that time
    std::string precision = "fp32";        // --precision of the run that wrote it: fp32 or bf16
};

// <step> is zero-padded to 10 digits so that `ls` sorts by step:
// "ckpt-0000001200.json", "ckpt-0000001200.shard-1-of-2" (p counts from 0).
std::string manifest_name(std::uint64_t step);
std::string shard_name(std::uint64_t step, int ps_index, int num_ps);
// "ckpt-0000001200.tables-1-of-2": PS task 1's embedding tables.
std::string table_name(std::uint64_t step, int ps_index, int num_ps);

// What a name in the checkpoint directory is: a manifest, a shard file, a
// table file, an
// atomic_file's temporary file of one (all three with their step), or
// something else, which the store leaves alone.
struct name_kind {
    enum { manifest, shard, tables, temp, other } kind = other;
    std::uint64_t step = 0;
};
name_kind classify_name(const std::string& name);

// Writes the manifest atomically (see atomic_file), as ckpt-<global_step>.json.
void write_manifest(const std::string& dir, const manifest& m);
// Reads and checks a manifest: format, version, crc32, every field, shard
// names without '/', at least one shard, 0 to 2 optimizer state slots, and
// every shard's range inside the model's parameters.  It reads at most
// 64 MiB (a manifest of thousands of shards and workers is a few MB).  Throws pstrain::error naming
// the file and what is wrong with it.
manifest read_manifest(const std::string& dir, const std::string& file);

}  // namespace pstrain::checkpoint
