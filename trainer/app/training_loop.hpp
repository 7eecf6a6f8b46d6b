// The one training loop: a worker pulls the model's values, computes a
// gradient on its shard of the data, pushes it (the reply carries the new
// values), and, as the chief, initialises or restores the model, evaluates,
// checkpoints and ends training.  A distributed worker runs it over UCX;
// `pstrain --standalone` runs it over the loopback, with its PS in a thread.
#pragma once

#include "pstrain/transport.hpp"
#include "trainer/app/options.hpp"
#include "trainer/app/watchdog.hpp"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

namespace pstrain::trainer {

struct loop_role {
    int index = 0;  // worker index; 0 is the chief
    int num_ps = 1, num_workers = 1;
    // The PS tasks' room for workers (--max-workers: num_workers or more):
    // what the client's hello says, and how many worker slots the PS's
    // counters and checkpoints have.  0: num_workers.
    int worker_slots = 0;
    int slots() const { return std::max(num_workers, worker_slots); }
    int ps_spares = 0;                      // spare ps tasks, the transport's peers after the num_ps
    std::vector<std::string> worker_names;  // how errors name the workers
    std::string name;                       // "worker 1 (n2)", for messages
    bool standalone = false;                // --standalone: the final line says "ps":0 and mode "standalone"
    // Called after the chief has ended training and before the final line
    // (standalone: waits for its PS thread, whose last log line then comes first).
    std::function<void()> after_shutdown;
    // The stall watchdog's meter (ticked every step; busy while loading the
    // data, evaluating and checkpointing) and the watchdog, which also reads
    // the client's activity; null: none.
    progress_meter* meter = nullptr;
    watchdog* dog = nullptr;
};

// Runs the loop over `net` (whose peers are the PS tasks); returns the
// exit status.
int run_training_loop(const train_options& o, const loop_role& who, ps::transport& net);

}  // namespace pstrain::trainer
