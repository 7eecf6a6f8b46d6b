// A parameter server: owns one shard of the flat parameter vector and its
// optimizer state, applies the workers' gradients (sync: exactly
// replicas_to_aggregate per step, averaged, stale ones dropped; async: each
// on arrival) and serves values, until the chief ends training.
//
// The server knows no files, options or models: the program above it
// decides, through hooks, when training ends and how a snapshot of the
// shard is stored and restored.
//
// Threads: run() serves on the thread that calls it, and calls the hooks
// there; the other accessors may be called from any thread.
#pragma once

#include <pstrain/activity.hpp>
#include <pstrain/embedding.hpp>
#include <pstrain/profile.hpp>
#include <pstrain/optimizer.hpp>
#include <pstrain/partition.hpp>
#include <pstrain/settings.hpp>
#include <pstrain/transport.hpp>
#include <pstrain/wire_precision.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace pstrain::ps {

struct server_config {
    int index = 0;  // this PS of num_ps: its shard of make_partition(num_params, num_ps)
    int num_ps = 1;
    // How to train: the optimizer, sync or async, the gradients per step
    // (sync) or the staleness bound (async), whether the job is elastic,
    // and the embedding tables (settings.hpp).  In detail:
    // - training.replicas_to_aggregate, sync: gradients per step.  0: every
    //   worker; fewer than the workers leaves the rest as backup workers
    //   (their late gradients are dropped).
    // - training.max_staleness, async: stale synchronous parallel.  Each PS
    //   counts each worker's pushes (its clock); a worker whose push puts it
    //   more than max_staleness pushes ahead of the slowest live worker gets
    //   its reply (the new values) once the slowest has caught up, or was
    //   lost, or training ended.  0: lock-step without a barrier;
    //   unbounded_staleness (negative): never held.  A program that pushes a
    //   shard in parts counts each part.
    // - training.elastic: workers leave and come back.  Sync: a lost worker
    //   other than the chief lowers the gradients per step to the live
    //   workers (when fewer than replicas_to_aggregate are left) instead of
    //   ending the job; a step that waited for the lost worker completes with
    //   the gradients it has, its lost worker's among them when it had
    //   pushed.  Sync and async: a new process that the transport takes in a
    //   lost worker's place (transport::reconnections) is welcomed, and a
    //   sync step aggregates its gradient again.  Without it such a process's
    //   hello is refused.  The chief's loss still ends the job.
    // - training.tables: sparse embedding tables: this PS holds the rows of
    //   the keys that shard_of_key gives it, of each table (client_config::
    //   table_dims must list the same tables with the same dims).
    training_settings training;
    // Elastic jobs that grow: the workers that start with the job, fewer
    // than the transport's worker peers.  The peers from started_workers on
    // are slots with no process yet, counted as lost from the start: a
    // worker that joins later takes one as a lost one's replacement does,
    // and a sync step then aggregates its gradient too (up to
    // replicas_to_aggregate when that is given; 0 there: every live worker).
    // Each slot costs this PS one receive buffer of its shard.  0: every
    // peer starts with the job.
    std::size_t started_workers = 0;
    // Read and write the buffers of workers on this host in place when the
    // transport can map them (else every exchange is a message).
    bool share_memory = true;
    // After the chief ends training, how long workers get to collect their last reply.
    std::chrono::seconds shutdown_wait{60};
    // The most memory the shard may take (its values, optimizer state, sums
    // and one receive buffer per worker), checked when the chief's hello
    // announces the model's size, before anything is allocated.  0: this
    // machine's physical memory.
    std::uint64_t max_shard_bytes = 0;
    // Threads that share the optimizer's update of a large shard (256Ki
    // parameters or more on this PS), the server's own included: the CPUs
    // the task may use.  1: the server's thread alone.
    int update_threads = 1;
    // Denormal floats flushed to zero (FTZ and DAZ: values below about
    // 1.2e-38 read and written as 0) on every thread the server runs on,
    // the caller's for the length of run() and the update threads: an
    // optimizer's state that decays towards zero is otherwise updated many
    // times slower on x86 once it is denormal, as TensorFlow's threads do.
    // False: IEEE 754 arithmetic, with the caller's thread as it is.
    bool flush_denormals = true;
    // True: `training` above is ignored, and the chief's hello must bring
    // it (client_config::settings): a PS task for workers whose program
    // says how to train.
    // False: when the chief's hello brings settings, they must agree with
    // these (else the server ends, naming the difference).
    bool settings_from_chief = false;
    // What pushes, values and rows travel as (wire_precision.hpp): every
    // worker's hello must say the same, else it is refused.  With
    // settings_from_chief, the chief's hello says it instead.
    wire_precision precision = wire_precision::fp32;
    // A spare: it holds no shard, and waits, until the chief's take_over
    // names the lost PS whose place it takes (`index` is ignored until
    // then; num_ps is the job's PS count, spares not counted).  Then it
    // starts as that PS from the chief's hello and restore, and tells every
    // other worker that it stands in (they say hello).  A chief that ends
    // the job first ends the spare too (run() returns done).
    bool spare = false;
};

// The shard as it is at a snapshot, for the snapshot hook.
struct shard_snapshot {
    std::uint64_t step = 0;  // the chief's step that names the snapshot
    int index = 0, num_ps = 1;
    shard_range range;
    std::uint64_t num_params = 0;
    optimizer_kind optimizer = optimizer_kind::sgd;
    std::span<const float> values;
    std::span<const float> state;              // optimizer state, slot after slot
    std::uint64_t updates = 0;                 // updates applied (Adam's bias correction)
    std::span<const std::uint64_t> positions;  // each worker's last reported data position
    // This PS's shard of each embedding table (server_config::
    // training.tables, in that order).  The hook stores what its policy says: every row, or
    // for_each_changed() and removed_keys().  When it returns (the stored
    // copy durable), the server clears the tables' change marks; when it
    // throws, they stay for the next snapshot.
    std::span<const embedding_table> tables;
};

// What storing a snapshot gave back (the chief receives it).
struct snapshot_receipt {
    std::uint64_t bytes = 0;
    std::uint64_t checksum = 0;
};

// A shard restored from a snapshot, for the restore hook to return.
struct shard_state {
    std::vector<float> values, state;
    std::uint64_t updates = 0;
    std::vector<std::uint64_t> positions;  // per worker; empty when unknown
};

struct server_hooks {
    // A global step completed (also called once with the starting step when
    // the chief has initialised or restored).  Return true when training is
    // to end: every reply from then on says `done`.
    std::function<bool(std::uint64_t step)> step_completed;
    // The chief wants a snapshot; store it.  Throw pstrain::error when it
    // cannot be stored: the chief is told the snapshot failed.
    std::function<snapshot_receipt(const shard_snapshot&)> snapshot;
    // The chief resumes from the snapshot taken at `step`: return this
    // shard's part of it (`range` of the flat vector).  Throws to fail.
    std::function<shard_state(std::uint64_t step, shard_range range, std::uint64_t num_params)> restore;
    // With embedding tables, right after `restore`: put back the rows of
    // the snapshot at `step` whose keys shard_of_key gives to this PS
    // (`index` of `num_ps`, whatever number of PS tasks saved them) into
    // `tables` (empty, in server_config::training.tables' order).  Throws to fail.
    // Unset while the server has tables: a restore is refused.
    std::function<void(std::uint64_t step, int index, int num_ps, std::span<embedding_table> tables)> restore_tables;
    // Embedding table `table` has reached its max_rows on this PS: new keys
    // read as zeros from now on (called once per table; the program says
    // how to raise the limit).  Unset: a generic warning is logged.
    std::function<void(std::size_t table, std::uint64_t max_rows)> table_full;
};

// Async mode's clocks and the staleness bound's holds (server_config::
// training.max_staleness; without a bound none is held, the lead is still
// counted).
struct staleness_counters {
    int bound = unbounded_staleness;  // the bound in force (the server's, or the chief's settings')
    // The most pushes a worker had applied beyond the slowest live
    // worker's: max_staleness + 1 when a reply was held (the held push
    // counts), else at most max_staleness.
    std::uint64_t largest_lead = 0;
    std::uint64_t replies_held = 0;         // replies held until the slowest caught up
    std::uint64_t held_now = 0;             // replies held at this moment
    std::chrono::nanoseconds held_time{0};  // the held replies' waits, summed (those still held excluded)
};

// Embedding rows a server has served since it started.
struct sparse_traffic {
    std::uint64_t keys_pulled = 0;  // rows read (pulls and lookups)
    std::uint64_t keys_pushed = 0;  // row updates received
};

enum class server_outcome {
    done,     // the chief ended training
    stopped,  // the chief stopped training for preemption
};

class server {
public:
    // The transport's peers are the workers (worker 0 is the chief).
    server(transport& net, server_config config, server_hooks hooks);
    ~server();
    server(const server&) = delete;
    server& operator=(const server&) = delete;

    // Serves until the chief ends training (a spare: waits first, see
    // server_config::spare).  Throws pstrain::peer_error
    // (after telling every live worker) when training cannot go on: the
    // chief was lost, or too few workers are left for sync training.
    server_outcome run();

    // The global step (updates applied; sync: aggregated steps).
    std::uint64_t global_step() const;
    // Gradients dropped as stale (sync).
    std::uint64_t stale_gradients() const;
    // Requests handled and steps applied so far and, while it waits, for
    // which workers and what (their gradients for a sync step, any request,
    // the sends of its replies).  Any thread may call it.
    ps::activity activity() const;
    // Where this server's time has gone: starting, waiting for requests,
    // checking them, the optimizer's update (sync: with the aggregation),
    // replying, waiting for earlier replies to leave.  Any thread may call it.
    time_profile profile() const;
    // Its sparse pulls' and pushes' keys (the time they took is profile()'s
    // "sparse" phase).  Any thread may call it.
    sparse_traffic sparse() const;
    // The staleness bound's counters.  Any thread may call it.
    staleness_counters staleness() const;

private:
    class impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace pstrain::ps
