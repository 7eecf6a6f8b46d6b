#include "library/ps/staleness_bound.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace pstrain::ps {

staleness_bound::staleness_bound(std::size_t workers, int max_staleness)
    : bound_(max_staleness), clocks_(workers, 0), gone_(workers, false), at_slowest_(workers), held_(workers)
{}

bool staleness_bound::pushed(std::size_t i)
{
    const bool last_of_the_slowest = !gone_[i] && clocks_[i] == slowest_ && --at_slowest_ == 0;
    ++clocks_[i];
    if (last_of_the_slowest) find_slowest();
    const auto lead = clocks_[i] - std::min(clocks_[i], slowest_);
    if (lead > counters_.largest_lead) counters_.largest_lead = lead;
    return bounded() && lead > static_cast<std::uint64_t>(bound_);
}

std::string staleness_bound::words() const
{
    if (!bounded()) return "";
    return fmt::format(" (a worker at most {} pushes ahead of the slowest)", bound_);
}

void staleness_bound::lost(std::size_t i)
{
    if (gone_[i]) return;
    gone_[i] = true;
    if (clocks_[i] == slowest_ && --at_slowest_ == 0) find_slowest();
}

void staleness_bound::back(std::size_t i)
{
    if (!gone_[i]) return;
    gone_[i] = false;
    if (held_[i].held) {  // the lost one's reply, not yet dropped by release()
        held_[i].held = false;
        --counters_.held_now;
    }
    find_slowest();
    clocks_[i] = at_slowest_ > 0 ? slowest_ : clocks_[i];
    find_slowest();
}

void staleness_bound::hold(std::size_t i, shard_range part, bool shared)
{
    held_[i] = held_reply{true, part, shared, clock::now()};
    ++counters_.replies_held;
    ++counters_.held_now;
}

void staleness_bound::release(const worker_links& links, bool all, const reply_fn& reply)
{
    if (!holding()) return;
    for (std::size_t i = 0; i < held_.size(); ++i) {
        auto& h = held_[i];
        if (!h.held || !(all || links[i].lost || clocks_[i] - slowest_ <= static_cast<std::uint64_t>(bound_))) continue;
        h.held = false;
        --counters_.held_now;
        counters_.held_ns += static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - h.since).count());
        if (!links[i].lost) reply(i, h.part, h.shared);
    }
}

staleness_counters staleness_bound::counters() const
{
    return {bound_, counters_.largest_lead, counters_.replies_held, counters_.held_now,
            std::chrono::nanoseconds(counters_.held_ns)};
}

void staleness_bound::find_slowest()
{
    slowest_ = std::numeric_limits<std::uint64_t>::max();
    at_slowest_ = 0;
    for (std::size_t i = 0; i < clocks_.size(); ++i) {
        if (gone_[i]) continue;
        if (clocks_[i] < slowest_) slowest_ = clocks_[i], at_slowest_ = 0;
        if (clocks_[i] == slowest_) ++at_slowest_;
    }
}

}  // namespace pstrain::ps
