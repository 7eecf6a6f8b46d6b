// Async mode's stale synchronous parallel on one PS: each worker's clock
// (the pushes this PS applied from it), and the replies held because a
// push put its worker more than max_staleness pushes ahead of the slowest
// live worker.  The dense step tells it of each applied push and asks
// whether to hold the reply; after each push, loss and shutdown the held
// replies that may go are released (all of them once training has ended).
// Every PS applies the rule on its own: each worker pushes to every PS,
// so their clocks agree.  Which workers are lost and back, and the bound
// the settings ask for, membership tells it (membership.hpp).
//
// Used by the server's thread only, but counters(), which any thread may call.
#pragma once

#include "pstrain/partition.hpp"
#include "pstrain/server.hpp"
#include "library/ps/worker_link.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pstrain::ps {

class staleness_bound {
public:
    // Without a bound (negative) no reply is held; the clocks still count.
    staleness_bound(std::size_t workers, int max_staleness);

    // The bound, when the chief's settings bring it.
    void set_bound(int max_staleness) { bound_ = max_staleness; }
    bool bounded() const { return bound_ >= 0; }
    // The bound in words, for the start-up lines ("" without one).
    std::string words() const;

    // Worker i's push was applied: true when its reply must wait, for it is
    // now more than the bound ahead of the slowest live worker.  O(1) but
    // once a round (when the last of the slowest moves on): every async
    // push comes here, bound or not.
    bool pushed(std::size_t i);
    // Worker i was lost: it no longer counts as the slowest.
    void lost(std::size_t i);
    // A new process took lost worker i's place: it starts level with the
    // slowest live worker (it holds no one back, and is not held).
    void back(std::size_t i);
    // Worker i's reply (of `part`, into its mapped buffer when `shared`) waits.
    void hold(std::size_t i, shard_range part, bool shared);
    // The held replies whose workers are back within the bound (`all`:
    // every one) go to reply(worker, part, shared); those of lost workers
    // are dropped.
    using reply_fn = std::function<void(std::size_t worker, shard_range part, bool shared)>;
    void release(const worker_links& links, bool all, const reply_fn& reply);

    // A reply is held, and whether worker i is one of the slowest live workers.
    bool holding() const { return counters_.held_now > 0; }
    bool slowest(std::size_t i) const { return !gone_[i] && clocks_[i] == slowest_; }

    staleness_counters counters() const;

private:
    struct held_reply {
        bool held = false;
        shard_range part;
        bool shared = false;
        clock::time_point since;
    };

    // slowest_ and at_slowest_ from the clocks of the live workers.
    void find_slowest();

    int bound_;
    std::vector<std::uint64_t> clocks_;  // per worker: the pushes this PS applied
    std::vector<bool> gone_;             // per worker: lost
    std::uint64_t slowest_ = 0;          // the smallest clock of a live worker
    std::size_t at_slowest_;             // live workers at slowest_
    std::vector<held_reply> held_;       // per worker
    struct {
        std::atomic<std::uint64_t> largest_lead{0}, replies_held{0}, held_now{0}, held_ns{0};
    } counters_;
};

}  // namespace pstrain::ps
