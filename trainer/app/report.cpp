#include "trainer/app/report.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

namespace pstrain::trainer {

std::string format_duration(double s)
{
    if (!std::isfinite(s) || s < 0) return "?";
    auto total = static_cast<long>(s + 0.5);
    if (total >= 3600) return fmt::format("{}h{:02}m", total / 3600, (total / 60) % 60);
    if (total >= 60) return fmt::format("{}m{:02}s", total / 60, total % 60);
    return fmt::format("{}s", total);
}

std::string profile_line(const std::string& task, const ps::time_profile& p, std::optional<profile_part> split)
{
    std::vector<std::pair<std::string, std::chrono::nanoseconds>> parts;
    for (std::size_t k = 0; k < p.phases.size(); ++k) {
        auto t = p.phases[k].time;
        std::string name = p.phases[k].name;
        if (k == 0 && split) {
            const auto part = std::min(split->time, t);
            parts.emplace_back(split->name, part);
            t -= part;
            name = "other";
        }
        parts.emplace_back(name, t);
    }
    const double total = std::chrono::duration<double>(p.total()).count();
    const double steps = static_cast<double>(std::max<std::uint64_t>(p.steps, 1));
    std::string line = fmt::format("profile of {}: {} steps in {:.2f} s; per step:", task, p.steps, total);
    for (std::size_t k = 0; k < parts.size(); ++k) {
        const double s = std::chrono::duration<double>(parts[k].second).count();
        line += fmt::format("{} {} {:.3f} ms ({:.1f}%)", k ? "," : "", parts[k].first, s / steps * 1e3,
                            total > 0 ? 100 * s / total : 0.0);
    }
    return line;
}

std::string sparse_line(const std::string& task, const ps::time_profile& p, const ps::sparse_traffic& t)
{
    std::chrono::nanoseconds spent{0};
    for (const auto& phase : p.phases)
        if (std::string_view(phase.name) == "sparse") spent = phase.time;
    const double s = std::chrono::duration<double>(spent).count();
    const double keys = static_cast<double>(t.keys_pulled + t.keys_pushed);
    return fmt::format("sparse traffic of {}: {} keys pulled, {} pushed in {:.2f} s of lookups and updates: {} keys/s",
                       task, short_count(static_cast<double>(t.keys_pulled)),
                       short_count(static_cast<double>(t.keys_pushed)), s,
                       s > 0 ? short_count(keys / s) : std::string("-"));
}

std::string short_count(double n)
{
    if (n >= 1e6) return fmt::format("{:.1f}M", n / 1e6);
    if (n >= 1e4) return fmt::format("{:.1f}k", n / 1e3);
    return fmt::format("{:.0f}", n);
}

std::vector<tensorboard::scalar> tensorboard_scalars(const nlohmann::json& event)
{
    std::vector<tensorboard::scalar> out;
    const auto add = [&](const nlohmann::json& from, const char* field, std::string tag) {
        if (from.contains(field) && from[field].is_number()) out.push_back({std::move(tag), from[field].get<double>()});
    };
    const auto kind = event.value("event", "");
    if (kind == "progress") {
        add(event, "loss", "loss/train");
        add(event, "train_accuracy", "accuracy/train");
        add(event, "samples_per_sec", "samples_per_sec");
        add(event, "learning_rate", "learning_rate");
    } else if (kind == "eval") {
        add(event, "test_accuracy", "accuracy/test");
        add(event, "test_cross_entropy", "cross_entropy/test");
        add(event, "test_mse", "mse/test");
    } else if (kind == "cluster") {
        for (const auto& w : event.value("workers", nlohmann::json::array())) {
            const auto i = w.value("worker", -1);
            add(w, "steps_per_sec", fmt::format("worker/{}/steps_per_sec", i));
            add(w, "staleness", fmt::format("worker/{}/staleness", i));
        }
        add(event, "stale_gradients", "stale_gradients");
        for (const auto& p : event.value("ps", nlohmann::json::array())) {
            const auto i = p.value("ps", -1);
            add(p, "received_bytes_per_sec", fmt::format("ps/{}/received_bytes_per_sec", i));
            add(p, "sent_bytes_per_sec", fmt::format("ps/{}/sent_bytes_per_sec", i));
        }
    }
    return out;
}

std::string describe_cluster(const nlohmann::json& e)
{
    std::string rates, ps;
    for (const auto& w : e.value("workers", nlohmann::json::array()))
        rates += fmt::format("{}{:.1f}", rates.empty() ? "" : ", ", w.value("steps_per_sec", 0.0));
    for (const auto& p : e.value("ps", nlohmann::json::array()))
        ps += fmt::format("; ps {} in {}B/s out {}B/s", p.value("ps", 0),
                          short_count(p.value("received_bytes_per_sec", 0.0)),
                          short_count(p.value("sent_bytes_per_sec", 0.0)));
    return fmt::format("workers {} steps/s, staleness {:.2f}, stale {:.0f}{}", rates, e.value("staleness", 0.0),
                       e.value("stale_gradients", 0.0), ps);
}

reporter::reporter(const report_config& c) : cfg_(c)
{
    if (!cfg_.metrics_file.empty()) {
        // Private like the checkpoints beside it (0600): it names the job's
        // data, steps and accuracy.
        const int fd = ::open(cfg_.metrics_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) {
            metrics_.reset(::fdopen(fd, "a"));
            if (!metrics_) ::close(fd);
        }
        if (!metrics_)
            throw error(fmt::format("--metrics-file {}: cannot open for appending: {}: give a writable path",
                                    cfg_.metrics_file, std::strerror(errno)));
    }
    if (!cfg_.tensorboard_dir.empty()) {
        events_.emplace(cfg_.tensorboard_dir, "--tensorboard-dir");
        log::info("TensorBoard events go to {} (tensorboard --logdir {})", events_->path(), cfg_.tensorboard_dir);
    }
}

double reporter::seconds() const { return std::chrono::duration<double>(clock::now() - start_).count(); }

void reporter::record(const nlohmann::json& event)
{
    if (event.value("event", "") == "eval" && event.contains("test_accuracy") && event["test_accuracy"].is_number())
        accuracy_ = event["test_accuracy"].get<double>();
    if (events_ && event.contains("global_step") && event["global_step"].is_number_integer())
        events_->write(event["global_step"].get<std::int64_t>(), tensorboard_scalars(event));
    write_metrics(event);
}

void reporter::write_metrics(const nlohmann::json& event)
{
    if (!metrics_) return;
    auto stamped = event;
    if (!stamped.contains("elapsed_seconds")) stamped["elapsed_seconds"] = seconds();
    auto line = stamped.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), metrics_.get()) != line.size() || std::fflush(metrics_.get()) != 0)
        log::warn("cannot write the metrics file: {}", std::strerror(errno));
}

void reporter::starts_at(std::int64_t step, const std::string& checkpoint)
{
    if (events_) events_->session_start(step + 1, checkpoint);
}

void reporter::went_back(std::int64_t from, std::int64_t to, const std::string& checkpoint)
{
    if (first_step_ >= 0) {
        first_step_ -= std::max<std::int64_t>(from - to, 0);
        last_logged_ = to;
    }
    loss_sum_ = accuracy_sum_ = 0;
    loss_count_ = 0;
    if (events_) events_->session_start(to + 1, checkpoint);
}

bool reporter::step(std::int64_t global_step, double loss, double accuracy, std::int64_t samples)
{
    if (first_step_ < 0) first_step_ = last_logged_ = global_step - 1;
    samples_ += samples;
    loss_sum_ += loss;
    accuracy_sum_ += accuracy;
    ++loss_count_;
    // Other workers move global_step too: log when it crosses a multiple.
    const auto log_every = cfg_.log_every, train_steps = cfg_.train_steps;
    if (log_every <= 0 || global_step / log_every == last_logged_ / log_every) return false;
    last_logged_ = global_step;
    auto now = clock::now();
    double dt = std::chrono::duration<double>(now - last_).count();
    double rate = dt > 0 ? static_cast<double>(samples_ - last_samples_) / dt : 0;
    double elapsed = std::chrono::duration<double>(now - start_).count();
    double per_step = elapsed / static_cast<double>(std::max<std::int64_t>(1, global_step - first_step_));
    double eta = per_step * static_cast<double>(train_steps - global_step);
    const double batches = static_cast<double>(std::max<std::int64_t>(1, loss_count_));
    double mean_loss = loss_sum_ / batches;
    log::info("step {}/{} loss {:.4f} {:.0f} samples/s eta {}", global_step, train_steps, mean_loss, rate,
              format_duration(eta));
    nlohmann::json progress = {{"event", "progress"}, {"global_step", global_step},
                               {"loss", mean_loss},   {"samples_per_sec", rate},
                               {"eta_seconds", eta},  {"learning_rate", cfg_.learning_rate}};
    if (cfg_.classifier) progress["train_accuracy"] = accuracy_sum_ / batches;
    record(progress);
    if (status_) {
        auto status = fmt::format("step {}/{} loss {:.4f}", global_step, train_steps, mean_loss);
        if (accuracy_) status += fmt::format(" acc {:.4f}", *accuracy_);
        status += fmt::format(" {} samples/s ETA {}", short_count(rate), format_duration(eta));
        status_(status, false);
    }
    last_ = now;
    last_samples_ = samples_;
    loss_sum_ = accuracy_sum_ = 0;
    loss_count_ = 0;
    return true;
}

void reporter::cluster(std::int64_t global_step, const std::vector<ps::ps_stats>& stats)
{
    const auto now = clock::now();
    const double dt = std::chrono::duration<double>(now - last_stats_time_).count();
    if (stats.empty() || dt <= 0) return;
    // A counter that went back belongs to a PS that started anew: counted from 0.
    const auto since = [](std::uint64_t now_value, std::uint64_t before) {
        return static_cast<double>(now_value >= before ? now_value - before : now_value);
    };
    const auto before = [&](std::size_t p) -> const ps::ps_stats* {
        return p < last_stats_.size() ? &last_stats_[p] : nullptr;
    };
    const std::size_t workers = stats.front().workers.size();
    nlohmann::json w = nlohmann::json::array(), ps = nlohmann::json::array();
    double stale_total = 0, staleness_sum = 0, applied_total = 0;
    for (std::size_t i = 0; i < workers; ++i) {
        // A step reaches every PS its push covers: the busiest PS counts its steps.
        double steps = 0, applied = 0, staleness = 0, stale = 0;
        for (std::size_t p = 0; p < stats.size(); ++p) {
            if (i >= stats[p].workers.size()) continue;
            const auto& c = stats[p].workers[i];
            const auto* b = before(p) && i < before(p)->workers.size() ? &before(p)->workers[i] : nullptr;
            const double g = since(c.gradients, b ? b->gradients : 0), s = since(c.stale, b ? b->stale : 0);
            steps = std::max(steps, g + s);
            stale = std::max(stale, s);
            applied += g;
            staleness += since(c.staleness_sum, b ? b->staleness_sum : 0);
        }
        stale_total += stale;
        staleness_sum += staleness;
        applied_total += applied;
        w.push_back({{"worker", i},
                     {"steps_per_sec", steps / dt},
                     {"staleness", applied > 0 ? staleness / applied : 0.0},
                     {"stale", stale}});
    }
    for (std::size_t p = 0; p < stats.size(); ++p) {
        const auto* b = before(p);
        ps.push_back({{"ps", p},
                      {"received_bytes_per_sec", since(stats[p].bytes_received, b ? b->bytes_received : 0) / dt},
                      {"sent_bytes_per_sec", since(stats[p].bytes_sent, b ? b->bytes_sent : 0) / dt},
                      {"bytes_received", stats[p].bytes_received},
                      {"bytes_sent", stats[p].bytes_sent}});
    }
    record({{"event", "cluster"},
            {"global_step", global_step},
            {"interval_seconds", dt},
            {"workers", w},
            {"ps", ps},
            {"stale_gradients", stale_total},
            {"staleness", applied_total > 0 ? staleness_sum / applied_total : 0.0}});
    last_stats_ = stats;
    last_stats_time_ = now;
}

void reporter::finish(const nlohmann::json& done)
{
    write_metrics(done);
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
