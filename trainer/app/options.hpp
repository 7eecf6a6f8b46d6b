// The trainer's command line (CLI11).  Every flag is documented in
// `pstrain --help` and pstrain(1).
#pragma once

#include "pstrain/optimizer.hpp"
#include "pstrain/settings.hpp"
#include "pstrain/wire_precision.hpp"
#include "trainer/compute/backend.hpp"
#include "trainer/data/dataset.hpp"
#include "trainer/model/spec.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}

namespace pstrain::trainer {

// Which checkpoint in --checkpoint-dir a job resumes (--resume): any
// (whatever run wrote it: the user named the directory), or only its own
// (the same Slurm job: cluster, job id and submission; train.sh's default
// directory).
enum class resume_policy { any, own };

// How a task's UCX worker waits for messages (--progress): blocked on its
// event fd, or busy-polling.
enum class ucx_progress { event, spin };

// Which model --model (or --model-file, or a folder of .tsv files) names:
// the mlp and linear presets, a layer model (a preset such as cnn, a layer
// spec or a model file: `spec`), or a click-through model.
enum class model_family { mlp, linear, layers, wide_deep, deepfm };

// The options are parsed into these types once; the words a user types
// and reads (help, errors, manifests) are the flags' own.
struct train_options {
    // what to run
    bool standalone = false;
    // distributed (without PMIx: the classic example's flags)
    bool sync_replicas = false;
    int replicas_to_aggregate = 0;  // 0: all workers
    // sync: the overlapped step's buckets, in MB (0: the whole gradient in
    // one push after backward); not with backup workers
    double bucket_mb = 4;
    // async: the most steps a worker may run ahead of the slowest live one (0: lock-step)
    int max_staleness = ps::unbounded_staleness;
    // sync: a lost worker lowers the gradients per step instead of ending the job
    bool elastic = false;
    std::string join;  // --join FILE: take a lost worker's place in a running --elastic PMIx job
    // --elastic jobs that grow: room for this many workers (0: the job's);
    // workers beyond the job's join later with --join
    int max_workers = 0;
    // --ps-spares: the job's last K ps tasks wait to take a lost PS's place
    // (restoring its shard from the newest checkpoint); 0: a lost PS ends the job
    int ps_spares = 0;
    std::string ps_hosts, worker_hosts, job_name;
    int task_index = -1;
    int bootstrap_timeout = 60;  // seconds
    int peer_timeout = 600;      // seconds without an answer from a peer
    ucx_progress progress = ucx_progress::event;
    bool shared_memory =
        true;  // --shared-memory auto: a PS maps the buffers of workers on its host; off: messages only
    double heartbeat_interval = 5;  // seconds between heartbeats; a peer silent for 6 of them is lost; 0: none
    int stall_timeout = 300;        // seconds without progress before a task reports its stacks and exits; 0: never
    // data
    std::string data_dir;
    bool sample_with_replacement = false;
    data::normalization normalize = data::normalization::global;  // --normalize global or per-channel
    int augment_shift = 0;                                        // random shifts of up to N pixels
    bool augment_flip = false;                                    // random horizontal flips
    bool skip_bad_lines = false;  // TSV: count and skip malformed lines instead of failing
    // model
    std::string model = "mlp";  // as typed (a layer model: its spec's text), for messages
    model_family family = model_family::mlp;
    std::string hidden_units = "100";
    std::vector<int> hidden;  // parsed from hidden_units
    std::string model_file;   // a JSON model description
    bool summary = false;     // print the model's layers and exit
    // A layer model (a preset such as cnn, a layer spec or --model-file):
    // `layers` is set and `spec` holds it; mlp and linear are their own.
    bool layers = false;
    model::model_spec spec;
    // A click-through model (--model wide-deep, the default for a
    // --data-dir of .tsv files): embedding tables on the PS tasks.
    bool ctr = false;
    int embedding_dim = 16;
    std::string embedding_combiner = "sum";
    std::string embedding_optimizer = "adagrad";
    float embedding_learning_rate = 0.5f;
    std::uint32_t admit_after = 0;     // a key's row is made at its Nth occurrence
    std::uint64_t evict_after = 0;     // rows unseen for N steps are dropped
    std::uint64_t max_table_rows = 0;  // per table per PS; 0: what half the memory holds
    // training
    std::int64_t train_steps = 1000;
    int batch_size = 100;
    ps::optimizer_kind optimizer = ps::optimizer_kind::sgd;  // its word: ps::optimizer_name
    float learning_rate = 0.01f;
    std::uint64_t seed = 1;
    std::int64_t eval_every = 0;  // 0: at the end only
    // checkpoints
    std::string checkpoint_dir;              // empty: no checkpoints
    int save_checkpoint_secs = 600;          // 0: not by time
    std::int64_t save_checkpoint_steps = 0;  // 0: not by steps
    int keep_checkpoints = 5;
    int full_checkpoint_every = 10;  // embedding tables: every Nth save of a PS is full, the others incremental
    resume_policy resume = resume_policy::any;
    // compute
    compute::device_kind device = compute::device_kind::automatic;  // --device auto, cpu or cuda
    compute::precision precision = compute::precision::fp32;        // --precision fp32 or bf16: the matrix products
    ps::wire_precision wire_precision = ps::wire_precision::fp32;   // --wire-precision fp32 or bf16: on the wire
    int threads = 0;
    // output
    std::int64_t log_every = 100;
    std::string metrics_file;
    std::string tensorboard_dir;  // empty: none; default with --checkpoint-dir: DIR/events
    bool job_comment = true;      // --job-comment on: the chief's status in the Slurm job's comment (squeue -o %k)
    std::string log_level = "info";
    bool profile = false;    // log each task's time_profile at the end
    std::string log_format;  // text or json; empty: PSTRAIN_LOG_FORMAT, else text
};

// Parses argv.  Returns std::nullopt when the program should exit with
// `exit_code` (after --help or --version, or a usage error already printed
// as one line).
std::optional<train_options> parse_command_line(int argc, char** argv, int& exit_code);

// The job's shape as the command line says it (ps::check_job), with the
// job's ps tasks and workers once they are known (0: not yet) and whether
// its ps tasks serve a program's workers (pstrain serve): the refusal in
// the flags' words, or nothing.  parse_command_line asks it of the flags
// alone; a task asks it again before it connects.
std::optional<std::string> job_shape_refusal(const train_options& o, int num_ps = 0, int num_workers = 0,
                                             bool serving = false);

// The registered option of `app` nearest to what was typed ("--batch-szie"
// or "--batch-szie=64"), "--batch-size"; "" when none is within a likely
// typo's distance (edit distance at most max(2, length/3)).
std::string closest_option(const CLI::App& app, std::string_view typed);

// A tool's command line (`pstrain NAME ...`, argv[1] being NAME): parses
// argv[2...] into `app`.  Returns the exit status when the program should
// exit (0 after --help; 2 after a usage error, printed as one line naming
// `NAME --help`), std::nullopt to go on.
std::optional<int> parse_tool_command(CLI::App& app, int argc, char** argv, const char* name);

}  // namespace pstrain::trainer
