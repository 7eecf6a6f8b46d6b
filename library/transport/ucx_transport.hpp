// pstrain::ps::transport over UCX: the engine and the endpoints the
// bootstrap connected, tags that say the channel and the sender, receives
// matched per peer, exchange memory from ucp_mem_map that a peer on the
// same host maps with ucp_rkey_ptr.
#pragma once

#include "pstrain/transport.hpp"
#include "library/transport/handshake.hpp"
#include "library/transport/heartbeat.hpp"
#include "library/transport/ucx.hpp"

#include <memory>
#include <string>
#include <vector>

namespace pstrain::ucx {

// The endpoints of one task to its peers.
struct connections {
    // peers[i]: the endpoint to peer i with failure detection (UCX
    // keepalive): it says when a peer is lost.
    std::vector<std::unique_ptr<endpoint>> peers;
    // fast[i]: a second endpoint to the same peer without failure
    // detection, for the messages themselves: UCX then uses every transport
    // it has, shared memory and zero-copy included (an endpoint with
    // failure detection is limited to transports that can detect it, TCP
    // between processes on one node); empty when there is none.
    std::vector<std::unique_ptr<endpoint>> fast;
    std::unique_ptr<listener> listen;
    // tokens[i]: the tokens the handshake with peer i gave (handshake.hpp).
    std::vector<pair_tokens> tokens;
    // A PS with a listener keeps its gate open: a connection that comes
    // later is challenged and refused, and named in the log.
    std::unique_ptr<gate> door;

    ucp_ep_h data_ep(std::size_t i) const { return i < fast.size() && fast[i] ? fast[i]->get() : peers[i]->get(); }
};

// Tags: channel (8 bits) | sender's index among its peers' peers (24 bits)
// | the pair's token for that direction (32 bits, handshake.hpp).
// Channel 2 carries the handshake (token 0).
inline constexpr std::uint64_t tag_channel_mask = 0xff00000000000000ull;
inline constexpr std::uint64_t tag_sender_mask = 0x00ffffff00000000ull;
inline constexpr std::uint64_t tag_full_mask = ~0ull;
inline constexpr std::uint8_t bootstrap_channel = 2;
// Channel 3 carries heartbeats (heartbeat.hpp), on the failure-detecting
// endpoints, with the pair's tokens.
inline constexpr std::uint8_t heartbeat_channel = 3;
inline std::uint64_t make_tag(std::uint8_t channel, std::uint32_t sender, std::uint32_t token = 0)
{
    return (std::uint64_t(channel) << 56) | (std::uint64_t(sender & 0xffffff) << 32) | token;
}

class ucx_transport : public ps::transport {
public:
    // `my_index`: how the peers number this task (a worker's index at a
    // PS, a PS's index at a worker); `names[i]`: how to name peer i;
    // `addresses[i]`: its IP address (for messages; may be empty);
    // `beats`: heartbeats to and from every peer (none with interval 0).
    ucx_transport(std::unique_ptr<context> ctx, std::unique_ptr<engine> eng, connections conns, std::uint32_t my_index,
                  std::vector<std::string> names, heartbeat_config beats = {}, std::vector<std::string> addresses = {});
    ~ucx_transport() override;

    std::size_t num_peers() const override { return names_.size(); }
    std::string peer_name(std::size_t peer) const override { return names_.at(peer); }
    ps::transfer send(std::size_t peer, ps::channel ch, const void* data, std::size_t bytes) override;
    ps::transfer recv(std::size_t peer, ps::channel ch, void* buffer, std::size_t capacity) override;
    bool wait_until(const std::function<bool()>& pred, ps::clock::time_point deadline) override;
    bool failed(std::size_t peer) const override;
    std::string failure(std::size_t peer) const override;
    std::uint64_t reconnections(std::size_t peer) const override { return reconnections_.at(peer); }
    std::unique_ptr<ps::exchange_memory> allocate(std::size_t bytes) override;
    std::unique_ptr<ps::peer_memory> map(std::size_t peer, std::span<const std::uint8_t> rkey) override;
    void close(bool force) override;

    engine& ucx_engine() { return *engine_; }
    // Messages dropped because they carried no pair's token.
    std::uint64_t dropped() const { return dropped_; }

private:
    // Every few milliseconds of waiting: the gate's business, and messages
    // from processes that did not pass the handshake dropped.
    void guard();
    void drop_foreign_messages();
    // Heartbeats: receives reaped, a round sent when due, silence judged.
    void beat();
    // A restarted worker passed the gate: its connection replaces the lost one's.
    void replace(gate::rejoin& r);

    std::unique_ptr<context> ctx_;
    std::unique_ptr<engine> engine_;
    connections conns_;
    std::uint32_t me_;
    std::vector<std::string> names_;
    ps::clock::time_point next_guard_{};
    std::uint64_t dropped_ = 0;
    bool closed_ = false;
    std::vector<std::uint8_t> scratch_;  // what dropped messages are received into
    std::vector<request> drops_;
    std::vector<std::string> addresses_;
    silence_tracker silence_;
    std::vector<std::uint64_t> beat_in_;  // one receive buffer per peer
    std::vector<request> beat_recv_;      // the posted heartbeat receive per peer
    std::vector<request> beat_send_;      // the last heartbeat sent per peer
    std::vector<char> beat_posted_;       // beat_recv_[i] is a posted receive
    std::uint64_t beat_out_ = 0;
    std::vector<std::uint64_t> reconnections_;  // per peer
};

}  // namespace pstrain::ucx
