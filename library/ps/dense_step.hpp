// The dense part of training on one PS: a worker's push of a gradient and
// the values it gets back.  Async, each gradient is applied on arrival
// (and, with a staleness bound, the reply of a worker too far ahead of the
// slowest waits: staleness_bound.hpp).
// Sync, a step aggregates exactly replicas_to_aggregate gradients of the
// current step (a stale one is dropped, with its batch's row updates):
// each push adds a contribution, and the one that completes the step
// passes them all, in worker order, to the row updates, the shard's mean
// and the replies.  Every applied update advances the global step.  A push
// that says skip (the worker found inf or NaN: wire::push::skip) is
// applied nowhere: async, that push; sync, its whole step (no update, no
// row update, the global step stays, every contributor gets the values as
// they are), so that every worker skips it alike.
//
// Used by the server's thread only.
#pragma once

#include "pstrain/server.hpp"
#include "library/ps/activity_recorder.hpp"
#include "library/ps/protocol.hpp"
#include "library/ps/served_shard.hpp"
#include "library/ps/server_state.hpp"
#include "library/ps/sparse_service.hpp"
#include "library/ps/staleness_bound.hpp"
#include "library/ps/worker_link.hpp"

#include <cstdint>
#include <vector>

namespace pstrain::ps {

// Sync: a gradient waiting in the step being aggregated.
struct contribution {
    std::size_t worker = 0;
    bool shared = false;         // in the worker's mapped buffer
    std::uint64_t position = 0;  // the worker's data position once the step is applied
    bool skip = false;           // the worker found inf or NaN: the step is skipped
};

class dense_step {
public:
    dense_step(worker_links& links, served_shard& shard, sparse_service& sparse, training_state& state,
               server_clock& profile, activity_recorder& activity, const server_hooks& hooks, bool sync, int replicas,
               staleness_bound* bound = nullptr);

    // A push, checked by check_request (sync: of the whole shard).
    void on_push(std::size_t i, const wire::push& m);
    // The values of `part` to worker i, with the PS's step and `status`
    // (done or stopped once training has ended).
    void reply_values(std::size_t i, shard_range part, bool shared, wire::values_status status);
    // Sync: from now on a step aggregates `replicas` gradients (membership:
    // elastic training lost or took back a worker, or one left); a step that
    // has that many already is applied now.
    void set_replicas(int replicas);
    // Sync: the gradients waiting for a step that will not come are answered.
    void answer_waiting() { answer(take_contributions()); }
    // Async with a staleness bound: the held replies that may go now (all
    // of them once training has ended; none to lost workers) are sent.
    void release_held();

    // Sync: gradients the current step has, and whether worker i gave one.
    std::size_t contributions() const { return waiting_.size(); }
    bool contributed(std::size_t i) const;

private:
    void apply_now(std::size_t i, const wire::push& m, shard_range part, bool shared);
    void contribute(std::size_t i, const wire::push& m, bool shared);
    void complete_step();
    void skip_step(const std::vector<contribution>& step);
    const std::vector<contribution>& take_contributions();
    void apply_step(const std::vector<contribution>& step);
    void answer(const std::vector<contribution>& step);
    std::span<const float> gradient(std::size_t i, shard_range part, bool shared) const;
    void advance();

    worker_links& links_;
    served_shard& shard_;
    sparse_service& sparse_;
    training_state& state_;
    server_clock& profile_;
    activity_recorder& activity_;
    const server_hooks& hooks_;
    const bool sync_;
    int replicas_;
    staleness_bound* bound_;              // async: the clocks and held replies (none: never held)
    std::vector<contribution> waiting_;   // sync: the current step's, in worker order
    std::vector<contribution> applying_;  // sync: the step being applied and answered
    // Scratch of a step (kept: no allocation per step).
    std::vector<std::size_t> workers_;
    std::vector<const float*> grads_;
    std::vector<float*> copies_;
};

}  // namespace pstrain::ps
