// What a server's collaborators share (worker_link, membership, startup,
// dense_step, sparse_service and the dispatcher in server.cpp): the
// training's progress and the server's time profile.  All of it belongs to the server's thread;
// server::global_step() and friends read it from others, as before.
#pragma once

#include "library/ps/phase_clock.hpp"
#include "library/ps/protocol.hpp"

#include <atomic>
#include <cstdint>

namespace pstrain::ps {

// The phases of server::profile(), in this order.
enum server_phase : std::size_t { starting, waiting, requests, updating, replying, draining, sparse };
using server_clock = phase_clock<7>;

inline server_clock::names server_phase_names()
{
    return {{{"start", "starting: the chief's hello, initialisation or restore"},
             {"wait", "waiting for requests"},
             {"requests", "checking and dispatching requests (snapshots and stats included)"},
             {"update", "the optimizer's update (sync: with the sum of the step's gradients and the new "
                        "values written into the mapped buffers of the workers on this host)"},
             {"reply", "posting replies (async: writing values into mapped buffers)"},
             {"drain", "waiting for earlier replies to leave before the values change"},
             {"sparse", "the embedding tables' lookups and row updates (sparse pulls and pushes)"}}};
}

struct training_state {
    // The server's thread writes these two, and any thread may read them
    // (server::global_step, stale_gradients): atomics.
    std::atomic<std::uint64_t> step{0};   // the global step
    std::atomic<std::uint64_t> stale{0};  // sync: gradients dropped as stale
    std::uint64_t skipped = 0;            // steps (async: pushes) skipped for a worker's inf or NaN
    std::uint64_t restored = 0;           // 1 + the restored snapshot's step, 0 when none
    bool done = false;                    // every reply from now on says done (or stopped)
    bool stopped = false;                 // ... stopped: the chief stopped the job for preemption
    bool shutdown = false;                // the chief ended the job: the server exits soon

    // What a reply says: `s`, or done (stopped) once training has ended.
    wire::values_status status(wire::values_status s) const
    {
        if (!done) return s;
        return stopped ? wire::values_status::stopped : wire::values_status::done;
    }
};

}  // namespace pstrain::ps
