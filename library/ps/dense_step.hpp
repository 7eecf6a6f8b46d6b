// The dense part of training on one PS: a worker's push of a gradient and
// the values it gets back.  Async, each gradient is applied on arrival
// (and, with a staleness bound, the reply of a worker too far ahead of the
// slowest waits: staleness_bound.hpp).
// Sync, a step aggregates exactly replicas_to_aggregate gradients of the
// current step (a stale one is dropped, with its batch's row updates), in
// buckets: a push is of the whole shard or of a bucket, a range of it that
// every worker pushes alike (the overlapped step pushes each bucket as
// backward produces it).  Each push adds a contribution to its bucket, and
// the one that completes a bucket passes them all, in worker order, to the
// bucket's mean and its replies, at once: the bucket's new values go back
// while the rest of the step is still coming.  The bucket that completes
// the step's cover of the shard also passes them to the row updates, and
// advances the global step; every bucket of a step applies the same
// optimizer update (Adam's bias correction), so a bucketed step's values
// are those of a whole-shard push, bit for bit.  The replies of a step's
// earlier buckets say the step it becomes.  Async, every applied update
// advances the global step: a whole push, or a worker's overlapped step,
// whose buckets (wire::push::bucket) are each applied on arrival and
// answered at once, all of them as the one optimizer update that a whole
// push is; the step counts (the global step, the worker's counters, the
// staleness bound, which holds its last bucket's reply) once its buckets
// cover the shard.  A push that says skip (the worker found inf
// or NaN: wire::push::skip) is applied nowhere: async, that push; sync,
// its whole step (no update, no row update, the global step stays, every
// contributor gets the values as they are), so that every worker skips it
// alike: a worker that skips pushes every bucket of its step with skip,
// and a bucket with a skip applies nothing (request_check refuses a skip
// once a bucket of the step is applied).
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
#include <optional>
#include <span>
#include <vector>

namespace pstrain::ps {

// Sync: a gradient waiting in the step being aggregated.
struct contribution {
    std::size_t worker = 0;
    bool shared = false;         // in the worker's mapped buffer
    std::uint64_t position = 0;  // the worker's data position once the step is applied
    bool skip = false;           // the worker found inf or NaN: the step is skipped
};

// Sync: a bucket of the current step and its contributions, in worker order.
struct bucket {
    shard_range part;
    std::vector<contribution> from;
};

// Async: a worker's overlapped step on this shard, as far as its buckets came.
struct async_step {
    std::uint64_t process = 0;       // the worker's process it is of (worker_link::process)
    std::vector<shard_range> parts;  // its buckets so far
    std::uint64_t covered = 0;       // the elements they cover
    std::uint64_t update = 0;        // the optimizer update they apply (0: none applied yet)
    std::uint64_t step = 0;          // the global step of the values it was computed on (its first bucket's)
    bool skip = false;               // a bucket of it said skip
    bool hold = false;               // the step before, cut short, put the worker beyond the staleness bound

    // The next step (keeps the storage).
    void restart()
    {
        parts.clear();
        covered = 0;
        update = 0;
        skip = false;
        hold = false;
    }
};

class dense_step {
public:
    dense_step(worker_links& links, served_shard& shard, sparse_service& sparse, training_state& state,
               server_clock& profile, activity_recorder& activity, const server_hooks& hooks, bool sync, int replicas,
               staleness_bound* bound = nullptr);

    // A push, checked by check_request (sync: whole shards or buckets
    // alike on every worker).
    void on_push(std::size_t i, const wire::push& m);
    // The values of `part` to worker i, with the PS's step (or `step`) and
    // `status` (done or stopped once training has ended).
    void reply_values(std::size_t i, shard_range part, bool shared, wire::values_status status,
                      std::optional<std::uint64_t> step = std::nullopt);
    // Sync: from now on a step aggregates `replicas` gradients (membership:
    // elastic training lost or took back a worker, or one left); a step that
    // has that many already is applied now.
    void set_replicas(int replicas);
    // Sync: the gradients waiting for a step that will not come are
    // answered, and the step starts over (a rollback restores the shard).
    void answer_waiting();
    // Async with a staleness bound: the held replies that may go now (all
    // of them once training has ended; none to lost workers) are sent.
    void release_held();

    // Sync: the gradients (of whole shards or buckets) waiting in the
    // current step; whether it has begun (a gradient came, or a bucket is
    // applied); whether worker i's push waits in it.
    std::size_t contributions() const;
    bool step_begun() const;
    bool step_applied() const;  // a bucket of the current step is applied (a skip can no longer come)
    bool contributed(std::size_t i) const;
    // Sync: the ranges of the current step's buckets, pending and applied
    // (empty: nothing pushed to it yet).
    std::span<const shard_range> step_buckets() const { return buckets_; }

private:
    void apply_now(std::size_t i, const wire::push& m, shard_range part, bool shared);
    void apply_bucket_now(std::size_t i, const wire::push& m, shard_range part, bool shared);
    async_step& async_step_of(std::size_t i);
    bool count_async_step(std::size_t i, std::uint64_t step, bool skipped);
    void answer_async(std::size_t i, shard_range part, bool shared, bool hold);
    void drop_stale(std::size_t i, const wire::push& m, shard_range part, bool shared);
    bool applied_in_this_step(shard_range part) const;
    void contribute(std::size_t i, const wire::push& m, shard_range part, bool shared);
    std::vector<bucket>::iterator open_bucket(shard_range part);
    void complete_buckets();
    void complete_bucket(std::size_t k);
    void skip_step(const std::vector<contribution>& step);
    void apply_bucket(const bucket& b);
    void end_step();
    void answer(const bucket& b, std::uint64_t step);
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
    staleness_bound* bound_;  // async: the clocks and held replies (none: never held)
    // Sync: the current step.
    std::vector<bucket> pending_;       // its buckets short of gradients
    std::vector<shard_range> buckets_;  // the ranges of its buckets, pending and applied
    std::uint64_t covered_ = 0;         // elements of the shard its applied buckets cover
    std::uint64_t update_ = 0;          // the optimizer update its buckets apply (0: none applied yet)
    bool skipping_ = false;             // a bucket of it said skip: none of its buckets is applied
    bucket applying_;                   // the bucket being applied and answered
    std::vector<std::vector<contribution>> spare_lists_;  // storage of earlier buckets, for the next ones
    // Async: each worker's overlapped step.
    std::vector<async_step> async_steps_;
    // Scratch of a step (kept: no allocation per step).
    std::vector<std::size_t> workers_;
    std::vector<const float*> grads_;
    std::vector<float*> copies_;
};

}  // namespace pstrain::ps
