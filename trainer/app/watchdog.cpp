#include "trainer/app/watchdog.hpp"

#include "common/log.hpp"
#include "trainer/app/stacks.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

namespace pstrain::trainer {

progress_meter::busy::~busy()
{
    m_.depth_.fetch_sub(1);
    m_.tick();
    const auto limit = m_.warn_after_ms_.load();
    if (limit <= 0) return;
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(watch_clock::now() - start_);
    if (took.count() <= limit) return;
    try {
        log::warn(
            "{} took {:.1f} s, more than half of --stall-timeout {}: tasks that wait for this one meanwhile count "
            "that as a stall; raise --stall-timeout",
            what_, took.count() / 1000.0, m_.stall_timeout_.load());
    } catch (...) {}
}

stall_detector::stall_detector(std::chrono::milliseconds timeout, watch_clock::time_point start,
                               std::chrono::milliseconds max_gap)
    : timeout_(timeout), max_gap_(max_gap), since_(start), seen_(start)
{}

std::optional<std::chrono::milliseconds> stall_detector::observe(const watch_sample& s, watch_clock::time_point now)
{
    const bool was_not_running = std::chrono::duration_cast<std::chrono::milliseconds>(now - seen_) > max_gap_;
    seen_ = now;
    if (s.paused || s.progress != last_ || was_not_running) {
        last_ = s.progress;
        since_ = now;
        return std::nullopt;
    }
    const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(now - since_);
    if (quiet >= timeout_ + s.grace) return quiet;
    return std::nullopt;
}

namespace {

std::string seconds(std::chrono::milliseconds t)
{
    if (t.count() % 1000 == 0) return fmt::format("{} s", t.count() / 1000);
    return fmt::format("{:.1f} s", static_cast<double>(t.count()) / 1000.0);
}

}  // namespace

std::string stall_line(const std::string& task, std::chrono::milliseconds timeout, const ps::activity& a)
{
    std::string waiting, slow = "this task";
    if (!a.waiting) {
        waiting = "not waiting for a peer";
    } else if (a.peer_names.empty()) {
        waiting = fmt::format("waiting for {}", a.request);
    } else {
        slow = fmt::format("{}", fmt::join(a.peer_names, ", "));
        waiting = fmt::format("waiting for {}: {}", slow, a.request);
    }
    return fmt::format(
        "{} made no progress for {}, {}; exiting with status {}, its threads' stacks follow (if {} is only "
        "slow, not hung or stopped, raise --stall-timeout from {})",
        task, seconds(timeout), waiting, stalled_exit_status, slow, timeout.count() / 1000.0);
}

watchdog::watchdog(progress_meter& meter, watchdog_config config) : meter_(meter), cfg_(std::move(config))
{
    if (!cfg_.on_stall) cfg_.on_stall = report_stall_and_exit;
    if (cfg_.poll.count() <= 0)
        cfg_.poll = std::clamp(cfg_.timeout / 10, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
    prepare_stack_dumps();
    thread_ = std::thread([this] { run(); });
}

watchdog::~watchdog()
{
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

watchdog::source::source(watchdog* w, std::function<ps::activity()> read) : w_(w)
{
    if (!w_) return;
    std::lock_guard lock(w_->mutex_);
    w_->read_ = std::move(read);
}

watchdog::source::~source()
{
    if (!w_) return;
    std::lock_guard lock(w_->mutex_);
    if (w_->read_) w_->source_base_ += w_->read_().progress;
    w_->read_ = nullptr;
}

void watchdog::run()
{
    // A look that comes this late means the whole process was stopped.
    stall_detector detector(cfg_.timeout, watch_clock::now(), 3 * cfg_.poll + std::chrono::seconds(2));
    std::unique_lock lock(mutex_);
    while (!stop_) {
        wake_.wait_for(lock, cfg_.poll);
        if (stop_) return;
        const auto a = read_ ? read_() : ps::activity{};
        watch_sample s;
        s.progress = meter_.ticks() + source_base_ + a.progress;
        s.paused = meter_.busy_with() != nullptr || a.ending || a.idle;
        if (a.waiting) s.grace = cfg_.waiting_grace;
        if (detector.observe(s, watch_clock::now())) {
            fired_ = true;
            const auto line = stall_line(cfg_.task, cfg_.timeout, a);
            lock.unlock();
            cfg_.on_stall(line);
            return;
        }
    }
}

void report_stall_and_exit(const std::string& line)
{
    log::error("{}", line);
    auto stacks = all_thread_stacks();
    if (!stacks.empty() && stacks.back() == '\n') stacks.pop_back();
    log::write(log::level::error, stacks);
    ::_exit(stalled_exit_status);
}

}  // namespace pstrain::trainer
