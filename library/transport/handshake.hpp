// The handshake every connection between a PS and a worker starts with:
// proof, both ways, that the peer holds the job step's key, and the
// pair tokens that then mark each of the pair's messages.
//
//   PS -> worker   challenge  {ps index, ps nonce}
//   worker -> PS   response   {worker index, ps nonce, worker nonce,
//                              HMAC-SHA256(key, "worker" | nonces | indices),
//                              the worker's UCX address (static spec only)}
//   PS -> worker   confirm    {HMAC-SHA256(key, "ps" | nonces | indices)}
//                  or refusal {why, in a word}
//
// Both sides then derive two 32-bit tokens from the key and both nonces
// (one a direction); every later message carries its direction's token in
// the low 32 bits of its UCX tag, and receives match all 64 bits, so a
// message from a process that did not pass the handshake matches nothing
// (ucx_transport drops such messages).  Nonces are fresh per connection: a
// recorded handshake or token does not open another.
//
// What this does not do: encrypt or authenticate each message.  A process
// that can read the network between two tasks sees the tokens.
#pragma once

#include "library/transport/ucx.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pstrain::ucx {

using auth_key = std::array<std::uint8_t, 32>;
using nonce = std::array<std::uint8_t, 16>;
using mac = std::array<std::uint8_t, 32>;

// 32 bytes from the system's random source (OpenSSL's RAND_bytes).
auth_key random_key();
nonce random_nonce();
// 64 hex digits; std::nullopt for anything else.
std::optional<auth_key> parse_key(std::string_view hex);

// The tokens of one connection, as one side sees them.
struct pair_tokens {
    std::uint32_t send_token = 0;  // in the tags of what this side sends
    std::uint32_t recv_token = 0;  // in the tags of what it accepts
};

// The proofs and tokens (exposed for the tests).
mac worker_proof(const auth_key& key, const nonce& ps_nonce, const nonce& worker_nonce, std::uint32_t ps,
                 std::uint32_t worker);
mac ps_proof(const auth_key& key, const nonce& ps_nonce, const nonce& worker_nonce, std::uint32_t ps,
             std::uint32_t worker);
pair_tokens worker_tokens(const auth_key& key, const nonce& ps_nonce, const nonce& worker_nonce, std::uint32_t ps,
                          std::uint32_t worker);
pair_tokens ps_tokens(const auth_key& key, const nonce& ps_nonce, const nonce& worker_nonce, std::uint32_t ps,
                      std::uint32_t worker);

#pragma pack(push, 1)
struct challenge_frame {
    static constexpr std::uint32_t magic_value = 0x70736163;  // "psac"
    std::uint32_t magic = magic_value;
    std::uint32_t ps_index = 0;
    nonce ps_nonce{};
};
struct response_frame {
    static constexpr std::uint32_t magic_value = 0x70736172;  // "psar"
    static constexpr std::size_t max_address = 1 << 16;
    std::uint32_t magic = magic_value;
    std::uint32_t worker_index = 0;
    nonce ps_nonce{};
    nonce worker_nonce{};
    mac proof{};
    std::uint64_t address_bytes = 0;  // followed by the address
};
struct confirm_frame {
    static constexpr std::uint32_t magic_value = 0x70736f6b;    // "psok"
    static constexpr std::uint32_t refused_value = 0x7073726e;  // "psrn"
    std::uint32_t magic = magic_value;
    std::uint32_t ps_index = 0;
    mac proof{};
    char why[160] = {};  // a refusal's reason
};
#pragma pack(pop)

// The PS's side: challenges workers, checks their answers, confirms or
// refuses.  A connection through the static spec's listener is named by
// its address ("127.0.0.1:41234"); one made from a PMIx address by the
// worker it must be.
class gate {
public:
    struct config {
        auth_key key{};
        std::uint32_t ps_index = 0;
        std::size_t num_workers = 0;
        std::function<std::string(std::size_t)> worker_name;
        std::chrono::seconds answer_within{10};  // for a challenge's answer
    };

    gate(engine& w, config c);
    ~gate();
    gate(const gate&) = delete;
    gate& operator=(const gate&) = delete;

    // PMIx: challenges worker `worker` on its endpoint.
    void challenge(std::size_t worker, ucp_ep_h ep);
    // Static spec: accepts the listener's connection requests and
    // challenges each; an answer then carries the worker's address.
    void accept(listener& l);
    // Handles what arrived: answers, and challenges left unanswered.
    void poll();

    bool complete() const;  // every worker authenticated
    // Workers not (yet) authenticated, each with why when it was refused.
    std::vector<std::string> missing() const;
    const std::vector<pair_tokens>& tokens() const { return tokens_; }
    // Static spec: the endpoints to the workers' addresses.
    std::vector<std::unique_ptr<endpoint>> take_peers() { return std::move(peers_); }
    // Static spec, after take_peers(): a worker whose connection `failed`
    // says is gone may connect again (a restarted task); the new
    // connections, each with its tokens, until taken.
    struct rejoin {
        std::size_t worker = 0;
        std::unique_ptr<endpoint> ep;
        pair_tokens tokens;
    };
    void let_rejoin(std::function<bool(std::size_t worker)> failed) { failed_ = std::move(failed); }
    // PMIx: every worker passed the handshake already (through PMIx's
    // addresses); the gate only takes back the ones that are lost.
    void admit_all() { admit_from(0); }
    // Workers `first` and later need no handshake now: PMIx's (first 0), or
    // the slots of an elastic job that may grow, which a worker that joins
    // later takes through let_rejoin (their endpoints stay null).
    void admit_from(std::size_t first);
    std::vector<rejoin> take_rejoined() { return std::exchange(rejoined_, {}); }
    std::size_t refused() const { return refused_; }
    void close(bool force);

private:
    struct pending;
    void post_receive();
    void handle(std::size_t length);
    void refuse(pending& p, std::uint32_t claimed, const std::string& why);

    engine& w_;
    config cfg_;
    std::vector<std::unique_ptr<pending>> pending_;
    std::vector<std::unique_ptr<endpoint>> accepted_;  // kept open: the workers send on them
    std::vector<std::unique_ptr<endpoint>> peers_;
    std::vector<pair_tokens> tokens_;
    std::vector<bool> done_;
    std::vector<std::string> why_;
    std::vector<std::uint8_t> buffer_;
    request receive_;
    bool receiving_ = false;
    std::size_t refused_ = 0, malformed_ = 0;
    std::function<bool(std::size_t)> failed_;  // let_rejoin()
    std::vector<rejoin> rejoined_;
};

// The worker's side with PS `ps_index` on `ep`: waits for its challenge
// until `challenge_by` (std::nullopt when none came, or when `lost()` says
// the endpoint failed: the caller may try again), answers, and waits for
// the confirmation until `deadline`.  Throws pstrain::error when the PS
// refuses or fails to prove that it holds the key.
std::optional<pair_tokens> answer_challenge(engine& w, ucp_ep_h ep, const auth_key& key, std::uint32_t ps_index,
                                            std::uint32_t worker_index, std::span<const std::uint8_t> address,
                                            std::chrono::steady_clock::time_point challenge_by,
                                            std::chrono::steady_clock::time_point deadline, const std::string& ps_name,
                                            const std::function<bool()>& lost);

// The tag of a message: channel (8 bits) | sender (24 bits) | token (32).
struct tag_parts {
    std::uint8_t channel;
    std::uint32_t sender;
    std::uint32_t token;
};
tag_parts split_tag(std::uint64_t tag);

}  // namespace pstrain::ucx
