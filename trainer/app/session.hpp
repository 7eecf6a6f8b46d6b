// What every training process sets up from the options: the compute
// backend, the data and the model.
#pragma once

#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/compute/backend.hpp"
#include "trainer/data/dataset.hpp"
#include "trainer/model/ctr_model.hpp"
#include "trainer/model/model.hpp"
#include "trainer/app/options.hpp"
#include "trainer/app/report.hpp"
#include "pstrain/optimizer.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace pstrain::trainer {

struct session {
    std::unique_ptr<compute::backend> backend;
    data::train_test data;              // dense models: the examples in memory
    std::unique_ptr<model::model> net;  // a dense model, or
    std::unique_ptr<model::ctr_model> ctr;  // a click-through model (its data are streamed: ctr_work.hpp)

    // Whichever it is: its tensors, name and initial values.
    const model::tensor_model& shape() const;
};

// Loads the data and builds the model on the chosen device; `worker`
// (the worker's index) gives each worker its own dropout masks.  Throws
// pstrain::error with one clear line.
session open_session(const train_options& o, int worker = 0);

// --summary: the model's layers, output shapes and parameter counts on
// stdout (reads the data for its shape).  Returns the exit status.
int print_summary(const train_options& o);

ps::optimizer_config optimizer_from(const train_options& o);

// The final line's evaluation fields (test_accuracy, test_cross_entropy, or
// for the linear model test_mse, weight and bias).
nlohmann::json evaluation_fields(const session& s, const model::eval_result& r, std::span<const float> params);

// One evaluation's log line and "eval" event (fields: the metrics); returns the event.
nlohmann::json record_evaluation(nlohmann::json fields, std::int64_t step, reporter& prog);

// Evaluates `params` on the test set: one log line, an "eval" event in the
// metrics file; returns the event.
nlohmann::json evaluate_on_test(session& s, std::span<const float> params, std::int64_t step, reporter& prog);

// The final JSON line (event "done": global step, test metrics, samples/s,
// ps, workers, mode) from the last evaluation; `train_seconds` and
// `samples` count every segment of the run (a requeued job's earlier ones
// too).
nlohmann::json done_line(nlohmann::json last_eval, double train_seconds, std::uint64_t samples, int ps, int workers,
                         const char* mode);

// A manifest for this session's model and options (shards, data position
// and step are the caller's).
checkpoint::manifest manifest_for(const session& s, const train_options& o, std::uint64_t step, const char* mode);

// Refuses (pstrain::error) a checkpoint of another model or optimizer.
void check_compatible(const checkpoint::manifest& m, const session& s, const train_options& o);

// The Slurm job this process belongs to, as its checkpoints record it:
// SLURM_CLUSTER_NAME, SLURM_JOB_ID and PSTRAIN_SUBMISSION (the SPANK
// plugin's, whose time is the submit time); none outside a job (no
// SLURM_JOB_ID).  `env` is getenv.
std::optional<checkpoint::job_identity> current_job(const std::function<const char*(const char*)>& env);

// Whether this job may resume checkpoint `m` of `dir` under `policy`: empty
// when it may (always with any; with own when the manifest's job is `me`),
// else the one line that refuses it, naming the other job and the fix.
std::string resume_refusal(const checkpoint::manifest& m, const std::string& dir, resume_policy policy,
                           const std::optional<checkpoint::job_identity>& me);

// The line of a restore that finds the run already at --train-steps
// (nothing to train), with the fix.
std::string nothing_to_train(const checkpoint::manifest& m, const std::string& dir, std::int64_t train_steps);

// When the chief checkpoints: every --save-checkpoint-steps global steps (a
// step that jumps past a multiple counts, as async steps can) and when
// --save-checkpoint-secs have passed since the last attempt.
class checkpoint_schedule {
public:
    explicit checkpoint_schedule(const train_options& o);
    bool due(std::int64_t step) const;
    void attempted() { last_attempt_ = std::chrono::steady_clock::now(); }
    void saved(std::int64_t step) { last_saved_ = step; }  // also: restored
    std::int64_t last_saved() const { return last_saved_; }

private:
    std::int64_t every_steps_;
    std::chrono::seconds every_secs_;
    std::int64_t last_saved_ = -1;
    std::chrono::steady_clock::time_point last_attempt_;
};

// The batches worker `index` of `num_workers` had drawn when checkpoint `m`
// was taken; 0, with a line saying the data order starts afresh, when this
// job's workers, seed or batch size differ from the checkpoint's.
std::uint64_t resumed_batches(const checkpoint::manifest& m, const train_options& o, int num_workers, int index);

// Fails with a clear line when the loss is not finite.
void check_loss(double loss, std::int64_t step);

}  // namespace pstrain::trainer
