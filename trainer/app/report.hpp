// What a run reports: a line per --log-every steps (global step, loss,
// samples/s, ETA), JSON lines in --metrics-file, the same figures as
// scalars in TensorBoard event files (--tensorboard-dir), and the final
// JSON line on stdout.
#pragma once

#include "pstrain/profile.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "pstrain/client.hpp"
#include "pstrain/server.hpp"
#include "trainer/app/tensorboard.hpp"

namespace pstrain::trainer {

struct report_config {
    std::int64_t train_steps = 0, log_every = 0;
    std::string metrics_file;     // empty: none
    std::string tensorboard_dir;  // empty: none
    double learning_rate = 0;     // reported with the progress
    bool classifier = true;       // progress has a training accuracy
};

// The TensorBoard scalars of a metrics event (tag and value), none for an
// event that has none.  The tags: loss/train, accuracy/train,
// samples_per_sec, learning_rate (progress); accuracy/test,
// cross_entropy/test, mse/test (eval); worker/I/steps_per_sec,
// worker/I/staleness, stale_gradients, ps/P/received_bytes_per_sec,
// ps/P/sent_bytes_per_sec (cluster).
std::vector<tensorboard::scalar> tensorboard_scalars(const nlohmann::json& event);

// A cluster event in words: "workers 50.1, 49.8 steps/s, staleness 0.42,
// stale 0; ps 0 in 1.2 MB/s out 1.1 MB/s".
std::string describe_cluster(const nlohmann::json& event);

class reporter {
public:
    // Opens the metrics file (append) and the events file now, so a bad
    // path fails before training.
    explicit reporter(const report_config& c);

    // A one-line status ("step 1200/6000 loss 0.412 acc 0.871 12.3k
    // samples/s ETA 4m00s") at every progress line, and "done: ..." at the end
    // (final true).  The job's comment in squeue shows it.
    using status_hook = std::function<void(const std::string& status, bool final)>;
    void on_status(status_hook hook) { status_ = std::move(hook); }

    // After each applied update: `samples` examples went into it, with
    // this batch's loss and accuracy.  True when it wrote a progress line
    // (every --log-every global steps): the time for cluster().
    bool step(std::int64_t global_step, double loss, double accuracy, std::int64_t samples);
    // Training starts at global step `step`: 0, or a resumed checkpoint's
    // (`checkpoint`, its manifest).  The events file begins with a
    // SessionLog START at step + 1, as TensorFlow's writes at every start:
    // TensorBoard's server takes a run's first START as its beginning and
    // each later one (a resumed job's, in its own file) as a restart,
    // dropping what the run had logged for the steps from there on.
    void starts_at(std::int64_t step, const std::string& checkpoint);
    // The model went back, from global step `from`, to the checkpoint
    // `checkpoint` at global step `to` (a sync rollback after a lost PS, or
    // an async one of ps 0): progress lines go on from the multiple of
    // --log-every after `to`, the ETA counts the steps trained again, and a
    // START at to + 1 makes TensorBoard drop what was logged for the steps
    // trained again.  The metrics file keeps every line, in the order
    // written.
    void went_back(std::int64_t from, std::int64_t to, const std::string& checkpoint);
    // The PS tasks' counters: each worker's step rate and staleness, each
    // PS's bytes per second since the last call, as a "cluster" event.
    void cluster(std::int64_t global_step, const std::vector<ps::ps_stats>& stats);
    // To the metrics file and the events file (and an eval's accuracy to the status).
    void record(const nlohmann::json& event);
    // The run's end, with the final line's fields: the line also goes to
    // the metrics file (a "done" event: what train.sh reads to know that
    // training completed, whatever srun's status), and the status says so.
    void finish(const nlohmann::json& done);
    double seconds() const;
    std::int64_t samples() const { return samples_; }

private:
    void write_metrics(const nlohmann::json& event);
    struct file_closer {
        void operator()(std::FILE* f) const { std::fclose(f); }
    };
    using clock = std::chrono::steady_clock;

    report_config cfg_;
    std::unique_ptr<std::FILE, file_closer> metrics_;
    std::optional<tensorboard::event_writer> events_;
    clock::time_point start_ = clock::now(), last_ = start_;
    std::int64_t samples_ = 0, last_samples_ = 0, first_step_ = -1, last_logged_ = 0;
    double loss_sum_ = 0, accuracy_sum_ = 0;
    std::vector<ps::ps_stats> last_stats_;  // at the last cluster()
    clock::time_point last_stats_time_ = start_;
    std::optional<double> accuracy_;  // the last evaluation's
    status_hook status_;
    std::int64_t loss_count_ = 0;
};

std::string format_duration(double seconds);
// "12.3k" for 12345.6, "1.2M", "950".
std::string short_count(double n);

// --profile's line: where a task's time went, per step and as a share of
// the whole ("profile of ps 0: 3000 steps in 4.2 s; per step: wait 0.91 ms
// (65.0%), ...").  `split` names a part of the first phase measured by the
// caller (a worker's compute), shown before the rest of that phase.
struct profile_part {
    const char* name;
    std::chrono::nanoseconds time;
};
std::string profile_line(const std::string& task, const ps::time_profile& p, std::optional<profile_part> split = {});

// --profile's line of a PS with embedding tables: the keys it served and
// how fast, over its "sparse" phase ("sparse traffic of ps 0: 1.2M keys
// pulled, 1.1M pushed in 3.1 s of lookups and updates: 740k keys/s").
std::string sparse_line(const std::string& task, const ps::time_profile& p, const ps::sparse_traffic& t);

// Prints the final JSON line on stdout and flushes.
void print_done(const nlohmann::json& done);

}  // namespace pstrain::trainer
