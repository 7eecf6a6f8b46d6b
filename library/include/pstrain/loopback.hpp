// An in-process transport: PS tasks and workers that are threads (or plain
// objects driven in turn) of one process.  Messages are copied between
// buffers; exchange memory is plain memory that every task of the network
// can map, so a PS reads and writes a worker's buffers in place, as it does
// over UCX's shared memory on one host.  Used by the unit tests and by
// `pstrain --standalone`, whose PS runs in a thread.
//
// Threads: each task's transport belongs to one thread, as any transport;
// the network's tasks may run on as many threads as there are tasks, and
// kill_ps/kill_worker may be called from any thread.
#pragma once

#include <pstrain/transport.hpp>

#include <memory>
#include <vector>

namespace pstrain::ps {

class loopback_network {
public:
    loopback_network(int num_ps, int num_workers);
    ~loopback_network();
    loopback_network(const loopback_network&) = delete;
    loopback_network& operator=(const loopback_network&) = delete;

    // PS i's transport (its peers are the workers) and worker i's (its
    // peers are the PS tasks).
    transport& ps(int i);
    transport& worker(int i);

    // The task dies: its peers see it failed, operations with it fail.
    // (A task whose transport closes ends so too, once what it held in
    // flight has arrived or been dropped: hold_messages.)
    void kill_ps(int i);
    void kill_worker(int i);
    // A new process takes killed worker i's place (transport::
    // reconnections() counts it at the PS tasks): its transport, fresh;
    // what the killed one sent or was sent is gone.  The killed one's
    // transport stays valid, and unused.
    transport& restart_worker(int i);
    // Worker w's messages to PS p (a spare too) stay in flight from now
    // on, as on a congested or lossy link: its sends complete, nothing
    // arrives.  Closing w's transport lets them arrive (close(false), as
    // UCX flushes what it queued) or drops them (close(true)).
    void hold_messages(int worker, int ps);
    // What that link holds arrives now, and it holds nothing more.
    void release_messages(int worker, int ps);
    // The other way: PS p's messages (replies) to worker w stay in flight,
    // until p dies (they are lost with it) or closes.
    void hold_replies(int ps, int worker);

    struct state;

private:
    std::shared_ptr<state> s_;
    std::vector<std::unique_ptr<transport>> ps_, workers_, retired_;
};

}  // namespace pstrain::ps
