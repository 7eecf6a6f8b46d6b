// What a run reports: a line per --log-every steps (global step, loss,
// samples/s, ETA), JSON lines in --metrics-file, and the final JSON line
// on stdout.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace pstrain::trainer {

class reporter {
public:
    // Opens the metrics file (append) now, so a bad path fails before training.
    reporter(std::int64_t train_steps, std::int64_t log_every, const std::string& metrics_file);

    // After each applied update: `samples` examples went into it.
    void step(std::int64_t global_step, double loss, std::int64_t samples);
    void record(const nlohmann::json& event);  // to the metrics file only
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
    std::int64_t loss_count_ = 0;
};

std::string format_duration(double seconds);

// Prints the final JSON line on stdout and flushes.
void print_done(const nlohmann::json& done);

}  // namespace pstrain::trainer
