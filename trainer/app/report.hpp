// What a run reports: a line per --log-every steps (global step, loss,
// samples/s, ETA), JSON lines in --metrics-file, and the final JSON line
// on stdout.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace pstrain::trainer {

class reporter {
public:
    // Opens the metrics file (append) now, so a bad path fails before training.
    reporter(std::int64_t train_steps, std::int64_t log_every, const std::string& metrics_file);

    // A one-line status ("step 1200/6000 loss 0.412 acc 0.871 12.3k
    // samples/s ETA 4m00s") at every progress line, and "done: ..." at the end
    // (final true).  The job's comment in squeue shows it.
    using status_hook = std::function<void(const std::string& status, bool final)>;
    void on_status(status_hook hook) { status_ = std::move(hook); }

    // After each applied update: `samples` examples went into it.
    void step(std::int64_t global_step, double loss, std::int64_t samples);
    void record(const nlohmann::json& event);  // to the metrics file only (and an eval's accuracy to the status)
    // The run's end, with the final line's fields.
    void finish(const nlohmann::json& done);
    double seconds() const;
    std::int64_t samples() const { return samples_; }

private:
    struct file_closer { void operator()(std::FILE* f) const { std::fclose(f); } };
    using clock = std::chrono::steady_clock;

    std::int64_t train_steps_, log_every_;
    std::unique_ptr<std::FILE, file_closer> metrics_;
    clock::time_point start_ = clock::now(), last_ = start_;
    std::int64_t samples_ = 0, last_samples_ = 0, first_step_ = -1, last_logged_ = 0;
    double loss_sum_ = 0;
    std::optional<double> accuracy_;  // the last evaluation's
    status_hook status_;
    std::int64_t loss_count_ = 0;
};

std::string format_duration(double seconds);
// "12.3k" for 12345.6, "1.2M", "950".
std::string short_count(double n);

// Prints the final JSON line on stdout and flushes.
void print_done(const nlohmann::json& done);

}  // namespace pstrain::trainer
