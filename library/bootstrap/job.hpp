// Who this process is in the job (from PMIx and the SPANK plugin's
// variables, TF_CONFIG, or the classic flags), and the connections to the
// peers it talks to (a worker: every PS; a PS: every worker).
#pragma once

#include "common/cluster_spec.hpp"
#include "pstrain/error.hpp"
#include "library/transport/ucx_transport.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pstrain::bootstrap {

enum class mode { pmix, static_spec };

struct job {
    mode how = mode::static_spec;
    task_id me{role::worker, 0};
    int num_ps = 0;
    int num_workers = 0;
    // A PS of an elastic job that may grow: the worker indices it keeps room
    // for, num_workers or more (0: num_workers).  The workers beyond
    // num_workers have no process at the start; one that joins later
    // (through the door, as a lost one's replacement does) takes its slot.
    int worker_slots = 0;
    cluster_spec spec;   // host:port of every task
    std::string source;  // "PMIx and the SPANK plugin", "TF_CONFIG", "--ps-hosts/--worker-hosts"
    // The auth key peers prove they hold (transport/handshake.hpp).  PMIx: made
    // by rank 0 when connecting and shared with the step's ranks only.  A
    // static spec: PSTRAIN_AUTH_KEY or PSTRAIN_AUTH_KEY_FILE; without them
    // a key of zeros, and a warning that authentication is off.
    std::optional<ucx::auth_key> key;

    bool is_chief() const { return me.role == role::worker && me.index == 0; }
    int slots() const { return std::max(num_workers, worker_slots); }
    std::string name() const;                        // "worker 1"
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

// What each rank publishes through PMIx ("pstrain.peer"): its role and
// index, then its UCX address.
std::vector<std::uint8_t> published_peer(task_id me, std::span<const std::uint8_t> address);
// Whether `blob` is what published_peer makes (else the rank counts as missing).
bool holds_peer(std::span<const std::uint8_t> blob);

// What PMIx says of one rank of the step: what it published and the host
// PMIx runs it on (none when PMIx does not say).
struct pmix_rank {
    std::vector<std::uint8_t> published;
    std::optional<std::string> host;
};

// Every rank's task, from what it published, checked against `j`'s spec
// (PSTRAIN_CLUSTER): the index must be in it and PMIx's host the spec's.
// Throws pstrain::error naming the rank and what disagrees.
struct step_ranks {
    std::vector<task_id> tasks;                            // by rank
    std::vector<std::string> names;                        // by rank: "worker 0 (n1, the chief)"
    std::vector<std::span<const std::uint8_t>> addresses;  // by rank: its UCX address, in its pmix_rank's published
    std::size_t chief = 0;                                 // the chief's rank
};
step_ranks place_ranks(const job& j, const std::vector<pmix_rank>& ranks);

// What a task that stops because another reported an error prints: one
// line without "error:", e.g. "stopped: worker 0 (n1, the chief) reported
// a configuration error".
class stopped_by_peer : public error {
public:
    using error::error;
};

// What a task does with the start-up errors of the job's tasks (options,
// data, model, checkpoint), one string per task ("" when it had none):
// an error is reported once, by the chief when it has it, else by the
// first task that has it; a task with another error reports its own
// (the tasks disagree); every other task stops with one line naming the
// task that reported.
struct start_verdict {
    enum class action { go, report, stop } what = action::go;
    std::string line;  // stop: the line to print
};
start_verdict judge_start(const std::vector<std::string>& errors, const std::vector<std::string>& names, std::size_t me,
                          std::size_t chief);

// The tasks' word on their start-up, given before any of them speaks the
// PS protocol: under PMIx one more fence (each rank's error, or none), so
// that a configuration error is reported once per job and the others stop
// with a line pointing at it instead of each timing out on a lost peer.
// With a static spec there is no fence: a task reports its own error.
class start_vote {
public:
    start_vote();
    ~start_vote();
    start_vote(const start_vote&) = delete;
    start_vote& operator=(const start_vote&) = delete;

    // Once per task: `my_error` ("" for none).  Returns when every task
    // started; throws pstrain::error (this task's error, to report) or
    // stopped_by_peer.  `timeout`: for the others to load their data.
    void cast(const std::string& my_error, std::chrono::seconds timeout);

    struct impl;
    impl& state() { return *impl_; }  // for connect

private:
    std::unique_ptr<impl> impl_;
};

// Exchanges UCX addresses (PMIx Put/Commit/Fence/Get, or a hello over a
// UCX listener at the spec's host:port) and connects: a worker to every PS,
// a PS to every worker.  A peer that does not appear within `timeout` is
// named in the error.  `beats`: heartbeats with every peer from then on
// (a peer silent for beats.limit() fails, named with its address).
// `vote`, when given, is made ready for start_vote::cast (under PMIx it
// keeps the PMIx handle open for its fence).
//
// `rejoin` (under PMIx; a static spec's PS listens anyway): each PS also
// listens on a port the system picks, where a worker started later in a
// lost worker's place can connect (with the step's key) as under a static
// spec; the chief gets in `join` what such a worker needs: every PS's
// host:port, the worker count and the step's key.  A PS that cannot listen
// says so and the job goes on without.
struct join_info {
    std::vector<std::string> ps;  // host:port, by PS index; empty: nothing to join
    int num_workers = 0;
    ucx::auth_key key{};
};
std::unique_ptr<ucx::ucx_transport> connect(const job& j, ucx::progress_mode progress, std::chrono::seconds timeout,
                                            ucx::heartbeat_config beats = {}, start_vote* vote = nullptr,
                                            bool rejoin = false, join_info* join = nullptr);

// The IPv4 address `host` resolves to here ("" when it does not).
std::string resolve_address(const std::string& host);

}  // namespace pstrain::bootstrap
