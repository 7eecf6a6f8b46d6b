#include "library/transport/heartbeat.hpp"

#include <fmt/format.h>

namespace pstrain::ucx {

silence_tracker::silence_tracker(std::size_t peers, heartbeat_config c, hb_clock::time_point now)
    : cfg_(c), last_heard_(peers, now), silent_(peers, false), watched_(peers, false),
      silent_for_(peers, std::chrono::milliseconds(0)), last_check_(now), next_beat_(now)
{}

void silence_tracker::heard(std::size_t peer, hb_clock::time_point now)
{
    if (peer >= last_heard_.size()) return;
    if (!watched_[peer] || now > last_heard_[peer]) last_heard_[peer] = now;
    watched_[peer] = true;
}

void silence_tracker::replaced(std::size_t peer, hb_clock::time_point now)
{
    if (peer >= last_heard_.size()) return;
    last_heard_[peer] = now;
    silent_[peer] = false;
    watched_[peer] = false;
    silent_for_[peer] = std::chrono::milliseconds(0);
}

std::vector<std::size_t> silence_tracker::check(hb_clock::time_point now)
{
    std::vector<std::size_t> found;
    if (!cfg_.enabled() || now <= last_check_) return found;
    const auto gap = now - last_check_;
    last_check_ = now;
    if (gap > cfg_.interval) {
        // Not listening meanwhile: what the peers sent waits to be received.
        for (auto& t : last_heard_) t += gap;
        return found;
    }
    for (std::size_t i = 0; i < last_heard_.size(); ++i) {
        if (!watched_[i] || silent_[i] || now - last_heard_[i] < cfg_.limit()) continue;
        silent_[i] = true;
        silent_for_[i] = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard_[i]);
        found.push_back(i);
    }
    return found;
}

bool silence_tracker::beat_due(hb_clock::time_point now)
{
    if (!cfg_.enabled() || now < next_beat_) return false;
    next_beat_ = now + cfg_.interval;
    return true;
}

std::string silence_reason(std::chrono::milliseconds silent_for, const heartbeat_config& c, const std::string& address)
{
    const auto secs = [](std::chrono::milliseconds d) {
        return d.count() % 1000 == 0 ? fmt::format("{}", d.count() / 1000) : fmt::format("{:.1f}", d.count() / 1000.0);
    };
    return fmt::format(
        "silent for {} s (heartbeats every {} s{}): its node is unreachable or down, or the task is "
        "stopped; raise --heartbeat-interval if tasks compute or write for more than {} s without a word",
        (silent_for.count() + 500) / 1000, secs(c.interval),
        address.empty() ? "" : fmt::format(", address {}", address), secs(c.limit()));
}

}  // namespace pstrain::ucx
