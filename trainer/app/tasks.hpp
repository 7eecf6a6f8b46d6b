// The tasks of a job: a PS task (the PS library's server, with hooks that
// end training at --train-steps and store snapshots as checkpoint shards),
// a distributed worker, and --standalone (one process: its PS in a thread,
// the training loop over the loopback).
#pragma once

#include "pstrain/server.hpp"
#include "trainer/app/options.hpp"
#include "trainer/app/training_loop.hpp"
#include "trainer/app/watchdog.hpp"
#include "library/bootstrap/job.hpp"

#include <exception>
#include <functional>

namespace pstrain::trainer {

// A ps or worker task of a distributed job.  Returns the exit status.
int run_distributed(const train_options& o, bootstrap::job j);

// A distributed worker's training loop over `loop_net` (`net`, or a view
// of it), then net's connections closed.  A loop that returned ended the
// job in order, whatever its status (a final checkpoint not written: 1;
// stopped by SIGTERM: 143): they close as after a success, so that what it
// queued goes out (the chief's shutdown, to the spares too; dropped, a
// spare would report the chief lost).  A loop that threw: `on_error` runs
// first, the connections still open (the start-up vote; an exception it
// throws replaces the loop's), then they close with force, dropping what
// is queued for lost peers, and the exception goes on.  Returns the exit
// status.
int run_worker_task(const train_options& o, const loop_role& who, ps::transport& loop_net, ps::transport& net,
                    const std::function<void(const std::exception_ptr&)>& on_error = {});

// `pstrain serve`: a ps task whose workers' program (pstrain's Python
// package) says how to train in its chief's hello and ends training with
// its shutdown.  Returns the exit status.
int run_serving_ps(const train_options& o, bootstrap::job j);

// --standalone.  Returns the exit status.
int run_standalone(const train_options& o);

// The PS's configuration and hooks for these options: training ends at
// --train-steps; snapshots are shards in --checkpoint-dir.
ps::server_config server_config_for(const train_options& o, int index, int num_ps);
// With a meter, writing and reading a shard are busy stretches (not stalls).
ps::server_hooks server_hooks_for(const train_options& o, progress_meter* meter = nullptr);

}  // namespace pstrain::trainer
