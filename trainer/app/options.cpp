#include "trainer/app/options.hpp"

#include "trainer/app/build_info.hpp"
#include "library/ps/job_shape.hpp"
#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "config.h"

#include <algorithm>
#include "trainer/model/model.hpp"
#include "pstrain/optimizer.hpp"

#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace pstrain::trainer {
namespace {

// A folder of Criteo-style .tsv files: click-through data.
bool holds_tsv(const std::string& dir)
{
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.path().extension() == ".tsv") return true;
    return false;
}

// Edits (insertions, deletions, substitutions) that turn `a` into `b`.
std::size_t edit_distance(std::string_view a, std::string_view b)
{
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

// A command-line error is the same in every task of a step (they share
// argv and the step's environment), so under the plugin only the chief
// (worker 0) reports it; the others stop with one line pointing at it.
void report_command_line_error(const std::string& line)
{
    const char* role = std::getenv("PSTRAIN_ROLE");
    const char* index = std::getenv("PSTRAIN_TASK_INDEX");
    const bool in_step = role && index && std::getenv("PSTRAIN_NUM_WORKERS");
    if (in_step) log::set_prefix(fmt::format("pstrain[{} {}]", role, index));
    if (!in_step || (std::string_view(role) == "worker" && std::string_view(index) == "0")) log::error("{}", line);
    else log::info("stopped: the command line is wrong, and worker 0 (the chief) says how");
}

// The words a user types for the choices (their defaults as --help shows
// them), converted into train_options' types after the parse.
struct choice_words {
    std::string progress = "event", shared_memory = "auto", normalize = "global", optimizer = "sgd", device = "auto",
                precision = "fp32", wire_precision = "fp32", job_comment = "on", resume = "any";
};

// The flags whose conversion or check asks whether they were given at all.
struct given_flags {
    CLI::Option* staleness = nullptr;
    CLI::Option* model = nullptr;
    CLI::Option* hidden_units = nullptr;
};

// ------------------------------------------------------------ the flag table
// In --help's order: the groups as they come, each flag in its group.

// The program's line, its version, its policies and the footer of its --help.
void describe_the_program(CLI::App& app)
{
    // A flag given twice takes its last value: a job script's default
    // (train.sh's --data-dir) is overridden by the user's, which comes after.
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.set_version_flag("--version", std::string("pstrain ") + PACKAGE_VERSION);
    app.get_formatter()->column_width(34);
    app.footer(
        "Commands (each with its own --help):\n"
        "  pstrain status DIR                where a run stands: its newest checkpoint, accuracy and metrics\n"
        "  pstrain plot METRICS... -o PNG    loss and accuracy (click-through: AUC, log loss) against step and time\n"
        "  pstrain checkpoint inspect DIR    list the checkpoints of a --checkpoint-dir: steps, shards, checksums\n"
        "  pstrain datagen ctr OUT           make synthetic click-through .tsv data with a known best AUC\n"
        "  pstrain serve                     a ps task for workers whose program says how to train (pstrain.torch)\n"
        "See pstrain(1).");
}

// --standalone, and the job's shape in distributed training.
void add_job_flags(CLI::App& app, train_options& o, given_flags& given)
{
    app.add_flag("--standalone", o.standalone, "train in this one process with an in-process parameter server");

    auto* dist = "Distributed training";
    app.add_flag("--sync-replicas,--sync_replicas", o.sync_replicas,
                 "synchronous: the PS averages --replicas-to-aggregate gradients per step (default: async)")
        ->group(dist);
    app.add_option("--replicas-to-aggregate,--replicas_to_aggregate", o.replicas_to_aggregate,
                   "gradients per sync step (default: all workers; fewer means backup workers)")
        ->check(CLI::Range(1, 65535))
        ->group(dist);
    app.add_option("--bucket-mb", o.bucket_mb,
                   "push the gradient in buckets of about this many MB as backward completes them (the last "
                   "layers first); each PS applies a bucket (sync: once every worker's is in; async: on "
                   "arrival) and sends its values back while backward goes on (0: one push after backward; "
                   "default 4; not with backup workers)")
        ->check(CLI::NonNegativeNumber)
        ->group(dist);
    given.staleness =
        app.add_option("--max-staleness,--max_staleness", o.max_staleness,
                       "async: a worker more than N steps ahead of the slowest live worker waits for it (stale "
                       "synchronous parallel; 0: lock-step; default: no bound)")
            ->group(dist);
    app.add_flag("--elastic", o.elastic,
                 "workers leave and come back: sync goes on without a lost worker (not the chief), aggregating "
                 "fewer gradients per step; a restarted worker takes a lost one's place (static cluster spec)")
        ->group(dist);
    app.add_option("--join", o.join,
                   "take lost worker --task-index's place in a running --elastic job started under PMIx: FILE is "
                   "the join file its chief wrote (--checkpoint-dir/join)")
        ->type_name("FILE")
        ->group(dist);
    app.add_option("--max-workers,--max_workers", o.max_workers,
                   "--elastic: room for M workers, more than the job starts with: a worker started later with "
                   "--join and a new --task-index (up to M-1) joins the running job, and sync steps aggregate its "
                   "gradient too (default: the job's workers)")
        ->check(CLI::Range(1, 65535))
        ->group(dist);
    app.add_option("--ps-spares,--ps_spares", o.ps_spares,
                   "the job's last K ps tasks wait as spares: one takes a lost PS's place, restoring its shard from "
                   "the newest checkpoint (sync: every shard rolls back to it), and training goes on; needs "
                   "--checkpoint-dir (default: $PSTRAIN_PS_SPARES, set by sbatch --ps-spares, else 0)")
        ->envname("PSTRAIN_PS_SPARES")
        ->check(CLI::Range(0, 65535))
        ->group(dist);
}

// Distributed training's tasks: where they are, how they connect and what they send.
void add_task_flags(CLI::App& app, train_options& o, choice_words& w)
{
    auto* dist = "Distributed training";
    app.add_option("--ps-hosts,--ps_hosts", o.ps_hosts, "without PMIx: comma list of the PS tasks' host:port")
        ->group(dist);
    app.add_option("--worker-hosts,--worker_hosts", o.worker_hosts,
                   "without PMIx: comma list of the workers' host:port")
        ->group(dist);
    app.add_option("--job-name,--job_name", o.job_name, "without PMIx: ps or worker")
        ->check(CLI::IsMember({"ps", "worker"}))
        ->group(dist);
    app.add_option("--task-index,--task_index", o.task_index, "without PMIx: index within --job-name")
        ->check(CLI::Range(0, 65535))
        ->group(dist);
    app.add_option("--bootstrap-timeout", o.bootstrap_timeout, "seconds to wait for every peer at start-up")
        ->check(CLI::Range(1, 86400))
        ->group(dist)
        ->capture_default_str();
    app.add_option("--peer-timeout", o.peer_timeout, "seconds a worker waits for a PS reply before giving up")
        ->check(CLI::Range(1, 86400))
        ->group(dist)
        ->capture_default_str();
    app.add_option(
           "--heartbeat-interval", o.heartbeat_interval,
           "seconds between the heartbeats every task sends its peers; a peer silent for 6 intervals (its node "
           "off the network or down) is lost, named with its node and address (0: none, UCX's error detection only)")
        ->check(CLI::Range(0.0, 3600.0))
        ->group(dist)
        ->capture_default_str();
    app.add_option("--stall-timeout", o.stall_timeout,
                   "seconds without progress after which a task names what it waits for, writes its threads' stacks "
                   "and exits with status 124 (0: never)")
        ->check(CLI::Range(0, 7 * 86400))
        ->group(dist)
        ->capture_default_str();
    app.add_option("--progress", w.progress, "event (block on UCX's event fd) or spin (busy-poll)")
        ->check(CLI::IsMember({"event", "spin"}))
        ->group(dist)
        ->capture_default_str();
    app.add_option("--shared-memory", w.shared_memory,
                   "auto (a PS reads gradients from and writes values into the memory of workers on its host) or off "
                   "(UCX messages only)")
        ->check(CLI::IsMember({"auto", "off"}))
        ->group(dist)
        ->capture_default_str();
    app.add_option("--wire-precision", w.wire_precision,
                   "fp32, or bf16: gradients pushed and values pulled (and embedding rows) travel as bf16, half the "
                   "bytes; the PS keeps fp32 weights and sums (the same in every task of the job)")
        ->check(CLI::IsMember({"fp32", "bf16"}))
        ->group(dist)
        ->capture_default_str();
}

void add_data_flags(CLI::App& app, train_options& o, choice_words& w)
{
    auto* data = "Data";
    app.add_option(
           "--data-dir", o.data_dir,
           "MNIST-format IDX files (.gz or plain), train.csv/test.csv, or Criteo-style .tsv files with a held-out "
           "test.tsv (click-through data: --model deepfm, the default for them, or wide-deep)")
        ->group(data)
        ->capture_default_str();
    app.add_flag("--skip-bad-lines", o.skip_bad_lines,
                 "count and skip malformed .tsv lines instead of stopping at the first, which is named with its file "
                 "and line")
        ->group(data);
    app.add_flag("--sample-with-replacement", o.sample_with_replacement,
                 "draw batches with replacement instead of a shuffled pass per epoch")
        ->group(data);
    app.add_option("--normalize", w.normalize,
                   "standardise the features by the training set's mean and stddev: global (one each) or per-channel")
        ->check(CLI::IsMember({"global", "per-channel"}))
        ->group(data)
        ->capture_default_str();
    app.add_option("--augment-shift", o.augment_shift,
                   "shift each training image by a random 0..N pixels in each direction (seeded by --seed; 0: off)")
        ->check(CLI::Range(0, 64))
        ->group(data)
        ->capture_default_str();
    app.add_flag("--augment-flip", o.augment_flip,
                 "mirror each training image left to right with probability 1/2 (seeded)")
        ->group(data);
}

// The model, and its embedding tables.
void add_model_flags(CLI::App& app, train_options& o, given_flags& given)
{
    auto* model = "Model";
    given.model =
        app.add_option(
               "--model", o.model,
               "a preset: mlp (--hidden-units), linear (y = 2x + 10, the known-answer check), lenet5, cnn (the classic "
               "two-convolution MNIST model), deepfm or wide-deep (click-through data: embedding tables on the PS "
               "tasks); or layers, e.g. conv2d:32:5x5:relu,maxpool:2,flatten,dense:10 (pstrain(1))")
            ->group(model)
            ->capture_default_str();
    app.add_option("--model-file", o.model_file, "a JSON model description (pstrain(1), MODEL FILES)")
        ->group(model)
        ->excludes(given.model);
    given.hidden_units =
        app.add_option(
               "--hidden-units", o.hidden_units,
               "hidden layer widths of --model mlp (default 100) or wide-deep (default 128,64), comma separated")
            ->group(model);
    auto* sparse = "Embedding tables (--model wide-deep)";
    app.add_option("--embedding-dim", o.embedding_dim, "floats per embedding row of the deep part")
        ->check(CLI::Range(1, 1024))
        ->group(sparse)
        ->capture_default_str();
    app.add_option("--embedding-combiner", o.embedding_combiner, "how a multi-hot field's rows become one: sum or mean")
        ->check(CLI::IsMember({"sum", "mean"}))
        ->group(sparse)
        ->capture_default_str();
    app.add_option("--embedding-optimizer", o.embedding_optimizer,
                   "the tables' row-wise lazy optimizer: adagrad, adam or ftrl")
        ->check(CLI::IsMember({"adagrad", "adam", "ftrl"}))
        ->group(sparse)
        ->capture_default_str();
    app.add_option("--embedding-learning-rate", o.embedding_learning_rate, "the tables' learning rate (> 0)")
        ->check(CLI::PositiveNumber)
        ->group(sparse)
        ->capture_default_str();
    app.add_option("--admit-after", o.admit_after,
                   "a key gets a row at its Nth occurrence; before, it reads as zeros and is not learned (0: at once)")
        ->check(CLI::Range(0u, 1u << 30))
        ->group(sparse)
        ->capture_default_str();
    app.add_option("--evict-after", o.evict_after, "drop the rows of keys unseen for N global steps (0: never)")
        ->group(sparse)
        ->capture_default_str();
    app.add_option("--max-table-rows", o.max_table_rows,
                   "rows of each table on one PS; beyond it new keys read as zeros, with a warning (0: what half the "
                   "PS's memory holds)")
        ->group(sparse)
        ->capture_default_str();
    app.add_flag("--summary", o.summary, "print the model's layers, output shapes and parameter counts, and exit")
        ->group(model);
}

void add_training_flags(CLI::App& app, train_options& o, choice_words& w)
{
    auto* train = "Training";
    app.add_option("--train-steps", o.train_steps, "stop when global_step reaches this")
        ->check(CLI::Range(std::int64_t(1), std::int64_t(1) << 40))
        ->group(train)
        ->capture_default_str();
    app.add_option("--batch-size", o.batch_size, "examples per worker step")
        ->check(CLI::Range(1, 1 << 20))
        ->group(train)
        ->capture_default_str();
    app.add_option("--optimizer", w.optimizer, "sgd, momentum, adagrad or adam")
        ->check(CLI::IsMember({"sgd", "momentum", "adagrad", "adam"}))
        ->group(train)
        ->capture_default_str();
    app.add_option("--learning-rate", o.learning_rate, "learning rate (> 0)")
        ->check(CLI::PositiveNumber)
        ->group(train)
        ->capture_default_str();
    app.add_option("--seed", o.seed, "seed of initialisation and data order")->group(train)->capture_default_str();
    app.add_option("--eval-every", o.eval_every, "evaluate on the test set every N steps (0: at the end only)")
        ->check(CLI::NonNegativeNumber)
        ->group(train)
        ->capture_default_str();
}

void add_checkpoint_flags(CLI::App& app, train_options& o, choice_words& w)
{
    auto* ckpt = "Checkpoints";
    app.add_option("--checkpoint-dir,--checkpoint_dir", o.checkpoint_dir,
                   "save checkpoints here (a shared path every node sees) and resume from the newest complete one")
        ->group(ckpt);
    app.add_option("--save-checkpoint-secs", o.save_checkpoint_secs, "checkpoint every N seconds (0: not by time)")
        ->check(CLI::Range(0, 86400 * 365))
        ->group(ckpt)
        ->capture_default_str();
    app.add_option("--save-checkpoint-steps", o.save_checkpoint_steps,
                   "checkpoint every N global steps (0: not by steps)")
        ->check(CLI::NonNegativeNumber)
        ->group(ckpt)
        ->capture_default_str();
    app.add_option("--keep-checkpoints", o.keep_checkpoints, "complete checkpoints to keep")
        ->check(CLI::Range(1, 1000000))
        ->group(ckpt)
        ->capture_default_str();
    app.add_option("--full-checkpoint-every", o.full_checkpoint_every,
                   "embedding tables: every Nth checkpoint saves every row, the others only the rows changed since (1: "
                   "always full)")
        ->check(CLI::Range(1, 1000000))
        ->group(ckpt)
        ->capture_default_str();
    app.add_option(
           "--resume", w.resume,
           "any: resume the newest checkpoint in --checkpoint-dir whatever job wrote it; own: only one this Slurm "
           "job wrote (the same job id and submission, as after a requeue), refusing another job's")
        ->check(CLI::IsMember({"any", "own"}))
        ->group(ckpt)
        ->capture_default_str();
}

void add_compute_flags(CLI::App& app, train_options& o, choice_words& w)
{
    auto* compute = "Compute";
    app.add_option("--device", w.device, "auto (CUDA when built with it and a GPU is visible), cpu or cuda")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
        ->group(compute)
        ->capture_default_str();
    app.add_option(
           "--precision", w.precision,
           "fp32, or bf16: the matrix products of dense layers and convolutions multiply bf16 and accumulate in "
           "fp32 (oneDNN on CPUs with AMX or AVX512-BF16); weights, gradients and the rest stay fp32")
        ->check(CLI::IsMember({"fp32", "bf16"}))
        ->group(compute)
        ->capture_default_str();
    app.add_option("--threads", o.threads,
                   "compute (BLAS) threads, and a PS task's update threads for a large shard (default: "
                   "OMP_NUM_THREADS, else the CPUs Slurm gave the task: SLURM_CPUS_PER_TASK, else its share of "
                   "SLURM_CPUS_ON_NODE, else the affinity mask)")
        ->check(CLI::Range(1, 1024))
        ->group(compute);
}

void add_output_flags(CLI::App& app, train_options& o, choice_words& w)
{
    auto* output = "Output";
    app.add_option("--log-every", o.log_every, "one progress line every N steps (0: none)")
        ->check(CLI::NonNegativeNumber)
        ->group(output)
        ->capture_default_str();
    app.add_option(
           "--metrics-file", o.metrics_file,
           "append JSON lines of progress and evaluation here (default with --checkpoint-dir: DIR/metrics.jsonl)")
        ->group(output);
    app.add_option(
           "--tensorboard-dir", o.tensorboard_dir,
           "the chief writes TensorBoard event files here (default with --checkpoint-dir: DIR/events; none: no files)")
        ->group(output);
    app.add_option(
           "--job-comment", w.job_comment,
           "on: under Slurm the chief keeps its progress in the job's comment (squeue -o %k), at most every 30 s")
        ->check(CLI::IsMember({"on", "off"}))
        ->group(output)
        ->capture_default_str();
    app.add_flag("--profile", o.profile,
                 "at the end every task logs where its time went: a worker's compute, requests and waits for the PS "
                 "tasks, a PS's waits, aggregation, optimizer update and replies")
        ->group(output);
    app.add_option("--log-level", o.log_level, "error, warn, info or debug")
        ->check(CLI::IsMember({"error", "warn", "info", "debug"}))
        ->group(output)
        ->capture_default_str();
    app.add_option("--log-format", o.log_format, "text, or json: one JSON object a line (also PSTRAIN_LOG_FORMAT)")
        ->check(CLI::IsMember({"text", "json"}))
        ->group(output);
}

// Every flag of `pstrain`, into `o` and `w`.
given_flags add_flags(CLI::App& app, train_options& o, choice_words& w)
{
    given_flags given;
    add_job_flags(app, o, given);
    add_task_flags(app, o, w);
    add_data_flags(app, o, w);
    add_model_flags(app, o, given);
    add_training_flags(app, o, w);
    add_checkpoint_flags(app, o, w);
    add_compute_flags(app, o, w);
    add_output_flags(app, o, w);
    return given;
}

// ------------------------------------------------------------ the conversions

// --log-format applies to the errors of this very parse too: set before it.
void log_format_of_the_parse(int argc, char** argv)
{
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "--log-format" && i + 1 < argc && std::string_view(argv[i + 1]) == "json")
            log::set_format(log::format::json);
        if (a == "--log-format=json") log::set_format(log::format::json);
    }
}

// The choices' words into their types, and the defaults that follow from other flags.
void convert_choices(const choice_words& w, train_options& o)
{
    if (!o.log_format.empty()) log::set_format(log::parse_format(o.log_format));
    o.resume = w.resume == "own" ? resume_policy::own : resume_policy::any;
    o.progress = w.progress == "spin" ? ucx_progress::spin : ucx_progress::event;
    o.shared_memory = w.shared_memory == "auto";
    o.wire_precision = *ps::wire_precision_named(w.wire_precision);
    o.normalize =
        w.normalize == "per-channel" ? pstrain::data::normalization::per_channel : pstrain::data::normalization::global;
    o.optimizer = ps::parse_optimizer(w.optimizer);
    o.device = w.device == "cpu"    ? pstrain::compute::device_kind::cpu
               : w.device == "cuda" ? pstrain::compute::device_kind::cuda
                                    : pstrain::compute::device_kind::automatic;
    o.precision = w.precision == "bf16" ? pstrain::compute::precision::bf16 : pstrain::compute::precision::fp32;
    o.job_comment = w.job_comment == "on";
    // With checkpoints and no --metrics-file, the metrics go beside the
    // checkpoints, where `pstrain status` finds them.
    if (o.metrics_file.empty() && !o.checkpoint_dir.empty()) o.metrics_file = o.checkpoint_dir + "/metrics.jsonl";
    // And the TensorBoard events, for `tensorboard --logdir DIR/events`.
    if (o.tensorboard_dir.empty() && !o.checkpoint_dir.empty()) o.tensorboard_dir = o.checkpoint_dir + "/events";
    if (o.tensorboard_dir == "none") o.tensorboard_dir.clear();
}

// Which model the flags name (model_family), and what this build can run it on.
void convert_model(const given_flags& given, train_options& o)
{
    if (!o.model_file.empty()) {
        o.spec = model::read_model_file(o.model_file);
        o.layers = true;
        o.family = model_family::layers;
        o.model = o.spec.text();
    } else if (o.model == "wide-deep" || o.model == "deepfm" ||
               (o.model == "mlp" && given.model->count() == 0 && holds_tsv(o.data_dir))) {
        if (o.model == "mlp") o.model = "deepfm";
        o.family = o.model == "deepfm" ? model_family::deepfm : model_family::wide_deep;
        o.ctr = true;
        o.hidden = model::parse_hidden_units(given.hidden_units->count() > 0 ? o.hidden_units : "128,64");
        if (o.device == pstrain::compute::device_kind::cuda)
            throw error(
                fmt::format("--device cuda: --model {} runs on the CPU in this version: use --device cpu", o.model));
    } else if (o.model == "mlp") {
        o.hidden = model::parse_hidden_units(o.hidden_units);
    } else if (o.model == "linear") {
        o.family = model_family::linear;
    } else {
        o.spec = model::parse_model_spec(o.model);
        o.layers = true;
        o.family = model_family::layers;
    }
#if defined(HAVE_CUDA) && !defined(HAVE_CUDNN)
    // Layer models need cuDNN on a GPU: refused before any data is
    // read, and --device auto keeps them on the CPU.
    if (o.layers && o.device == pstrain::compute::device_kind::cuda && !o.summary)
        throw error(fmt::format("--device cuda: --model {} needs cuDNN, and this pstrain was built without it: install "
                                "cuDNN beside the CUDA toolkit and rebuild, or use --device cpu",
                                o.model));
    if (o.layers && o.device == pstrain::compute::device_kind::automatic) o.device = pstrain::compute::device_kind::cpu;
#endif
}

// ------------------------------------------------------------ the checks

// The rules across flags (a job's shape: ps::check_job), once converted.
void check_flags(const given_flags& given, const train_options& o)
{
    if (given.staleness->count() > 0 && o.max_staleness < 0)
        throw error(fmt::format("--max-staleness {}: give 0 (lock-step) or more steps, or leave it out for no "
                                "bound",
                                o.max_staleness));
    if (auto why = job_shape_refusal(o)) throw error(*why);
    if (o.heartbeat_interval > 0 && o.heartbeat_interval < 0.1)
        throw error(fmt::format("--heartbeat-interval {}: give 0 (no heartbeats) or at least 0.1 seconds",
                                o.heartbeat_interval));
}

}  // namespace

std::string closest_option(const CLI::App& app, std::string_view typed)
{
    // "--batch-szie=64": the name only.
    std::string_view name = typed.substr(0, typed.find('='));
    while (!name.empty() && name.front() == '-') name.remove_prefix(1);
    if (name.empty()) return {};
    std::string best;
    std::size_t best_distance = std::max<std::size_t>(2, name.size() / 3) + 1;  // farther is no likely typo
    for (const auto* opt : app.get_options()) {
        for (const auto& candidate : opt->get_lnames()) {
            const auto d = edit_distance(name, candidate);
            // Among equals the first registered name wins: the dashed spelling before the underscore one.
            if (d < best_distance) {
                best_distance = d;
                best = "--" + candidate;
            }
        }
    }
    return best;
}

std::optional<std::string> job_shape_refusal(const train_options& o, int num_ps, int num_workers, bool serving)
{
    ps::training_settings s;
    s.sync = o.sync_replicas;
    s.replicas_to_aggregate = o.replicas_to_aggregate;
    s.max_staleness = o.max_staleness;
    s.elastic = o.elastic;
    ps::job_shape j;
    j.num_ps = num_ps;
    j.num_workers = num_workers;
    j.max_workers = o.max_workers;
    j.ps_spares = o.ps_spares;
    j.checkpoints = !o.checkpoint_dir.empty();
    j.standalone = o.standalone;
    j.serving = serving;
    if (auto why = ps::check_job(s, j)) return why->flags;
    return std::nullopt;
}

std::optional<train_options> parse_command_line(int argc, char** argv, int& exit_code)
{
    train_options o;
    o.data_dir = PSTRAIN_DEFAULT_DATA_DIR;
    choice_words words;
    CLI::App app{"pstrain: parameter-server training on Slurm (see pstrain(1))", "pstrain"};
    describe_the_program(app);
    const auto given = add_flags(app, o, words);
    log_format_of_the_parse(argc, argv);
    try {
        app.parse(argc, argv);
        convert_choices(words, o);
        convert_model(given, o);
        check_flags(given, o);
    } catch (const CLI::CallForHelp&) {
        fmt::print("{}", app.help());
        exit_code = 0;
        return std::nullopt;
    } catch (const CLI::CallForVersion&) {
        fmt::print("{}", version_text());
        exit_code = 0;
        return std::nullopt;
    } catch (const CLI::ExtrasError&) {
        // "The following arguments were not expected: 3 --nosuch": name the
        // flag, and the registered one it most likely meant.
        auto rest = app.remaining();
        auto flag = std::find_if(rest.begin(), rest.end(), [](const std::string& a) { return a.rfind("-", 0) == 0; });
        const std::string typed = flag != rest.end() ? *flag : rest.empty() ? "?" : rest.front();
        const auto meant = flag != rest.end() ? closest_option(app, typed) : std::string();
        if (!meant.empty())
            report_command_line_error(
                fmt::format("unknown argument '{}': did you mean {}? (see pstrain --help)", typed, meant));
        else report_command_line_error(fmt::format("unknown argument '{}': see pstrain --help", typed));
        exit_code = 2;
        return std::nullopt;
    } catch (const CLI::ParseError& e) {
        report_command_line_error(fmt::format("{}: see pstrain --help", e.what()));
        exit_code = 2;
        return std::nullopt;
    } catch (const error& e) {
        report_command_line_error(e.what());
        exit_code = 2;
        return std::nullopt;
    }
    return o;
}

std::optional<int> parse_tool_command(CLI::App& app, int argc, char** argv, const char* name)
{
    try {
        app.parse(argc - 1, argv + 1);
    } catch (const CLI::CallForHelp&) {
        fmt::print("{}", app.help());
        return 0;
    } catch (const CLI::ParseError& e) {
        log::error("{}: see {} --help", e.what(), name);
        return 2;
    }
    return std::nullopt;
}

}  // namespace pstrain::trainer
