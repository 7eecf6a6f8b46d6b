// The stall watchdog (--stall-timeout): a task that makes no progress for
// that long says so in one line (which task, for how long, which peer it
// waits for and for what), writes every thread's stack, and exits with
// status 124, rather than holding its allocation until the time limit.
//
// Progress is any of: the task's progress_meter ticks (a worker's training
// steps, the end of a busy stretch), or the PS library's activity().progress
// grows (a client's replies, a server's requests handled and steps
// applied).  Not stalls: the task's own long work, inside a
// progress_meter::busy scope (loading data, evaluating, reading or writing
// a checkpoint), and a server's end of job (activity().ending, bounded by
// the library itself).  Waiting on a peer is one.
#pragma once

#include "pstrain/activity.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace pstrain::trainer {

inline constexpr int stalled_exit_status = 124;  // as timeout(1) exits for a command that ran out of time

using watch_clock = std::chrono::steady_clock;

// What the task reports of itself.  Its methods are safe from any thread.
class progress_meter {
public:
    void tick() { ticks_.fetch_add(1, std::memory_order_relaxed); }
    std::uint64_t ticks() const { return ticks_.load(std::memory_order_relaxed); }
    // What the task is busy with (a busy scope is open), else nullptr.
    const char* busy_with() const { return depth_.load() > 0 ? what_.load() : nullptr; }

    // A busy stretch longer than this logs a warning: peers that wait for
    // this task meanwhile count it as a stall.  0 (the default): never.
    void warn_busy_after(std::chrono::milliseconds t, int stall_timeout_seconds)
    {
        warn_after_ms_.store(t.count());
        stall_timeout_ = stall_timeout_seconds;
    }

    // The task's own long work: the watchdog's clock stands still while it
    // lasts, and its end counts as progress.
    class busy {
    public:
        busy(progress_meter& m, const char* what) : m_(m), what_(what), start_(watch_clock::now())
        {
            m_.what_.store(what);
            m_.depth_.fetch_add(1);
        }
        ~busy();
        busy(const busy&) = delete;
        busy& operator=(const busy&) = delete;

    private:
        progress_meter& m_;
        const char* what_;
        watch_clock::time_point start_;
    };

private:
    std::atomic<std::int64_t> warn_after_ms_{0};
    std::atomic<int> stall_timeout_{0};
    std::atomic<std::uint64_t> ticks_{0};
    std::atomic<int> depth_{0};
    std::atomic<const char*> what_{nullptr};
};

// One look at the task.
struct watch_sample {
    std::uint64_t progress = 0;          // grows with progress (any counter)
    bool paused = false;                 // busy with its own work, or in a bounded end of job
    std::chrono::milliseconds grace{0};  // more quiet than `timeout` allowed now (see watchdog_config)
};

// The decision, on the caller's clock: a stall is `timeout` of unchanged
// progress without a pause.  A pause restarts the count, and so does a gap
// of more than `max_gap` between two looks: the process itself was not
// running (SIGSTOP, `scontrol suspend`), which is no stall of its peers.
class stall_detector {
public:
    stall_detector(std::chrono::milliseconds timeout, watch_clock::time_point start,
                   std::chrono::milliseconds max_gap = std::chrono::milliseconds::max());
    // How long the task has gone without progress, when that is a stall.
    std::optional<std::chrono::milliseconds> observe(const watch_sample& s, watch_clock::time_point now);

private:
    std::chrono::milliseconds timeout_, max_gap_;
    std::uint64_t last_ = 0;
    watch_clock::time_point since_, seen_;
};

// The one line: "worker 1 (n2) made no progress for 300 s, waiting for ps 0
// (n1): the reply to push (global step 42); exiting with status 124 ...".
std::string stall_line(const std::string& task, std::chrono::milliseconds timeout, const ps::activity& a);

struct watchdog_config {
    std::chrono::milliseconds timeout{std::chrono::seconds(300)};
    std::string task;  // how the line names the task: "worker 1 (n2)"
    // On a stall, with the line; default: log it and every thread's stack,
    // then _exit(stalled_exit_status) (no destructors: a transport whose
    // peer hangs could block them).
    std::function<void(const std::string& line)> on_stall;
    std::chrono::milliseconds poll{0};  // how often it looks; 0: timeout / 10, at most 1 s
    // More time before a wait on peers counts as a stall.  A sync worker
    // gets some: when a worker of a sync step stops, the PS and the other
    // workers go quiet together, and the PS, which knows whose gradient is
    // missing, is the one to name it.
    std::chrono::milliseconds waiting_grace{0};
};

// A thread that watches `meter` and, while a `source` lives, the PS
// library's activity (what counts as progress: the top of this file); when
// neither moves for config.timeout it calls config.on_stall, once.
class watchdog {
public:
    watchdog(progress_meter& meter, watchdog_config config);
    ~watchdog();
    watchdog(const watchdog&) = delete;
    watchdog& operator=(const watchdog&) = delete;

    // While a `source` lives, the watchdog also reads the PS client's or
    // server's activity (progress, and what a stall waits for).  Destroy it
    // before the client or server.
    class source {
    public:
        source(watchdog* w, std::function<ps::activity()> read);
        ~source();
        source(const source&) = delete;
        source& operator=(const source&) = delete;

    private:
        watchdog* w_;
    };

    // For tests: the stall was seen (on_stall was called).
    bool fired() const { return fired_.load(); }

private:
    void run();

    progress_meter& meter_;
    watchdog_config cfg_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stop_ = false;
    std::function<ps::activity()> read_;  // under mutex_
    std::uint64_t source_base_ = 0;       // progress of sources gone, so the sum never goes back
    std::atomic<bool> fired_{false};
    std::thread thread_;
};

// The default on_stall: the line, every thread's stack, _exit(124).
[[noreturn]] void report_stall_and_exit(const std::string& line);

}  // namespace pstrain::trainer
