// Who this task is in a parameter-server job, and a UCX transport to its
// peers.  The role comes from (in order) `srun --mpi=pmix` with pstrain's
// SPANK plugin (--ps=N --workers=M: PMIx exchanges the UCX addresses, no
// fixed ports), the classic flags of TensorFlow's example (ps_hosts,
// worker_hosts, job_name, task_index), or TF_CONFIG.
#pragma once

#include <pstrain/transport.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace pstrain::ps {

struct task_info {
    bool is_ps = false;
    int index = 0;  // within its role
    int num_ps = 0, num_workers = 0;
    std::string name;    // "worker 1"
    std::string source;  // where the role came from
    bool is_chief() const { return !is_ps && index == 0; }
};

struct bootstrap_options {
    std::chrono::seconds timeout{60};  // for every peer to appear
    // Heartbeats with every peer every `heartbeat_interval` (0: none); a
    // peer silent for 6 intervals fails (transport::failed), its node named.
    std::chrono::milliseconds heartbeat_interval{5000};
    // The classic flags; empty when not given.
    std::string ps_hosts, worker_hosts, job_name;
    int task_index = -1;
};

struct connected_task {
    task_info me;
    // A worker's peers are the PS tasks, a PS's peers the workers.
    std::unique_ptr<transport> net;
    // How worker i is named (for a client_config).
    std::vector<std::string> worker_names;
};

// Finds the role and connects; std::nullopt when nothing gives a role.
// Throws pstrain::error naming what is wrong or which peer is missing.
std::optional<connected_task> connect_task(const bootstrap_options& o = {});

}  // namespace pstrain::ps
