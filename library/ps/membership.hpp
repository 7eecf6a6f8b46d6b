// Who trains on one PS: the worker slots, the workers among them that
// count as live, sync's gradients per step (the replicas wanted, fewer
// when an elastic job has fewer live workers), a new process in a lost
// worker's place or in room kept for one, and the verdict on a lost worker:
// go on (logged), or end the job with the line that says why.
//
// Live, the one definition (worker_link::live()): a worker counts from the
// start (one that starts with the job) or from the welcome of its hello (a
// new process in a lost one's place, or in room kept for one) until it is
// lost or leaves.  The values replies announce this count as live_workers,
// and sync's gradients per step and the verdicts count the same workers.
// A link that is not lost (worker_link::lost) still has a process to hear
// from; its hello may be pending, and then it is not live yet.
//
// It tells the dense step (dense_step::set_replicas, release_held) when
// the gradients per step change or a worker goes, and the staleness bound
// (staleness_bound::lost, back) which workers are the slowest's peers.
//
// Used by the server's thread only.
#pragma once

#include "pstrain/server.hpp"
#include "library/ps/server_state.hpp"
#include "library/ps/staleness_bound.hpp"
#include "library/ps/worker_link.hpp"

#include <cstdint>
#include <string>
#include <utility>

namespace pstrain::ps {

class dense_step;

class membership {
public:
    // The slots from cfg.started_workers on (room for workers that join an
    // elastic job later) start lost.  `cfg` and `state` are the server's;
    // its training settings may change until configure().
    membership(transport& net, worker_links& links, staleness_bound& bound, const server_config& cfg,
               const training_state& state);

    // The training settings are in force (the server's own, or the
    // chief's): sync's gradients per step, no more than the live workers
    // when elastic, and async's staleness bound.
    void configure();
    // The dense step to tell from now on (made once the shard is).
    void tell(dense_step& dense) { dense_ = &dense; }

    std::size_t slots() const { return links_.size(); }
    int live() const { return links_.live(); }
    // Sync: the gradients a step aggregates now.
    int replicas() const { return replicas_; }
    // Sync: the gradients per step the settings ask for (0 there: every slot).
    int replicas_wanted() const;

    // A new process took lost worker i's place: its link starts over, and
    // its hello says whether it may stay (admit, welcomed).
    void back(std::size_t i);
    // Its hello: false when the job is not elastic (the refusal sent and
    // logged, the slot lost again).
    bool admit(std::size_t i);
    // Its hello was welcomed: a new process is live from now on (sync: a
    // step aggregates its gradient again; async: its clock starts level
    // with the slowest worker's).
    void welcomed(std::size_t i);
    // Worker i's program ended and said so (never the chief's): not a loss.
    void left(std::size_t i);
    // Worker i was lost: training goes on without it (logged), or throws
    // pstrain::peer_error saying why it cannot, once every live worker was
    // told (worker_links::abort_all).
    void lost(std::size_t i);

    // The start-up line's words: sync's aggregation, or async's bound.
    std::string pace_words() const;
    std::string bound_words() const { return bound_.words(); }

private:
    bool new_worker(std::size_t i) const;
    void went(std::size_t i);
    std::pair<int, std::uint64_t> aggregate_the_live_workers();

    transport& net_;
    worker_links& links_;
    staleness_bound& bound_;
    const server_config& cfg_;
    const training_state& state_;
    dense_step* dense_ = nullptr;
    int replicas_ = 0;  // sync: gradients per step (configure())
};

}  // namespace pstrain::ps
