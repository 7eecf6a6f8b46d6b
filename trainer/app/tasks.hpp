// The tasks of a job: a PS task (the PS library's server, with hooks that
// end training at --train-steps and store snapshots as checkpoint shards),
// a distributed worker, and --standalone (one process: its PS in a thread,
// the training loop over the loopback).
#pragma once

#include "pstrain/server.hpp"
#include "trainer/app/options.hpp"
#include "trainer/app/watchdog.hpp"
#include "library/bootstrap/job.hpp"

namespace pstrain::trainer {

// A ps or worker task of a distributed job.  Returns the exit status.
int run_distributed(const train_options& o, bootstrap::job j);

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
