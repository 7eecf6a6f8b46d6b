// Heartbeats between a task and its peers: who has been silent too long.
//
// Every `interval` a task sends each peer a small message; a peer from
// which nothing came for `interval * misses` while this task was listening
// is silent (its node fell off the network or crashed, or the process is
// stopped): the transport then reports it failed, naming how long it has
// been silent.  UCX's own failure detection does not see a node that
// vanishes without closing its connections: the TCP segments queued for it
// are retransmitted for many minutes first.  A peer is watched from its
// first heartbeat on: a task sends its first one when it first waits on the
// transport, so a worker that loads its data after connecting is not taken
// for silent meanwhile.  No UCX here: the bookkeeping is testable on its own.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace pstrain::ucx {

using hb_clock = std::chrono::steady_clock;

struct heartbeat_config {
    std::chrono::milliseconds interval{5000};  // 0: no heartbeats (UCX's error detection only)
    int misses = 6;                            // intervals without a word before a peer is silent
    std::chrono::milliseconds limit() const { return interval * misses; }
    bool enabled() const { return interval.count() > 0; }
};

class silence_tracker {
public:
    silence_tracker(std::size_t peers, heartbeat_config c, hb_clock::time_point now);

    // Something (a heartbeat) came from `peer`; the first time, the peer is
    // watched from then on.
    void heard(std::size_t peer, hb_clock::time_point now);
    // A new process took `peer`'s place: not silent, watched once heard.
    void replaced(std::size_t peer, hb_clock::time_point now);
    // Called whenever this task listens: returns the peers found silent
    // now (each once).  Time in which this task did not listen (longer than
    // an interval between two calls: it computed or wrote a checkpoint)
    // does not count against its peers, whose messages waited meanwhile.
    std::vector<std::size_t> check(hb_clock::time_point now);
    // True when a round of heartbeats is due (then not again for an interval).
    bool beat_due(hb_clock::time_point now);

    bool silent(std::size_t peer) const { return silent_.at(peer); }
    // How long `peer` had been silent when it was found so.
    std::chrono::milliseconds silent_for(std::size_t peer) const { return silent_for_.at(peer); }
    const heartbeat_config& config() const { return cfg_; }

private:
    heartbeat_config cfg_;
    std::vector<hb_clock::time_point> last_heard_;
    std::vector<bool> silent_;
    std::vector<bool> watched_;
    std::vector<std::chrono::milliseconds> silent_for_;
    hb_clock::time_point last_check_, next_beat_;
};

// The reason a silent peer failed: "silent for 31 s (heartbeats every 5 s;
// address 10.251.0.11): its node is unreachable or down, or the task is
// stopped; raise --heartbeat-interval if ...".  `address` may be empty.
std::string silence_reason(std::chrono::milliseconds silent_for, const heartbeat_config& c, const std::string& address);

}  // namespace pstrain::ucx
