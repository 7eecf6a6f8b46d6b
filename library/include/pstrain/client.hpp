// A worker's side of the parameter server: push gradients and pull values
// by range of the flat vector (or by tensor: the k-th of the tensors the
// client was given), and embedding rows by key.
//
// Two kinds of call, told apart by their names: the async_ ones (pushes,
// pulls, rows) start a request and return a ticket at once, and wait(ticket)
// completes it; the others (wait, step, stats, and the chief's snapshot and
// shutdown) return when the answers are in.
//
// The client owns two exchange buffers of the whole flat vector: params(),
// where values arrive, and grads(), which pushes send.  A PS on the same
// host maps them and works in place; others get messages.  Between a call
// and its wait(), the range it names in these buffers belongs to the
// library: read or write it only after wait().
//
// The calls that start, save and end the job (async_init, async_restore,
// snapshot, shutdown) belong to chief_client, the client that worker 0
// (the chief) makes: a worker's plain client has none of them.
//
// Threads: a client belongs to the thread that calls its verbs; only
// activity() and profile() may be called from any thread.
//
// Errors are pstrain::peer_error exceptions that name the PS (lost, timed
// out, refused the request, or ended training because it lost a task);
// after one, the client is unusable.
#pragma once

#include <pstrain/activity.hpp>
#include <pstrain/error.hpp>
#include <pstrain/profile.hpp>
#include <pstrain/partition.hpp>
#include <pstrain/settings.hpp>
#include <pstrain/transport.hpp>
#include <pstrain/wire_precision.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pstrain::ps {

struct client_config {
    int index = 0;  // this worker's index; worker 0 is the chief
    int num_workers = 1;
    std::uint64_t num_params = 0;  // the flat vector's length
    // Tensor sizes, in order: tensor k is the k-th range of the flat vector.
    // Empty: one tensor, the whole vector.
    std::vector<std::uint64_t> tensor_sizes;
    // Each tensor's kind, in order (empty: all trainable).  The PS runs
    // no optimizer on a moving average (a batch normalization's moving
    // mean or variance): it adds what is pushed for it (sync: the step's
    // average), so a worker pushes (1 - momentum) * (batch value - moving
    // value).  The chief's hello tells the PS tasks.
    enum class tensor_kind : std::uint8_t { trainable, moving_average };
    std::vector<tensor_kind> tensor_kinds;
    std::chrono::seconds timeout{600};  // a PS that does not answer for this long is lost
    bool share_memory = true;           // offer the buffers to PS tasks on this host
    // How errors name worker i ("worker 1 (n2)"); default "worker i".
    std::vector<std::string> worker_names;
    // The embedding tables' dims, in the order of server_config::tables
    // (with settings: empty, or their tables' dims).
    std::vector<std::uint32_t> table_dims;
    // The chief's (index 0) only: the job's training settings, sent in its
    // hello (settings.hpp): PS tasks started without their own adopt them,
    // others check them.  Unset: the PS tasks' own settings rule.
    std::optional<training_settings> settings;
    // What pushes, values and rows travel as (wire_precision.hpp): bf16
    // halves their bytes; the PS tasks keep FP32 master weights.  Every
    // worker of the job must say the same as the PS tasks.
    wire_precision precision = wire_precision::fp32;
    // The job's PS tasks: the transport's first num_ps peers.  The peers
    // after them are spares (server_config::spare): when a PS is lost, one
    // takes its place (replace_lost_ps).  0: every peer is a PS, no spares.
    int num_ps = 0;
};

using ticket = std::uint64_t;

// What a client's calls throw when a PS is lost and a spare can take its
// place: the client goes on once replace_lost_ps() has put the spare
// there.  (Without a spare left, a lost PS is a plain peer_error, and the
// client is unusable.)
class lost_ps : public pstrain::peer_error {
public:
    lost_ps(std::string peer, const std::string& message, std::size_t index, std::uint64_t last_step = 0)
        : peer_error(std::move(peer), message), index_(index), last_step_(last_step)
    {}
    std::size_t index() const { return index_; }  // the lost PS (the first, when several are)
    // The lost PS's step in its last values reply to this client (0: none
    // came): in async training, the updates of its shard since the
    // snapshot a spare restores are lost (at least this step minus the
    // snapshot's).
    std::uint64_t last_step() const { return last_step_; }

private:
    std::size_t index_;
    std::uint64_t last_step_;
};

// One PS's answer to a snapshot request.
struct snapshot_result {
    enum class status { taken, moved_on, failed };
    status outcome = status::failed;
    std::uint64_t step = 0;   // taken: the step; moved_on: the PS's newer step
    std::uint64_t bytes = 0;  // taken: the receipt of the server's snapshot hook
    std::uint64_t checksum = 0;
};

// What one PS has counted since it started: for watching a run.
struct ps_stats {
    std::uint64_t step = 0;            // its global step
    std::uint64_t bytes_received = 0;  // messages, and gradients it read from mapped buffers
    std::uint64_t bytes_sent = 0;      // messages, and values it wrote into mapped buffers
    struct worker {
        std::uint64_t gradients = 0;      // applied (async) or aggregated into a step (sync)
        std::uint64_t stale = 0;          // dropped as stale (sync)
        std::uint64_t staleness_sum = 0;  // over the applied gradients: PS step minus the gradient's step
        std::uint64_t staleness_max = 0;
    };
    std::vector<worker> workers;  // in worker order
};

class client {
public:
    // The transport's peers are the PS tasks.
    client(transport& net, client_config config);
    virtual ~client();
    client(const client&) = delete;
    client& operator=(const client&) = delete;

    std::span<float> params() const;
    std::span<float> grads() const;
    // Both, one after the other (to page-lock them at once).
    std::span<float> buffers() const;

    // The whole vector, and tensor k's range.
    shard_range everything() const;
    shard_range tensor(std::size_t k) const;
    // Which PS holds what.
    const std::vector<shard_range>& partition() const;

    // Values of `range` into params().
    ticket async_pull(shard_range range);
    ticket async_pull() { return async_pull(everything()); }
    // The gradient in grads() of `range`, computed on the values last
    // received; `position` is this worker's place in its data (kept with
    // snapshots).  The reply brings the updated values into params().  In
    // sync mode its reply comes when the step it joined is applied: waiting
    // for it is the step barrier.  A sync push is of whole shards, or of
    // buckets: an overlapped step pushes the gradient range by range as
    // backward produces it (the last layers first), and each PS applies a
    // bucket and answers it with its new values as soon as every worker's
    // gradient of it is in, the whole step's update bit for bit.  Buckets
    // must be the same ranges on every worker, each step issued whole (every
    // bucket of it pushed) before any of its tickets is waited for, and
    // not with backup workers (replicas_to_aggregate below the workers),
    // whose step aggregates whole shards.
    // `skip`: this worker found inf or NaN in the gradient (a loss scaler's
    // overflow), and nothing of it is to be applied.  Sync: the step it
    // joins is skipped on every PS (no update, no row update, the global
    // step stays; its reply brings the values as they are), as a loss
    // scaler skips the optimizer's step, but on every worker alike; a
    // worker that skips a bucketed step pushes every bucket of it with skip
    // (before any bucket of the step can be applied).  Async: this push
    // alone.
    ticket async_push(shard_range range, std::uint64_t position = 0, bool skip = false);
    ticket async_push(std::uint64_t position = 0) { return async_push(everything(), position); }
    // One bucket of an overlapped step: the step's buckets together cover
    // the whole vector, each once.  Sync: as async_push (a sync push is of
    // a step anyway).  Async: each PS applies each bucket on arrival and
    // answers it at once, every bucket of the step as the one optimizer
    // update (Adam's bias correction) that a whole push is, so that a worker
    // alone gets the values of whole pushes bit for bit; the step counts
    // (the global step, the staleness bound, the counters) once its
    // buckets cover the PS's shard.  A bucket that overlaps one of this
    // worker's step begins the next step (the one before counts as it is).
    // `skip`: every bucket of a skipping step says it, and none is applied.
    ticket async_push_bucket(shard_range range, std::uint64_t position = 0, bool skip = false);
    // Sparse: the rows of `keys` of embedding table `table` into
    // out[i * dim ...]; each key goes to the PS shard_of_key names (keys may
    // repeat, but deduplicate() first saves bytes).  `keys` may change after
    // the call; `out` belongs to the library until wait().
    ticket async_pull_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<float> out);
    // async_pull_rows for evaluation: rows that an update reached, zeros
    // for other keys; the PS makes, counts and marks nothing.  Also
    // answered after the chief has ended training (until it shuts the PS
    // tasks down).
    ticket async_lookup_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<float> out);
    // One update of the row of each key (unique: sum a key's gradients
    // first) with grads[i * dim ...].  Both may change after the call.
    // Async: it applies on arrival.  Sync: each PS holds it until the step
    // that this worker's next push joins is applied, and applies it with
    // that step (dropped with the push if the push is stale); so
    // async_push_rows before async_push, and a step's snapshot holds the
    // rows of its batches.
    ticket async_push_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<const float> grads);

    // Completes a ticket (throws pstrain::peer_error); test() without waiting.
    void wait(ticket t);
    bool test(ticket t);
    // Sync mode's step: push the whole gradient and wait until its step is
    // applied on every PS, with the new values in params().
    void step(std::uint64_t position = 0) { wait(async_push(position)); }

    // Every PS's counters, one per PS (any worker may ask; waits for the
    // answers, so call it between steps).
    std::vector<ps_stats> stats();

    // After lost_ps: waits for the replies the other PS tasks still owe
    // (every call in flight is abandoned: its ticket is no longer
    // outstanding), then for the spare that the chief put in each lost PS's
    // place to say so, and says hello to it.  Returns the PS tasks
    // replaced.  Pull the values next: in sync training every shard went
    // back to the snapshot the spare restored (restored_step() says which).
    // Throws pstrain::peer_error when more PS tasks are lost than spares
    // are left (naming them), or nobody stands in within the timeout.
    // `rollback`: what the chief passes (sync training, where every shard
    // goes back to the snapshot): this worker first gives each serving PS
    // it has no push pending at a filler push (its gradient buffer as it
    // is: the rollback discards the step), since that PS may hold another
    // worker's push, the chief's among them, for this worker's gradient.
    // Every worker of a sync job calls it then, the chief included: the
    // chief's rolls back once every live worker's filler or push is in.
    // The chief calls chief_client::replace_lost_ps instead.
    std::vector<std::size_t> replace_lost_ps(bool rollback = false);
    // Spares not yet standing in for a lost PS.
    std::size_t spares_left() const;

    // A worker's goodbye, when its program ends before the chief ended the
    // job (every worker but the chief; the chief calls
    // chief_client::shutdown): every PS lets it go instead of counting it
    // lost, and a sync step from then on aggregates the live workers'
    // gradients when fewer are left than it asks for.  Waits for the
    // messages to leave (at most 30 s); the client cannot be used after it.
    // Throws pstrain::error on the chief's client.
    void leave();

    // PS 0's global step, as of the last reply.
    std::uint64_t global_step() const;
    // A reply said training is done (or stopped).
    bool done() const;
    bool stopped() const;
    // The snapshot step the PS tasks restored, if they did.
    std::optional<std::uint64_t> restored_step() const;
    // PS 0's count of the workers it has not lost and this worker's rank
    // among them (how many have a lower index), as of its last values reply
    // ({0, 0} before any).  An elastic job re-splits its data by them.
    struct membership {
        std::uint32_t live = 0, rank = 0;
        bool operator==(const membership&) const = default;
    };
    membership live_workers() const;
    // PS p reads and writes this worker's buffers in place.
    bool mapped(std::size_t p) const;
    // Replies received so far and, while a call waits, which PS tasks have
    // not answered and what it asked them.  Any thread may call it.
    ps::activity activity() const;
    // Where this client's time has gone: outside its calls (the program's
    // own work), issuing requests, waiting for replies, checking them.
    // Any thread may call it.
    time_profile profile() const;

protected:
    class impl;
    impl& core() { return *impl_; }

private:
    std::unique_ptr<impl> impl_;
};

// The chief's client (worker 0's, config.index 0; any other index throws
// pstrain::error): a client with the calls that start, save and end the
// job.
class chief_client : public client {
public:
    chief_client(transport& net, client_config config);

    // The chief's first request: params() become the initial values.
    ticket async_init();
    // The chief's first request when resuming: every PS restores the
    // snapshot taken at `step`; the values arrive in params().
    ticket async_restore(std::uint64_t step);
    // Asks every PS for a snapshot at `step`; one result per PS.
    std::vector<snapshot_result> snapshot(std::uint64_t step);
    // The last word: every PS ends training (with `stop`: the workers are
    // told it stopped for preemption) and exits; so do the spares.
    void shutdown(bool stop = false);
    // After lost_ps: a spare takes each lost PS's place and restores its
    // shard from the snapshot taken at `step`; with `rollback` (sync
    // training) every other PS goes back to that snapshot first, so that
    // the model is one step's.  Then the other workers hear from the spare
    // (replace_lost_ps).  With `rollback`, each serving PS's current step
    // is completed first, as client::replace_lost_ps(true) says: this
    // waits until every live worker has called that.  Returns the PS
    // tasks replaced; throws as client::replace_lost_ps does.
    std::vector<std::size_t> replace_lost_ps(std::uint64_t step, bool rollback);
};

}  // namespace pstrain::ps
