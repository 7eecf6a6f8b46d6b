#include "trainer/app/report.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>

namespace pstrain::trainer {

std::string format_duration(double s)
{
    if (!std::isfinite(s) || s < 0) return "?";
    auto total = static_cast<long>(s + 0.5);
    if (total >= 3600) return fmt::format("{}h{:02}m", total / 3600, (total / 60) % 60);
    if (total >= 60) return fmt::format("{}m{:02}s", total / 60, total % 60);
    return fmt::format("{}s", total);
}

std::string short_count(double n)
{
    if (n >= 1e6) return fmt::format("{:.1f}M", n / 1e6);
    if (n >= 1e4) return fmt::format("{:.1f}k", n / 1e3);
    return fmt::format("{:.0f}", n);
}

reporter::reporter(std::int64_t train_steps, std::int64_t log_every, const std::string& metrics_file)
    : train_steps_(train_steps), log_every_(log_every)
{
    if (!metrics_file.empty()) {
        metrics_.reset(std::fopen(metrics_file.c_str(), "a"));
        if (!metrics_)
            throw error(fmt::format("--metrics-file {}: cannot open for appending: {}: give a writable path", metrics_file,
                                    std::strerror(errno)));
    }
}

double reporter::seconds() const { return std::chrono::duration<double>(clock::now() - start_).count(); }

void reporter::record(const nlohmann::json& event)
{
    if (event.value("event", "") == "eval" && event.contains("test_accuracy") && event["test_accuracy"].is_number())
        accuracy_ = event["test_accuracy"].get<double>();
    if (!metrics_) return;
    auto stamped = event;
    if (!stamped.contains("elapsed_seconds")) stamped["elapsed_seconds"] = seconds();
    auto line = stamped.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), metrics_.get()) != line.size() || std::fflush(metrics_.get()) != 0)
        log::warn("cannot write the metrics file: {}", std::strerror(errno));
}

void reporter::step(std::int64_t global_step, double loss, std::int64_t samples)
{
    if (first_step_ < 0) first_step_ = last_logged_ = global_step - 1;
    samples_ += samples;
    loss_sum_ += loss;
    ++loss_count_;
    // Other workers move global_step too: log when it crosses a multiple.
    if (log_every_ <= 0 || global_step / log_every_ == last_logged_ / log_every_) return;
    last_logged_ = global_step;
    auto now = clock::now();
    double dt = std::chrono::duration<double>(now - last_).count();
    double rate = dt > 0 ? static_cast<double>(samples_ - last_samples_) / dt : 0;
    double elapsed = std::chrono::duration<double>(now - start_).count();
    double per_step = elapsed / static_cast<double>(std::max<std::int64_t>(1, global_step - first_step_));
    double eta = per_step * static_cast<double>(train_steps_ - global_step);
    double mean_loss = loss_sum_ / static_cast<double>(std::max<std::int64_t>(1, loss_count_));
    log::info("step {}/{} loss {:.4f} {:.0f} samples/s eta {}", global_step, train_steps_, mean_loss, rate,
              format_duration(eta));
    record({{"event", "progress"}, {"global_step", global_step}, {"loss", mean_loss}, {"samples_per_sec", rate},
            {"eta_seconds", eta}});
    if (status_) {
        auto status = fmt::format("step {}/{} loss {:.4f}", global_step, train_steps_, mean_loss);
        if (accuracy_) status += fmt::format(" acc {:.4f}", *accuracy_);
        status += fmt::format(" {} samples/s ETA {}", short_count(rate), format_duration(eta));
        status_(status, false);
    }
    last_ = now;
    last_samples_ = samples_;
    loss_sum_ = 0;
    loss_count_ = 0;
}

void reporter::finish(const nlohmann::json& done)
{
    if (!status_) return;
    auto status = fmt::format("done: step {}", done.value("global_step", std::int64_t{0}));
    if (done.contains("test_accuracy") && done["test_accuracy"].is_number())
        status += fmt::format(" acc {:.4f}", done["test_accuracy"].get<double>());
    else if (done.contains("test_mse") && done["test_mse"].is_number())
        status += fmt::format(" mse {:.5f}", done["test_mse"].get<double>());
    status += fmt::format(" in {}", format_duration(done.value("train_seconds", 0.0)));
    status_(status, true);
}

void print_done(const nlohmann::json& done)
{
    auto line = done.dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
}

}  // namespace pstrain::trainer
