#include "trainer/app/session.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "trainer/app/ctr_work.hpp"
#include "trainer/app/threads.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace pstrain::trainer {

const model::tensor_model& session::shape() const
{
    if (net) return *net;
    return *ctr;
}

session open_session(const train_options& o, int worker)
{
    session s;
    compute::device_kind kind = o.device == "cpu"    ? compute::device_kind::cpu
                                : o.device == "cuda" ? compute::device_kind::cuda
                                                     : compute::device_kind::automatic;
    // The CPUs Slurm gave this task, unless told otherwise (threads.hpp).
    if (o.ctr && kind == compute::device_kind::automatic) {
        // The click-through models run on the CPU in this version (options.cpp refuses --device cuda).
        kind = compute::device_kind::cpu;
    }
    const auto fit = fit_threads(o.threads, [](const char* name) { return std::getenv(name); }, affinity_cpus());
    s.backend = compute::make_backend(kind, fit.threads, worker == 0);
    if (o.ctr) {
        // The files are streamed by each worker (ctr_work); the chief reads test.tsv.
        const auto files = data::ctr_train_files(o.data_dir);
        s.ctr = model::make_wide_deep(wide_deep_config_for(o));
        s.data.description = fmt::format("{} ({} training file{})", o.data_dir, files.size(), files.size() == 1 ? "" : "s");
        log::info("data: {}, streamed; model: {} ({} dense parameters, {} embedding tables); device: {}", s.data.description,
                  s.ctr->describe(), s.ctr->num_params(), s.ctr->tables().size(), s.backend->name());
        if (s.backend->host_memory()) log::info("{} compute thread{} ({})", fit.threads, fit.threads == 1 ? "" : "s", fit.source);
        return s;
    }
    if (o.model == "linear") {
        s.data = data::make_linear(1000, 200, o.seed);
        s.net = model::make_linear(*s.backend, static_cast<std::size_t>(o.batch_size));
    } else if (o.layers) {
        s.data = data::load_directory(o.data_dir, o.normalize == "per-channel" ? data::normalization::per_channel : data::normalization::global);
        if (s.data.train.num_classes < 2)
            throw error(fmt::format("{}: the labels name fewer than 2 classes", o.data_dir));
        s.net = model::make_sequential(*s.backend, o.spec, model::data_shape(s.data.train), s.data.train.num_classes,
                                       static_cast<std::size_t>(o.batch_size),
                                       o.seed * 1000003u + static_cast<std::uint64_t>(worker));
    } else {
        s.data = data::load_directory(o.data_dir, o.normalize == "per-channel" ? data::normalization::per_channel : data::normalization::global);
        if (s.data.train.num_classes < 2)
            throw error(fmt::format("{}: the labels name fewer than 2 classes", o.data_dir));
        s.net = model::make_mlp(*s.backend, static_cast<int>(s.data.train.cols), o.hidden, s.data.train.num_classes,
                                static_cast<std::size_t>(o.batch_size));
    }
    log::info("data: {} ({} training, {} test examples); model: {} ({} parameters, {:.1f} KB); device: {}",
              s.data.description, s.data.train.rows, s.data.test.rows, s.shape().describe(), s.shape().num_params(),
              s.shape().num_params() * 4 / 1000.0, s.backend->name());
    // After the data: a bad --data-dir stays one error line.
    if (s.backend->host_memory()) log::info("{} compute thread{} ({})", fit.threads, fit.threads == 1 ? "" : "s", fit.source);
    return s;
}

int print_summary(const train_options& o)
{
    if (o.ctr) {
        const auto m = model::make_wide_deep(wide_deep_config_for(o));
        fmt::print("model {}\n", m->describe());
        for (const auto& t : m->tables())
            fmt::print("  embedding table {:<6} {:>5} floats a row, rows made as keys appear (on the PS tasks)\n", t.name, t.dim);
        std::size_t total = 0;
        for (const auto& t : m->tensors()) {
            std::string shape;
            for (int d : t.shape) shape += (shape.empty() ? "" : "x") + std::to_string(d);
            fmt::print("  {:<28} {:>12} {:>10}\n", t.name, shape, t.size);
            total += t.size;
        }
        fmt::print("  dense parameters: {}\n", total);
        return 0;
    }
    if (o.model == "linear") {
        model::model_spec spec = model::parse_model_spec("dense:1,loss:mse");
        fmt::print("model linear: y = w x + b on one feature, squared error\n{}", model::summary(spec, {false, 1, 1, 1}, 1));
        return 0;
    }
    auto data = data::load_directory(o.data_dir, o.normalize == "per-channel" ? data::normalization::per_channel : data::normalization::global);
    if (data.train.num_classes < 2) throw error(fmt::format("{}: the labels name fewer than 2 classes", o.data_dir));
    model::model_spec spec;
    std::string title;
    if (o.layers) {
        spec = o.spec;
        title = fmt::format("model {}", spec.text());
    } else {
        // The mlp preset as layers (it keeps its own truncated-normal initialisation).
        std::string text;
        for (int units : o.hidden) text += fmt::format("dense:{}:relu,", units);
        spec = model::parse_model_spec(text + fmt::format("dense:{}", data.train.num_classes));
        title = fmt::format("model mlp --hidden-units {}", o.hidden_units);
    }
    // The table first: a model that does not fit the data prints only the error.
    const auto table = model::summary(spec, model::data_shape(data.train), data.train.num_classes);
    fmt::print("{}\ndata: {} ({} training examples of {}, {} classes)\n{}", title, data.description, data.train.rows,
               model::data_shape(data.train).text(), data.train.num_classes, table);
    return 0;
}

ps::optimizer_config optimizer_from(const train_options& o)
{
    ps::optimizer_config cfg;
    cfg.kind = ps::parse_optimizer(o.optimizer);
    cfg.learning_rate = o.learning_rate;
    return cfg;
}

nlohmann::json evaluation_fields(const session& s, const model::eval_result& r, std::span<const float> params)
{
    if (s.net->is_classifier()) return {{"test_accuracy", r.accuracy}, {"test_cross_entropy", r.loss}};
    return {{"test_accuracy", nullptr}, {"test_cross_entropy", nullptr}, {"test_mse", r.loss},
            {"weight", params[0]}, {"bias", params[1]}};
}

nlohmann::json evaluate_on_test(session& s, std::span<const float> params, std::int64_t step, reporter& prog)
{
    auto r = s.net->evaluate(params, s.data.test);
    if (s.net->is_classifier())
        log::info("eval at global step {}: test accuracy {:.4f}, cross-entropy {:.4f}", step, r.accuracy, r.loss);
    else
        log::info("eval at global step {}: test mse {:.5f}, weight {:.4f}, bias {:.4f}", step, r.loss, params[0], params[1]);
    return record_evaluation(evaluation_fields(s, r, params), step, prog);
}

nlohmann::json record_evaluation(nlohmann::json fields, std::int64_t step, reporter& prog)
{
    fields["event"] = "eval";
    fields["global_step"] = step;
    prog.record(fields);
    return fields;
}

nlohmann::json done_line(nlohmann::json last_eval, double train_seconds, std::uint64_t samples, int ps, int workers,
                         const char* mode)
{
    auto done = std::move(last_eval);
    done["event"] = "done";
    done["train_seconds"] = train_seconds;
    done["samples_per_sec"] = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0.0;
    done["ps"] = ps;
    done["workers"] = workers;
    done["mode"] = mode;
    return done;
}

checkpoint::manifest manifest_for(const session& s, const train_options& o, std::uint64_t step, const char* mode)
{
    checkpoint::manifest m;
    m.global_step = step;
    m.mode = mode;
    m.model = s.shape().describe();
    m.num_params = s.shape().num_params();
    for (const auto& t : s.shape().tensors()) m.tensors.push_back({{"name", t.name}, {"shape", t.shape}});
    m.optimizer = o.optimizer;
    m.state_slots = ps::state_slots(ps::parse_optimizer(o.optimizer));
    m.seed = o.seed;
    m.batch_size = o.batch_size;
    return m;
}

void check_compatible(const checkpoint::manifest& m, const session& s, const train_options& o)
{
    const auto name = fmt::format("the checkpoint at global step {} in {}", m.global_step, o.checkpoint_dir);
    if (m.model != s.shape().describe() || m.num_params != s.shape().num_params())
        throw error(fmt::format("{} holds the model '{}' ({} parameters) but this job builds '{}' ({} parameters): use the "
                                "same --model (and --hidden-units) and data, or another --checkpoint-dir",
                                name, m.model, m.num_params, s.shape().describe(), s.shape().num_params()));
    if (m.optimizer != o.optimizer)
        throw error(fmt::format("{} was trained with --optimizer {} but this job uses {}: pass --optimizer {}, or another "
                                "--checkpoint-dir", name, m.optimizer, o.optimizer, m.optimizer));
}

std::optional<checkpoint::job_identity> current_job(const std::function<const char*(const char*)>& env)
{
    const auto get = [&](const char* name) {
        const char* v = env(name);
        return std::string(v ? v : "");
    };
    checkpoint::job_identity me{get("SLURM_CLUSTER_NAME"), get("SLURM_JOB_ID"), get("PSTRAIN_SUBMISSION"), ""};
    if (me.job_id.empty()) return std::nullopt;
    // "20261124T193000-a1b2c3d4": submitted 2026-11-24T19:30:00Z.
    const auto& id = me.submission;
    const bool dated = id.size() > 16 && id[8] == 'T' && id[15] == '-' &&
                       std::all_of(id.begin(), id.begin() + 15, [](char c) { return c == 'T' || (c >= '0' && c <= '9'); });
    if (dated)
        me.submit_time = fmt::format("{}-{}-{}T{}:{}:{}Z", id.substr(0, 4), id.substr(4, 2), id.substr(6, 2), id.substr(9, 2),
                                     id.substr(11, 2), id.substr(13, 2));
    return me;
}

std::string resume_refusal(const checkpoint::manifest& m, const std::string& dir, resume_policy policy,
                           const std::optional<checkpoint::job_identity>& me)
{
    if (policy == resume_policy::any) return "";
    if (!me)
        return fmt::format("--resume own: this run is not in a Slurm job (SLURM_JOB_ID is unset), so no checkpoint in {} "
                           "is its own: run it under sbatch or srun, or pass --resume any to resume whatever is there",
                           dir);
    if (m.job && m.job->same_job(*me)) return "";
    const auto writer = m.job ? m.job->describe() : std::string("no recorded job (a run outside Slurm, or an older pstrain)");
    return fmt::format("{} holds another job's checkpoint, {} at global step {} written by {}; --resume own resumes only this "
                       "job's ({}): train in a fresh --checkpoint-dir, or, to continue that run on purpose, name this "
                       "directory with --checkpoint-dir (or PSTRAIN_CHECKPOINT_DIR for train.sh) without --resume own",
                       dir, checkpoint::manifest_name(m.global_step), m.global_step, writer, me->describe());
}

std::string nothing_to_train(const checkpoint::manifest& m, const std::string& dir, std::int64_t train_steps)
{
    const auto step = static_cast<std::int64_t>(m.global_step);
    return fmt::format("{}/{} is at global step {}, {} --train-steps {}: nothing to train; raise --train-steps to train on "
                       "from it, or give a fresh --checkpoint-dir to train anew",
                       dir, checkpoint::manifest_name(m.global_step), step, step == train_steps ? "which is" : "past",
                       train_steps);
}

checkpoint_schedule::checkpoint_schedule(const train_options& o)
    : every_steps_(o.save_checkpoint_steps), every_secs_(o.save_checkpoint_secs), last_attempt_(std::chrono::steady_clock::now())
{
}

bool checkpoint_schedule::due(std::int64_t step) const
{
    if (step == last_saved_) return false;
    if (every_steps_ > 0 && step / every_steps_ > std::max<std::int64_t>(last_saved_, 0) / every_steps_) return true;
    return every_secs_.count() > 0 && std::chrono::steady_clock::now() - last_attempt_ >= every_secs_;
}

std::uint64_t resumed_batches(const checkpoint::manifest& m, const train_options& o, int num_workers, int index)
{
    if (m.worker_batches.size() != static_cast<std::size_t>(num_workers) || m.seed != o.seed || m.batch_size != o.batch_size) {
        log::info("data order starts afresh: the checkpoint was taken with {} workers, --seed {}, --batch-size {}",
                  m.worker_batches.size(), m.seed, m.batch_size);
        return 0;
    }
    return m.worker_batches[static_cast<std::size_t>(index)];
}

void check_loss(double loss, std::int64_t step)
{
    if (!std::isfinite(loss))
        throw error(fmt::format("the training loss is {} at step {}: lower --learning-rate", loss, step));
}

}  // namespace pstrain::trainer
