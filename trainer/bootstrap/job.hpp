// Who this process is in the job, and its connections to the peers it
// talks to (a worker: every PS; a PS: every worker).
#pragma once

#include "common/cluster_spec.hpp"
#include "trainer/options.hpp"
#include "trainer/transport/ucx.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pstrain::bootstrap {

enum class mode { pmix, static_spec };

struct job {
    mode how = mode::static_spec;
    task_id me{role::worker, 0};
    int num_ps = 0;
    int num_workers = 0;
    cluster_spec spec;         // host:port of every task
    std::string source;        // "PMIx and the SPANK plugin", "TF_CONFIG", "--ps-hosts/--worker-hosts"

    bool is_chief() const { return me.role == role::worker && me.index == 0; }
    std::string name() const;                   // "worker 1"
    std::string peer_name(role r, int index) const;  // "ps 0 (n1)"
};

// The role, from (in order) PMIx with the plugin's PSTRAIN_* variables,
// TF_CONFIG, or the classic flags.  std::nullopt when none says anything.
// Throws pstrain::error when what is given is inconsistent.
std::optional<job> detect_job(const trainer::train_options& o);

struct connections {
    // peers[i]: the endpoint to PS i (on a worker) or to worker i (on a PS),
    // with failure detection (UCX keepalive): it says when a peer is lost,
    // and carries ABORT.
    std::vector<std::unique_ptr<transport::endpoint>> peers;
    // fast[i]: a second endpoint to the same peer without failure detection,
    // for the messages themselves: UCX then uses every transport it has,
    // shared memory and zero-copy included (an endpoint with failure
    // detection is limited to transports that can detect it, TCP between
    // processes on one node); empty when there is none (static spec).
    std::vector<std::unique_ptr<transport::endpoint>> fast;
    // Where headers and payloads go.
    ucp_ep_h data_ep(std::size_t i) const { return i < fast.size() && fast[i] ? fast[i]->get() : peers[i]->get(); }
    // Endpoints accepted by a listener, kept open for the job's lifetime.
    std::vector<std::unique_ptr<transport::endpoint>> accepted;
    std::unique_ptr<transport::listener> listener;
};

// Exchanges UCX addresses (PMIx Put/Commit/Fence/Get, or HELLO messages
// over a UCX listener at the spec's host:port) and connects.  A peer that
// does not appear within `timeout` is named in the error.
connections connect(job& j, transport::worker& w, std::chrono::seconds timeout);

}  // namespace pstrain::bootstrap
