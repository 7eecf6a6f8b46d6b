// Records what a client or server waits for, for client::activity() and
// server::activity(), which other threads call.  The owner thread writes
// (a counter, a few words under an uncontended lock, one flag per peer);
// the text is made only when someone asks.
#pragma once

#include "pstrain/activity.hpp"
#include "pstrain/transport.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace pstrain::ps {

// How a transport names each of its peers, in order.
inline std::vector<std::string> peer_names(const transport& net)
{
    std::vector<std::string> names;
    for (std::size_t p = 0; p < net.num_peers(); ++p) names.push_back(net.peer_name(p));
    return names;
}

class activity_recorder {
public:
    explicit activity_recorder(std::vector<std::string> peer_names)
        : names_(std::move(peer_names)), pending_(std::make_unique<std::atomic<bool>[]>(names_.size()))
    {}

    void progressed() { progress_.fetch_add(1, std::memory_order_relaxed); }
    // A spare's wait for a lost PS (activity::idle).
    void set_idle(bool idle) { idle_.store(idle, std::memory_order_relaxed); }

    // A wait begins: for `what` (a string literal), of `step` when has_step.
    // The peers waited for are marked with pending() afterwards.
    void begin(const char* what, std::uint64_t step = 0, bool has_step = false, bool ending = false)
    {
        std::lock_guard lock(mutex_);
        what_ = what;
        step_ = step;
        has_step_ = has_step;
        ending_ = ending;
        waiting_ = true;
    }
    void pending(std::size_t peer, bool waited_for) { pending_[peer].store(waited_for, std::memory_order_relaxed); }
    // The wait is over.
    void end()
    {
        std::lock_guard lock(mutex_);
        waiting_ = false;
        ending_ = false;
        for (std::size_t p = 0; p < names_.size(); ++p) pending_[p].store(false, std::memory_order_relaxed);
    }

    activity snapshot() const
    {
        activity a;
        a.progress = progress_.load(std::memory_order_relaxed);
        a.idle = idle_.load(std::memory_order_relaxed);
        std::lock_guard lock(mutex_);
        a.waiting = waiting_;
        a.ending = ending_;
        if (!waiting_) return a;
        a.request = has_step_ ? fmt::format("{} (global step {})", what_, step_) : std::string(what_);
        for (std::size_t p = 0; p < names_.size(); ++p)
            if (pending_[p].load(std::memory_order_relaxed)) {
                a.peers.push_back(p);
                a.peer_names.push_back(names_[p]);
            }
        return a;
    }

    // A wait for the duration of a scope.
    class scope {
    public:
        scope(activity_recorder& r, const char* what, std::uint64_t step = 0, bool has_step = false,
              bool ending = false)
            : r_(r)
        {
            r_.begin(what, step, has_step, ending);
        }
        ~scope() { r_.end(); }
        scope(const scope&) = delete;
        scope& operator=(const scope&) = delete;

    private:
        activity_recorder& r_;
    };

    // Ends the wait begun before it, when the scope ends.
    class ender {
    public:
        explicit ender(activity_recorder& r) : r_(r) {}
        ~ender() { r_.end(); }
        ender(const ender&) = delete;
        ender& operator=(const ender&) = delete;

    private:
        activity_recorder& r_;
    };

private:
    const std::vector<std::string> names_;
    std::unique_ptr<std::atomic<bool>[]> pending_;
    std::atomic<std::uint64_t> progress_{0};
    std::atomic<bool> idle_{false};
    mutable std::mutex mutex_;
    const char* what_ = "";
    std::uint64_t step_ = 0;
    bool has_step_ = false, ending_ = false, waiting_ = false;
};

}  // namespace pstrain::ps
