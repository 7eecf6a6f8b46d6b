// A client's request/reply exchange with its PS tasks: one `operation` is
// one request to one PS and the reply it waits for; `exchange` posts an
// operation's receives and sends, waits for a set of them and checks each
// reply against what was asked (its kind, range, lengths), throwing a
// pstrain::peer_error that names the PS when a reply is missing, refused
// or wrong; the client's other waits (a send, a spare's word) go through
// wait_for.  It knows no verbs: the client decides what to ask.
//
// An exchange is used by the client's thread only.
#pragma once

#include "pstrain/client.hpp"
#include "pstrain/transport.hpp"
#include "library/ps/activity_recorder.hpp"
#include "library/ps/phase_clock.hpp"
#include "library/ps/protocol.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace pstrain::ps {

// One request to one PS, part of a ticket.  Its frames live here until its
// transfers are complete.
struct operation {
    std::size_t ps = 0;  // the PS (its shard); exchange::peer() says which transport peer holds it
    shard_range part;
    wire::kind expected = wire::kind::values;  // the reply's kind
    bool shared = false;                       // through the mapped buffers
    wire::frame out, in;
    transfer send, payload_send, recv, payload_recv;
    std::vector<wire::worker_counters> counters;  // a stats reply's payload
    // Sparse: the keys sent (a pull's payload), a push's payload (keys then
    // gradients), the rows received and where each goes in the caller's out.
    std::vector<std::uint64_t> keys;
    std::vector<std::uint8_t> bytes;  // also a dense push's payload in bf16
    std::vector<float> rows;
    // bf16: a values or rows reply's payload, received aside and widened
    // where it goes (the values buffer, `rows`) once checked.
    std::vector<std::uint8_t> numbers_in;
    std::vector<std::uint32_t> places;
    float* scatter_to = nullptr;
    std::uint32_t table = 0, dim = 0;

    bool is_abort() { return recv.complete() && recv.ok() && in.kind == static_cast<std::uint16_t>(wire::kind::abort); }
    bool pending()
    {
        return !recv.complete() || !send.complete() || !payload_send.complete() ||
               (recv.ok() && in.payload_bytes > 0 && !payload_recv.complete());
    }
    // A whole reply counts even if its PS goes away right after it (a PS
    // exits once the chief has ended training).
    bool whole()
    {
        return !pending() && recv.ok() && send.ok() && payload_send.ok() &&
               (in.payload_bytes == 0 || payload_recv.ok());
    }
};

// The client's profile: its phases, in this order.
enum client_phase : std::size_t { outside, starting, issuing, waiting, checking };
using client_clock = phase_clock<5>;
inline const client_clock::names client_phase_names{
    {{"outside", "outside the client's calls (the program's own work: computing gradients)"},
     {"start", "the first words with every PS (waiting for the chief's initialisation)"},
     {"issue", "encoding requests and posting their sends and receives"},
     {"wait", "waiting for the replies"},
     {"check", "checking the replies"}}};

class exchange {
public:
    // `values` is element 0 of the client's values buffer: a values reply's
    // payload lands at its range there.
    // Values and rows travel as `precision`.  The PS tasks are net's first
    // num_ps peers.
    exchange(transport& net, std::size_t num_ps, float* values, std::chrono::seconds timeout,
             std::vector<std::string> worker_names, activity_recorder& activity,
             wire_precision precision = wire_precision::fp32);

    // Posts the operation's receives first, so that replies land in place,
    // then sends its frame (`out`, already encoded: its kind says what the
    // reply carries) and `payload` (out.payload_bytes bytes).
    void post_and_send(operation& op, const void* payload);
    // Waits for every operation's reply (timing the wait as `phase` of
    // `profile`); throws pstrain::peer_error naming the PS that was lost,
    // did not answer, refused, ended training or answered wrongly.
    void wait(std::vector<operation>& ops, client_clock& profile, client_phase phase);
    // True when no operation waits any longer (polls once; a lost PS or an
    // abort counts as an answer: wait() then throws).
    bool test(std::vector<operation>& ops);
    // Any other wait (for a send, a spare's word, owed replies): until
    // pred() holds, the timeout (--peer-timeout) or `within` at most;
    // meanwhile activity() says `what` (a string literal; null: the wait is
    // not recorded) with `peers` pending.  False when the time ran out.
    bool wait_for(std::span<const std::size_t> peers, const char* what, const std::function<bool()>& pred)
    {
        return wait_for(peers, what, pred, timeout_);
    }
    bool wait_for(std::span<const std::size_t> peers, const char* what, const std::function<bool()>& pred,
                  std::chrono::seconds within);
    std::chrono::seconds timeout() const { return timeout_; }

    // The transport peer that holds PS p's shard: p, until a spare stands
    // in for it (reroute).  An operation's `ps` is the PS; its messages go
    // to that peer.
    std::size_t peer(std::size_t p) const { return route_[p]; }
    std::size_t peer(const operation& op) const { return route_[op.ps]; }
    void reroute(std::size_t p, std::size_t peer) { route_[p] = peer; }
    // Every PS's peer, in PS order.
    std::vector<std::size_t> ps_peers() const { return route_; }

private:
    void check_reply(operation& op, const std::string& who) const;
    void widen_reply(operation& op) const;
    // True when one of `op`'s transfers ended in an error, or its PS is lost.
    bool has_failed(operation& op) const;
    [[noreturn]] void throw_incomplete(operation& op, const std::string& who, bool in_time) const;
    std::string lost_worker(std::uint32_t index) const;

    transport& net_;
    float* values_;
    const std::chrono::seconds timeout_;
    const std::vector<std::string> worker_names_;
    activity_recorder& activity_;
    const wire_precision precision_;
    std::vector<std::size_t> route_;  // per PS: its peer
};

// What a wait for replies to `k` waits for, for activity().
const char* reply_to(std::uint16_t k);
// The step a push (its gradient's), snapshot or restore request names.
std::uint64_t step_of(const operation& op);

}  // namespace pstrain::ps
