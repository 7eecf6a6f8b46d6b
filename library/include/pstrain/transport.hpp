// The transport the parameter server talks through.
//
// A transport connects one task to its numbered peers (a worker to the PS
// tasks 0..P-1, a PS to the workers 0..W-1).  To each peer there are two
// ordered channels: `control` for the small fixed-size messages of the
// protocol, `payload` for the bulk data that goes with some of them.
// Operations return a `transfer` that completes later; nothing makes
// progress unless the caller waits (wait_until), as in UCX's ucp.  On one
// (peer, channel), messages arrive in the order they were sent and are
// matched to receives in the order the receives were posted.
//
// A transport can also hand out memory that a peer on the same host maps
// into its own address space (allocate, map): the PS then reads a worker's
// gradient and writes its values in place, and only control messages
// travel.
//
// Implementations: UCX (pstrain/bootstrap.hpp connects one), and an
// in-process loopback (pstrain/loopback.hpp) for tests and for programs
// that run the PS in a thread beside their training loop.
//
// Threads: a transport, and the transfers it returns, belong to the one
// thread that drives it (the server's or the client's); it is not safe to
// call from two threads at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pstrain::ps {

using clock = std::chrono::steady_clock;

enum class channel : std::uint8_t { control = 0, payload = 1 };

// One send or receive in flight (what MPI and UCX call a request; in
// pstrain a request is a message that asks a PS for something).  A
// default-constructed transfer is complete and succeeded (an operation
// that was not needed).
class transfer {
public:
    // What a transport implements for each operation it starts.
    class operation {
    public:
        virtual ~operation() = default;
        virtual bool complete() = 0;              // polls; true once complete
        virtual bool ok() const = 0;              // after complete(): it succeeded
        virtual std::size_t length() const = 0;   // after complete(): bytes received
        virtual std::string failure() const = 0;  // after complete() and !ok(): why
        virtual void cancel() = 0;                // a receive still pending completes failed
    };

    transfer() = default;
    explicit transfer(std::unique_ptr<operation> p) : p_(std::move(p)) {}

    bool complete() { return !p_ || p_->complete(); }
    bool ok() const { return !p_ || p_->ok(); }
    std::size_t length() const { return p_ ? p_->length() : 0; }
    std::string failure() const { return p_ ? p_->failure() : std::string(); }
    void cancel()
    {
        if (p_) p_->cancel();
    }

private:
    std::unique_ptr<operation> p_;
};

// Memory registered with the transport, which peers on the same host can
// map (transport::map).  Zero-filled.
class exchange_memory {
public:
    virtual ~exchange_memory() = default;
    virtual void* data() const = 0;
    virtual std::size_t size() const = 0;
    // What a peer needs to map it (its address and size included): send it,
    // with the addresses of what the peer is to use in it.
    virtual std::vector<std::uint8_t> packed_rkey() const = 0;
};

// A peer's exchange_memory, mapped into this process.
class peer_memory {
public:
    virtual ~peer_memory() = default;
    // This process's address for the peer's `bytes` bytes at
    // `remote_address`; nullptr when the memory is not mapped here.  Throws
    // pstrain::error when they are not all inside the memory the rkey
    // described, or not all of that is mapped here: a peer's rkey and
    // addresses are checked, never believed.
    virtual void* local_pointer(std::uint64_t remote_address, std::size_t bytes) const = 0;
};

class transport {
public:
    virtual ~transport() = default;

    virtual std::size_t num_peers() const = 0;
    // How logs and errors name the peer: "ps 0 (n1)", "worker 1 (n2, the chief)".
    virtual std::string peer_name(std::size_t peer) const = 0;

    // Sends `bytes` to `peer`.  The buffer must stay valid and unchanged
    // until the transfer is complete.
    virtual transfer send(std::size_t peer, channel ch, const void* data, std::size_t bytes) = 0;
    // Receives the next message from `peer` into `buffer`; a message longer
    // than `capacity` fails the transfer (nothing is allocated for it).
    virtual transfer recv(std::size_t peer, channel ch, void* buffer, std::size_t capacity) = 0;

    // Makes progress until pred() holds or the deadline passes; returns
    // pred().  Sleeps (rather than spins) when nothing happens for a while.
    virtual bool wait_until(const std::function<bool()>& pred, clock::time_point deadline) = 0;

    // The peer is gone (its process, its node or the link): operations with
    // it fail, and failure() says why.
    virtual bool failed(std::size_t peer) const = 0;
    virtual std::string failure(std::size_t peer) const = 0;
    // How many times a new process has taken the place of a failed peer
    // (a restarted worker that connected and passed the handshake again):
    // when it changes, the peer is no longer failed, and what was posted
    // for the process before (a receive) will never complete.  Transports
    // that take no one back say 0.
    virtual std::uint64_t reconnections(std::size_t peer) const { return 0; }

    // Memory to exchange through; see exchange_memory.
    virtual std::unique_ptr<exchange_memory> allocate(std::size_t bytes) = 0;
    // Maps the memory a peer described by `rkey`; nullptr when this
    // transport cannot (another host, or shared memory not available).
    virtual std::unique_ptr<peer_memory> map(std::size_t peer, std::span<const std::uint8_t> rkey) = 0;

    // Ends every connection: flushes what is queued (within a second), or
    // with `force` drops it (an error path).  Later operations fail.
    virtual void close(bool force) = 0;
};

}  // namespace pstrain::ps
