#include "library/transport/handshake.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "library/transport/ucx_transport.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

namespace pstrain::ucx {

using clock = std::chrono::steady_clock;

namespace {

template <std::size_t N>
std::array<std::uint8_t, N> random_bytes()
{
    std::array<std::uint8_t, N> out{};
    if (RAND_bytes(out.data(), static_cast<int>(N)) != 1)
        throw error(
            "the system's random source failed (OpenSSL RAND_bytes): cannot make a key for peer authentication");
    return out;
}

// HMAC-SHA256(key, label | ps nonce | worker nonce | ps index | worker index).
mac keyed(const auth_key& key, std::string_view label, const nonce& ps_nonce, const nonce& worker_nonce,
          std::uint32_t ps, std::uint32_t worker)
{
    std::vector<std::uint8_t> message(label.begin(), label.end());
    message.push_back(0);
    message.insert(message.end(), ps_nonce.begin(), ps_nonce.end());
    message.insert(message.end(), worker_nonce.begin(), worker_nonce.end());
    for (std::uint32_t v : {ps, worker})
        for (int i = 0; i < 4; ++i) message.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    mac out{};
    unsigned int length = 0;
    if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), message.data(), message.size(), out.data(),
              &length) ||
        length != out.size())
        throw error("HMAC-SHA256 failed (OpenSSL): cannot authenticate peers");
    return out;
}

bool same(const mac& a, const mac& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

std::uint32_t word(const mac& m, std::size_t at)
{
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v |= std::uint32_t(m[at + i]) << (8 * i);
    return v;
}

std::string address_of(ucp_conn_request_h request)
{
    ucp_conn_request_attr_t attr{};
    attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    if (ucp_conn_request_query(request, &attr) != UCS_OK) return "an unknown address";
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (attr.client_address.ss_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(&attr.client_address);
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        port = ntohs(in->sin_port);
        return fmt::format("{}:{}", host, port);
    }
    if (attr.client_address.ss_family == AF_INET6) {
        const auto* in = reinterpret_cast<const sockaddr_in6*>(&attr.client_address);
        inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
        port = ntohs(in->sin6_port);
        return fmt::format("[{}]:{}", host, port);
    }
    return "an address of an unknown family";
}

}  // namespace

auth_key random_key() { return random_bytes<32>(); }
nonce random_nonce() { return random_bytes<16>(); }

std::optional<auth_key> parse_key(std::string_view hex)
{
    if (hex.size() != 64) return std::nullopt;
    auth_key key{};
    auto digit = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    for (std::size_t i = 0; i < key.size(); ++i) {
        int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return std::nullopt;
        key[i] = static_cast<std::uint8_t>(hi * 16 + lo);
    }
    return key;
}

mac worker_proof(const auth_key& key, const nonce& ps_nonce, const nonce& worker_nonce, std::uint32_t ps,
                 std::uint32_t worker)
{
    return keyed(key, "pstrain worker proof 1", ps_nonce, worker_nonce, ps, worker);
}

mac ps_proof(const auth_key& key, const nonce& ps_nonce, const nonce& worker_nonce, std::uint32_t ps,
             std::uint32_t worker)
{
    return keyed(key, "pstrain ps proof 1", ps_nonce, worker_nonce, ps, worker);
}

pair_tokens worker_tokens(const auth_key& key, const nonce& ps_nonce, const nonce& worker_nonce, std::uint32_t ps,
                          std::uint32_t worker)
{
    auto m = keyed(key, "pstrain session tokens 1", ps_nonce, worker_nonce, ps, worker);
    return {word(m, 0), word(m, 4)};
}

pair_tokens ps_tokens(const auth_key& key, const nonce& ps_nonce, const nonce& worker_nonce, std::uint32_t ps,
                      std::uint32_t worker)
{
    auto s = worker_tokens(key, ps_nonce, worker_nonce, ps, worker);
    return {s.recv_token, s.send_token};
}

tag_parts split_tag(std::uint64_t tag)
{
    return {static_cast<std::uint8_t>(tag >> 56), static_cast<std::uint32_t>((tag >> 32) & 0xffffff),
            static_cast<std::uint32_t>(tag & 0xffffffffu)};
}

// -------------------------------------------------------------------- gate

struct gate::pending {
    nonce ps_nonce{};
    std::optional<std::size_t> worker;   // PMIx: who must answer
    std::string from;                    // how logs name the peer
    std::unique_ptr<endpoint> accepted;  // static spec: the connection
    ucp_ep_h ep = nullptr;               // where the challenge went
    challenge_frame frame;               // stays alive while it is sent
    request sent;
    clock::time_point since;
};

gate::gate(engine& w, config c)
    : w_(w), cfg_(std::move(c)), peers_(cfg_.num_workers), tokens_(cfg_.num_workers), done_(cfg_.num_workers, false),
      why_(cfg_.num_workers), buffer_(sizeof(response_frame) + response_frame::max_address)
{
    post_receive();
}

gate::~gate()
{
    if (receiving_) {
        receive_.cancel(w_.get());
        try {
            w_.wait_until([&] { return receive_.done(); }, clock::now() + std::chrono::seconds(1));
        } catch (...) {}
    }
}

void gate::post_receive()
{
    receive_ = w_.recv(make_tag(bootstrap_channel, 0), tag_channel_mask, buffer_.data(), buffer_.size());
    receiving_ = true;
}

void gate::challenge(std::size_t worker, ucp_ep_h ep)
{
    auto p = std::make_unique<pending>();
    p->ps_nonce = random_nonce();
    p->worker = worker;
    p->from = cfg_.worker_name(worker);
    p->ep = ep;
    p->frame.ps_index = cfg_.ps_index;
    p->frame.ps_nonce = p->ps_nonce;
    p->since = clock::now();
    p->sent = w_.send(ep, make_tag(bootstrap_channel, cfg_.ps_index), &p->frame, sizeof p->frame);
    pending_.push_back(std::move(p));
}

void gate::accept(listener& l)
{
    auto& requests = l.pending();
    for (auto* r : requests) {
        auto p = std::make_unique<pending>();
        p->from = address_of(r);
        try {
            p->accepted = endpoint::accept(w_, r, "a connecting peer at " + p->from);
        } catch (const error& e) {
            log::warn("refused a connection from {}: {}", p->from, e.what());
            continue;
        }
        log::debug("connection from {}: sending a challenge", p->from);
        p->ps_nonce = random_nonce();
        p->ep = p->accepted->get();
        p->frame.ps_index = cfg_.ps_index;
        p->frame.ps_nonce = p->ps_nonce;
        p->since = clock::now();
        p->sent = w_.send(p->ep, make_tag(bootstrap_channel, cfg_.ps_index), &p->frame, sizeof p->frame);
        pending_.push_back(std::move(p));
    }
    requests.clear();
}

void gate::refuse(pending& p, std::uint32_t claimed, const std::string& why)
{
    ++refused_;
    if (p.worker) why_[*p.worker] = why;
    w_.wait_until([&] { return p.sent.done(); }, clock::now() + std::chrono::milliseconds(200));
    log::warn("refused {}{}: {}", p.from,
              p.worker
                  ? std::string()
                  : fmt::format(" (it said it was {})", claimed < cfg_.num_workers ? cfg_.worker_name(claimed)
                                                                                   : fmt::format("worker {}", claimed)),
              why);
    // Tell it, so that a task of this job with the wrong key stops at once.
    auto no = std::make_unique<confirm_frame>();
    no->magic = confirm_frame::refused_value;
    no->ps_index = cfg_.ps_index;
    std::snprintf(no->why, sizeof no->why, "%s", why.c_str());
    auto r = w_.send(p.ep, make_tag(bootstrap_channel, cfg_.ps_index), no.get(), sizeof *no);
    w_.wait_until([&] { return r.done(); }, clock::now() + std::chrono::milliseconds(200));
    if (!r.done()) r.cancel(w_.get());
    // Flushed, so that the refusal gets there before the connection ends.
    if (p.accepted) p.accepted->close(std::chrono::milliseconds(200), false);
}

void gate::handle(std::size_t length)
{
    response_frame answer;
    if (length < sizeof answer) {
        if (malformed_++ == 0 || malformed_ % 1000 == 0)
            log::warn(
                "refused {} malformed handshake message{} ({} bytes, shorter than an answer) from an unknown peer",
                malformed_, malformed_ == 1 ? "" : "s", length);
        return;
    }
    std::memcpy(&answer, buffer_.data(), sizeof answer);
    auto it = std::find_if(pending_.begin(), pending_.end(), [&](const auto& p) {
        return CRYPTO_memcmp(p->ps_nonce.data(), answer.ps_nonce.data(), answer.ps_nonce.size()) == 0;
    });
    if (answer.magic != response_frame::magic_value || it == pending_.end()) {
        if (malformed_++ == 0 || malformed_ % 1000 == 0)
            log::warn("refused {} handshake message{} that answer no challenge of this PS (from an unknown peer)",
                      malformed_, malformed_ == 1 ? "" : "s");
        return;
    }
    std::unique_ptr<pending> p = std::move(*it);
    pending_.erase(it);
    const std::uint32_t worker = answer.worker_index;
    const auto expected = worker_proof(cfg_.key, p->ps_nonce, answer.worker_nonce, cfg_.ps_index, worker);
    if (!same(expected, answer.proof)) {
        refuse(
            *p, worker,
            "its proof does not match this job step's key (a process of another job, or a different PSTRAIN_AUTH_KEY)");
        return;
    }
    if (worker >= cfg_.num_workers || (p->worker && *p->worker != worker)) {
        refuse(*p, worker,
               fmt::format("it holds the key but is not a worker this PS expects ({} workers)", cfg_.num_workers));
        return;
    }
    const bool again = done_[worker];
    if (again && !(failed_ && !p->worker && failed_(worker))) {
        refuse(*p, worker,
               fmt::format("{} is already connected (a restarted task takes its place only once this PS has lost "
                           "it, and only under a static cluster spec)",
                           cfg_.worker_name(worker)));
        return;
    }
    std::unique_ptr<endpoint> back;  // again: the new connection
    const bool with_address = !p->worker;
    if (with_address) {
        if (answer.address_bytes == 0 || answer.address_bytes > response_frame::max_address ||
            length != sizeof answer + answer.address_bytes) {
            refuse(*p, worker,
                   fmt::format("its answer's address length ({} bytes in a {}-byte message) is wrong",
                               answer.address_bytes, length));
            return;
        }
        try {
            auto ep = endpoint::to_address(w_, std::span(buffer_.data() + sizeof answer, answer.address_bytes),
                                           cfg_.worker_name(worker));
            (again ? back : peers_[worker]) = std::move(ep);
        } catch (const error& e) {
            refuse(*p, worker, e.what());
            return;
        }
    }
    auto yes = std::make_unique<confirm_frame>();
    yes->ps_index = cfg_.ps_index;
    yes->proof = ps_proof(cfg_.key, p->ps_nonce, answer.worker_nonce, cfg_.ps_index, worker);
    auto r = w_.send(p->ep, make_tag(bootstrap_channel, cfg_.ps_index), yes.get(), sizeof *yes);
    w_.wait_until([&] { return r.done(); }, clock::now() + std::chrono::seconds(5));
    if (!r.done() || r.status() != UCS_OK) {
        if (!r.done()) r.cancel(w_.get());
        refuse(*p, worker, "it did not take the confirmation");
        return;
    }
    tokens_[worker] = ps_tokens(cfg_.key, p->ps_nonce, answer.worker_nonce, cfg_.ps_index, worker);
    done_[worker] = true;
    why_[worker].clear();
    if (p->accepted) accepted_.push_back(std::move(p->accepted));
    if (again) rejoined_.push_back({worker, std::move(back), tokens_[worker]});
    log::debug("{} authenticated{}{}", cfg_.worker_name(worker), p->worker ? std::string() : " (from " + p->from + ")",
               again ? ", in place of the one this PS lost" : "");
}

void gate::admit_from(std::size_t first)
{
    for (std::size_t i = first; i < done_.size(); ++i) {
        done_[i] = true;
        why_[i].clear();
    }
}

void gate::poll()
{
    while (receiving_ && receive_.done()) {
        receiving_ = false;
        if (receive_.status() == UCS_OK) handle(receive_.length());
        else if (receive_.status() == UCS_ERR_MESSAGE_TRUNCATED) {
            if (malformed_++ == 0 || malformed_ % 1000 == 0)
                log::warn("refused {} handshake message{} longer than an answer can be (from an unknown peer)",
                          malformed_, malformed_ == 1 ? "" : "s");
        }
        post_receive();
    }
    const auto now = clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
        auto& p = **it;
        // PMIx peers are waited for by the bootstrap's own deadline.
        if (!p.worker && now - p.since > cfg_.answer_within) {
            ++refused_;
            log::warn("refused {}: no answer to this PS's challenge within {}s", p.from, cfg_.answer_within.count());
            if (p.accepted) p.accepted->close(std::chrono::milliseconds(100), true);
            it = pending_.erase(it);
        } else {
            ++it;
        }
    }
}

bool gate::complete() const
{
    return std::all_of(done_.begin(), done_.end(), [](bool d) { return d; });
}

std::vector<std::string> gate::missing() const
{
    std::vector<std::string> out;
    for (std::size_t i = 0; i < done_.size(); ++i)
        if (!done_[i])
            out.push_back(why_[i].empty() ? cfg_.worker_name(i) : fmt::format("{} ({})", cfg_.worker_name(i), why_[i]));
    return out;
}

void gate::close(bool force)
{
    for (auto& p : pending_)
        if (p->accepted) p->accepted->close(std::chrono::milliseconds(100), true);
    pending_.clear();
    for (auto& ep : accepted_)
        if (ep) ep->close(std::chrono::milliseconds(force ? 100 : 500), force);
}

// ------------------------------------------------------------- the worker

std::optional<pair_tokens> answer_challenge(engine& w, ucp_ep_h ep, const auth_key& key, std::uint32_t ps_index,
                                            std::uint32_t worker_index, std::span<const std::uint8_t> address,
                                            clock::time_point challenge_by, clock::time_point deadline,
                                            const std::string& ps_name, const std::function<bool()>& lost)
{
    const auto from_ps = make_tag(bootstrap_channel, ps_index);
    challenge_frame challenge;
    auto got = w.recv(from_ps, tag_full_mask, &challenge, sizeof challenge);
    w.wait_until([&] { return got.done() || lost(); }, challenge_by);
    if (!got.done() || lost()) {
        if (!got.done()) {
            got.cancel(w.get());
            w.wait_until([&] { return got.done(); }, clock::now() + std::chrono::seconds(1));
        }
        return std::nullopt;
    }
    if (got.status() != UCS_OK || got.length() != sizeof challenge || challenge.magic != challenge_frame::magic_value ||
        challenge.ps_index != ps_index)
        throw error(fmt::format(
            "bootstrap: {} did not start the handshake as a pstrain PS does ({} bytes{}): another program on its port?",
            ps_name, got.length(), got.status() == UCS_OK ? "" : std::string(", ") + ucs_status_string(got.status())));

    response_frame answer;
    answer.worker_index = worker_index;
    answer.ps_nonce = challenge.ps_nonce;
    answer.worker_nonce = random_nonce();
    answer.proof = worker_proof(key, answer.ps_nonce, answer.worker_nonce, ps_index, worker_index);
    answer.address_bytes = address.size();
    confirm_frame confirm;
    auto reply = w.recv(from_ps, tag_full_mask, &confirm, sizeof confirm);
    const ucp_dt_iov_t iov[2] = {{&answer, sizeof answer}, {const_cast<std::uint8_t*>(address.data()), address.size()}};
    auto sent = w.send(ep, make_tag(bootstrap_channel, worker_index), std::span(iov, address.empty() ? 1 : 2));
    bool answered = w.wait_until([&] { return (sent.done() && reply.done()) || lost(); }, deadline);
    // A refusal can come just before the PS ends the connection.
    const bool refused = reply.done() && reply.status() == UCS_OK && confirm.magic == confirm_frame::refused_value;
    if (!refused && (!answered || lost() || sent.status() != UCS_OK)) {
        if (!reply.done()) reply.cancel(w.get());
        w.wait_until([&] { return reply.done() && sent.done(); }, clock::now() + std::chrono::seconds(1));
        throw error(fmt::format("bootstrap: {} did not confirm the handshake in time{}", ps_name,
                                lost() ? " (the connection was lost)" : ""));
    }
    if (reply.status() != UCS_OK || reply.length() != sizeof confirm)
        throw error(fmt::format("bootstrap: {} answered the handshake with a malformed message", ps_name));
    if (confirm.magic == confirm_frame::refused_value) {
        confirm.why[sizeof confirm.why - 1] = 0;
        const bool key = std::string_view(confirm.why).starts_with("its proof");
        throw error(fmt::format("bootstrap: {} refused this worker: {}{}", ps_name, confirm.why,
                                key ? ": every task of a job must have the same key (PSTRAIN_AUTH_KEY with a static "
                                      "cluster spec)"
                                    : ""));
    }
    if (confirm.magic != confirm_frame::magic_value || confirm.ps_index != ps_index ||
        !same(confirm.proof, ps_proof(key, answer.ps_nonce, answer.worker_nonce, ps_index, worker_index)))
        throw error(
            fmt::format("bootstrap: {} did not prove that it holds this job step's key: another job's PS on that "
                        "address, or a different PSTRAIN_AUTH_KEY",
                        ps_name));
    return worker_tokens(key, answer.ps_nonce, answer.worker_nonce, ps_index, worker_index);
}

}  // namespace pstrain::ucx
