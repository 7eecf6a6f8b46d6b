// Who this process is in the job (from PMIx and the SPANK plugin's
// variables, TF_CONFIG, or the classic flags), and the connections to the
// peers it talks to (a worker: every PS; a PS: every worker).
#pragma once

#include "common/cluster_spec.hpp"
#include "trainer/transport/ucx_transport.hpp"

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
    // The key peers prove they hold (transport/handshake.hpp).  PMIx: made
    // by rank 0 when connecting and shared with the step's ranks only.  A
    // static spec: PSTRAIN_AUTH_KEY or PSTRAIN_AUTH_KEY_FILE; without them
    // a key of zeros, and a warning that authentication is off.
    std::optional<transport::job_key> key;

    bool is_chief() const { return me.role == role::worker && me.index == 0; }
    std::string name() const;                   // "worker 1"
    std::string peer_name(role r, int index) const;  // "ps 0 (n1)"
};

// The classic example's flags (--ps-hosts, --worker-hosts, --job-name,
// --task-index); empty when not given.
struct classic_flags {
    std::string ps_hosts, worker_hosts, job_name;
    int task_index = -1;
};

// The role, from (in order) PMIx with the plugin's PSTRAIN_* variables,
// the classic flags, or TF_CONFIG.  std::nullopt when none says anything.
// Throws pstrain::error when what is given is inconsistent.
std::optional<job> detect_job(const classic_flags& o);

// How peers of `j` are named, in the order of its transport's peers.
std::vector<std::string> peer_names(const job& j);

// Exchanges UCX addresses (PMIx Put/Commit/Fence/Get, or a hello over a
// UCX listener at the spec's host:port) and connects: a worker to every PS,
// a PS to every worker.  A peer that does not appear within `timeout` is
// named in the error.  `beats`: heartbeats with every peer from then on
// (a peer silent for beats.limit() fails, named with its address).
std::unique_ptr<transport::ucx_transport> connect(const job& j, transport::progress_mode progress, std::chrono::seconds timeout,
                                                  transport::heartbeat_config beats = {});

// The IPv4 address `host` resolves to here ("" when it does not).
std::string resolve_address(const std::string& host);

}  // namespace pstrain::bootstrap
