// UCX (ucp) behind small RAII types: one context and one engine (a
// ucp_worker: the object UCX makes progress on) per process, endpoints to
// peers, tagged sends and receives that complete in place (zero copy into
// the caller's buffers), registered memory a peer on the same host can map,
// and a progress loop that sleeps on the engine's event fd instead of
// spinning.  ucx_transport.hpp puts them behind pstrain::ps::transport.
// UCX statuses become pstrain::error here, with ucs_status_string's words.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <ucp/api/ucp.h>

namespace pstrain::ucx {

// Throws pstrain::error "CALL failed: <ucs_status_string>" unless UCS_OK.
void check(ucs_status_t status, const char* call);

enum class progress_mode { event, spin };

// How long an event-mode wait spins before it sleeps on the event fd.  A
// spin catches a reply that comes within a few hundred microseconds (a
// push and its values on one node) without paying for a wake-up.  A task
// whose waits last longer (a PS between pushes, a sync worker waiting for
// the others) sleeps at once: a spin would seldom catch its reply, and on
// a node with more tasks than cores it takes the core from the task it
// waits for.
//
// A spin also stops, and no wait spins for `contended_pause`, when a
// sched_yield of it was away `lost_core` or longer (as long as the longest
// spin) and the node then has more runnable tasks than cores (`crowded`).
// There a spinning task that gets a message still waits for its turn on
// the core (a tick, if the task holding it computes), while one asleep on
// the event fd is woken and runs at once: 1 PS + 2 workers on two cores
// train 1.1x faster in async.  A shorter yield, or one while no more tasks
// than cores are runnable, gave the core to the very task this one waits
// for (placed on this core when it was woken, and done with a message
// soon): the spin goes on.  With 50 us instead of 250, one worker and its
// PS on two cores exchanged 318 kB through shared memory at 0.74 of the
// speed.
class spin_policy {
public:
    using clock = std::chrono::steady_clock;
    static constexpr std::chrono::microseconds min_spin{50}, max_spin{250}, lost_core{250};
    static constexpr std::chrono::seconds contended_pause{1};

    // The spin before the next sleep: about as long as recent waits lasted,
    // within [min_spin, max_spin]; none when they lasted max_spin or more,
    // and none for contended_pause after the core was lost.
    std::chrono::microseconds window(clock::time_point now = clock::now()) const
    {
        if (typical_ >= max_spin || now < quiet_until_) return std::chrono::microseconds(0);
        return std::clamp(typical_ * 3 / 2, min_spin, max_spin);
    }
    // A wait that had to wait (its reply was not in yet) lasted `took`.
    void waited(std::chrono::microseconds took) { typical_ = (typical_ * 3 + took) / 4; }
    // A yield of the spin returned after `away`, at `now`; `crowded` says
    // whether the node has more runnable tasks than cores (asked only after
    // a long yield).  True: the spin ends (and the next ones for
    // contended_pause).
    template <typename Crowded>
    bool yielded(std::chrono::nanoseconds away, clock::time_point now, Crowded&& crowded)
    {
        if (away < lost_core || !crowded()) return false;
        quiet_until_ = now + contended_pause;
        ++contended_;
        return true;
    }
    // The times a yield lost the core.
    std::uint64_t contended() const { return contended_; }

private:
    std::chrono::microseconds typical_{1000};  // moving average of the waits that waited
    clock::time_point quiet_until_{};          // no spin before
    std::uint64_t contended_ = 0;
};

class context {
public:
    // Reads UCX_* from the environment (so UCX_TLS is respected); peer
    // failure detection on (keepalive every `keepalive`).
    explicit context(std::chrono::milliseconds keepalive = std::chrono::milliseconds(1000));
    ~context();
    context(const context&) = delete;
    context& operator=(const context&) = delete;
    ucp_context_h get() const { return h_; }

private:
    ucp_context_h h_ = nullptr;
};

// One outstanding operation; completes when done() and then reports status().
// A receive (created with its engine as owner) also reports its length().
class request {
public:
    request() = default;
    request(ucs_status_ptr_t p, const char* what, ucp_worker_h owner = nullptr);
    ~request();
    request(request&& o) noexcept;
    request& operator=(request&& o) noexcept;

    bool done();  // polls; true once complete
    ucs_status_t status() const { return status_; }
    std::size_t length() const { return length_; }  // a completed receive's bytes
    const char* what() const { return what_; }
    void cancel(ucp_worker_h w);

private:
    friend class engine;
    void* req_ = nullptr;
    ucp_worker_h owner_ = nullptr;  // to cancel a receive still pending at destruction
    ucs_status_t status_ = UCS_OK;
    bool complete_ = true;
    const char* what_ = "";
    std::size_t length_ = 0;
};

class endpoint;

// What UCX's error callback reports of one endpoint.  The engine owns these
// records, not the endpoints: an endpoint whose close did not finish in time
// is left to UCX, whose progress (the engine's last drain) may still call
// its error callback after the endpoint object is gone.
struct endpoint_failure {
    bool failed = false;
    ucs_status_t status = UCS_OK;
};

class engine {
public:
    engine(context& ctx, progress_mode mode);
    ~engine();
    engine(const engine&) = delete;
    engine& operator=(const engine&) = delete;
    ucp_worker_h get() const { return h_; }
    context& ctx() const { return ctx_; }

    // The packed ucp_worker address, for PMIx or a static-spec hello.
    std::vector<std::uint8_t> address() const;

    // Runs UCX progress until pred() holds or the deadline passes; returns
    // pred().  Event mode: after a spin of spin_policy's window, in which
    // the task yields its core to any other that is ready to run,
    // ucp_worker_arm + poll(efd).
    bool wait_until(const std::function<bool()>& pred, std::chrono::steady_clock::time_point deadline);
    void progress();

    // The iov array itself (not only the buffers it names) must stay alive
    // until the request completes: UCX reads it during rendezvous.
    request send(ucp_ep_h ep, std::uint64_t tag, std::span<const ucp_dt_iov_t> iov);
    request recv(std::uint64_t tag, std::uint64_t mask, std::span<ucp_dt_iov_t> iov);
    // Contiguous buffers: what rendezvous moves zero-copy.
    request send(ucp_ep_h ep, std::uint64_t tag, const void* buffer, std::size_t bytes);
    request recv(std::uint64_t tag, std::uint64_t mask, void* buffer, std::size_t bytes);

    // Blocking helpers: wait for one request, throw on error (naming `peer`).
    void wait(request& r, const std::string& peer, std::chrono::steady_clock::time_point deadline);

    std::uint64_t spins() const { return spins_; }
    std::uint64_t sleeps() const { return sleeps_; }
    // More tasks runnable on the node now than online CPUs (/proc/loadavg's
    // running count); false when that cannot be read (a spin-mode engine).
    bool crowded() const;

private:
    context& ctx_;
    ucp_worker_h h_ = nullptr;
    int efd_ = -1;
    progress_mode mode_;
    std::uint64_t spins_ = 0, sleeps_ = 0;
    spin_policy spin_;
    int loadavg_fd_ = -1;  // /proc/loadavg, for crowded()
    friend class endpoint;
    std::deque<endpoint_failure> failures_;  // one per endpoint made; freed after ucp_worker_destroy
};

// An endpoint, with peer-failure detection (UCX's PEER error mode: the
// error callback marks it failed; pending operations then complete with an
// error) or without (NONE mode, which keeps UCX's zero-copy paths such as
// CMA, that PEER mode gives up).  pstrain pairs them: headers on a detecting
// endpoint, payloads on a fast one.
class endpoint {
public:
    endpoint() = default;
    // To a packed ucp_worker address.
    static std::unique_ptr<endpoint> to_address(engine& w, std::span<const std::uint8_t> address, std::string peer,
                                                bool detect_failure = true);
    // To a listening host:port (client side of UCX's client-server mode).
    static std::unique_ptr<endpoint> to_sockaddr(engine& w, const std::string& host, int port, std::string peer);
    // From a listener's connection request.
    static std::unique_ptr<endpoint> accept(engine& w, ucp_conn_request_h request, std::string peer);
    ~endpoint();
    endpoint(const endpoint&) = delete;
    endpoint& operator=(const endpoint&) = delete;

    ucp_ep_h get() const { return h_; }
    bool failed() const { return failure_->failed; }
    ucs_status_t failure() const { return failure_->status; }
    const std::string& peer() const { return peer_; }
    // Flushes and closes (waits up to `timeout`); forced when failed or
    // asked (on an error path: drops what is still queued for the peer).
    void close(std::chrono::milliseconds timeout, bool force = false);

private:
    static void on_error(void* arg, ucp_ep_h ep, ucs_status_t status);
    static std::unique_ptr<endpoint> create(engine& w, ucp_ep_params_t& params, std::string peer,
                                            bool detect_failure = true);

    engine* engine_ = nullptr;
    ucp_ep_h h_ = nullptr;
    endpoint_failure* failure_ = nullptr;  // the engine's record, the error callback's argument
    std::string peer_;
};

// Memory UCX allocates and registers (ucp_mem_map with ALLOCATE): shared
// memory where the host allows (UCX_ALLOC_PRIO), so that a peer on the same
// host can map it (remote_key::local_pointer) and load and store directly;
// registered with every memory domain, so rendezvous moves it zero-copy.
class mapped_memory {
public:
    mapped_memory(context& ctx, std::size_t bytes);
    ~mapped_memory();
    mapped_memory(const mapped_memory&) = delete;
    mapped_memory& operator=(const mapped_memory&) = delete;
    void* data() const { return address_; }
    std::size_t size() const { return bytes_; }
    // The packed remote key a peer unpacks (remote_key).
    std::vector<std::uint8_t> packed_rkey() const;

private:
    context& ctx_;
    ucp_mem_h memh_ = nullptr;
    void* address_ = nullptr;
    std::size_t bytes_ = 0;
};

// A peer's packed remote key, unpacked on an endpoint to that peer.
class remote_key {
public:
    remote_key(ucp_ep_h ep, std::span<const std::uint8_t> packed);
    ~remote_key();
    remote_key(const remote_key&) = delete;
    remote_key& operator=(const remote_key&) = delete;
    // This process's address for the peer's `remote_address`, when UCX can
    // map the peer's memory here (shared memory on one host); nullptr when
    // it cannot (another host, UCX_TLS without sm).  No bounds are checked:
    // ucp_rkey_ptr adds an offset to any address (UCX 1.13's uct_mm_rkey_ptr).
    void* local_pointer(std::uint64_t remote_address) const;
    // The same for `bytes` bytes at `remote_address`, all of which must lie
    // in the memory this key mapped here: the shared mapping that appeared
    // in this process when it was unpacked (/proc/self/maps).  Throws
    // pstrain::error when they do not; nullptr when UCX cannot map the
    // memory here, or mapped nothing new whose bounds could be checked.
    void* local_range(std::uint64_t remote_address, std::size_t bytes) const;

private:
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> before_;  // shared mappings before the unpack
    ucp_rkey_h h_ = nullptr;
};

// This process's shared mappings, [begin, end) each (/proc/self/maps).
std::vector<std::pair<std::uintptr_t, std::uintptr_t>> shared_mappings();

// A listener on a TCP port (all interfaces); connection requests queue up.
class listener {
public:
    listener(engine& w, int port);
    ~listener();
    listener(const listener&) = delete;
    listener& operator=(const listener&) = delete;
    std::vector<ucp_conn_request_h>& pending() { return pending_; }
    // The port it listens on (the one the system chose for port 0).
    int port() const;

private:
    static void on_connect(ucp_conn_request_h request, void* arg);
    ucp_listener_h h_ = nullptr;
    std::vector<ucp_conn_request_h> pending_;
};

}  // namespace pstrain::ucx
