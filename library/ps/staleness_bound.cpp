#include "library/ps/staleness_bound.hpp"

#include <algorithm>
#include <limits>

namespace pstrain::ps {

staleness_bound::staleness_bound(std::size_t workers, int max_staleness)
    : bound_(max_staleness), clocks_(workers, 0), held_(workers)
{}

bool staleness_bound::pushed(std::size_t i, const worker_links& links)
{
    const auto lead = ++clocks_[i] - std::min(clocks_[i], slowest_clock(links));
    if (lead > counters_.largest_lead) counters_.largest_lead = lead;
    return bounded() && lead > static_cast<std::uint64_t>(bound_);
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
    const auto slowest = slowest_clock(links);
    for (std::size_t i = 0; i < held_.size(); ++i) {
        auto& h = held_[i];
        if (!h.held || !(all || links[i].lost || clocks_[i] - slowest <= static_cast<std::uint64_t>(bound_))) continue;
        h.held = false;
        --counters_.held_now;
        counters_.held_ns += static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - h.since).count());
        if (!links[i].lost) reply(i, h.part, h.shared);
    }
}

bool staleness_bound::slowest(std::size_t i, const worker_links& links) const
{
    return !links[i].lost && clocks_[i] == slowest_clock(links);
}

staleness_counters staleness_bound::counters() const
{
    return {counters_.largest_lead, counters_.replies_held, counters_.held_now,
            std::chrono::nanoseconds(counters_.held_ns)};
}

// The smallest clock of the live workers (a lost one no longer counts).
std::uint64_t staleness_bound::slowest_clock(const worker_links& links) const
{
    auto slowest = std::numeric_limits<std::uint64_t>::max();
    for (std::size_t i = 0; i < clocks_.size(); ++i)
        if (!links[i].lost) slowest = std::min(slowest, clocks_[i]);
    return slowest;
}

}  // namespace pstrain::ps
