#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE handshake
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "library/transport/handshake.hpp"
#include "library/transport/ucx.hpp"
#include "library/transport/ucx_transport.hpp"

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

using namespace pstrain::ucx;
using clock_type = std::chrono::steady_clock;

namespace {

auth_key key_of(std::uint8_t fill)
{
    auth_key k{};
    k.fill(fill);
    return k;
}

// One side of a connection: its own UCX context and engine.
struct side {
    side() : ctx(std::make_unique<context>()), w(std::make_unique<engine>(*ctx, progress_mode::spin)) {}
    std::unique_ptr<context> ctx;
    std::unique_ptr<engine> w;
};

gate::config ps_config(const auth_key& key, std::size_t workers)
{
    gate::config c;
    c.key = key;
    c.ps_index = 0;
    c.num_workers = workers;
    c.worker_name = [](std::size_t i) { return "worker " + std::to_string(i); };
    return c;
}

// The worker's side of a handshake in a thread of its own; what it got.
struct worker_thread {
    worker_thread(side& s, ucp_ep_h ep, const auth_key& key, std::uint32_t index)
        : t([&s, ep, key, index, this] {
              try {
                  auto deadline = clock_type::now() + std::chrono::seconds(10);
                  result =
                      answer_challenge(*s.w, ep, key, 0, index, {}, deadline, deadline, "ps 0", [] { return false; });
              } catch (const pstrain::error& e) {
                  failure = e.what();
              }
              finished = true;
          })
    {}
    ~worker_thread() { t.join(); }
    std::optional<pair_tokens> result;
    std::string failure;
    std::atomic<bool> finished{false};
    std::thread t;
};

}  // namespace

BOOST_AUTO_TEST_CASE(keys_are_64_hex_digits)
{
    auto k = parse_key(std::string(62, '0') + "aF");
    BOOST_REQUIRE(k);
    BOOST_TEST((*k)[31] == 0xaf);
    BOOST_TEST((*k)[0] == 0);
    BOOST_TEST(!parse_key(std::string(63, 'a')));
    BOOST_TEST(!parse_key(std::string(66, 'a')));
    BOOST_TEST(!parse_key(std::string(63, 'a') + "g"));
    BOOST_TEST(!parse_key(""));
    BOOST_TEST(random_key() != random_key());
    BOOST_TEST(random_nonce() != random_nonce());
}

BOOST_AUTO_TEST_CASE(proofs_depend_on_key_nonces_indices_and_side)
{
    const auto k = key_of(1);
    const auto a = random_nonce(), b = random_nonce();
    const auto base = worker_proof(k, a, b, 0, 1);
    BOOST_TEST((base == worker_proof(k, a, b, 0, 1)));
    BOOST_TEST((base != worker_proof(key_of(2), a, b, 0, 1)));
    BOOST_TEST((base != worker_proof(k, b, a, 0, 1)));
    BOOST_TEST((base != worker_proof(k, a, b, 1, 1)));
    BOOST_TEST((base != worker_proof(k, a, b, 0, 2)));
    BOOST_TEST((base != ps_proof(k, a, b, 0, 1)));  // a PS's proof is no worker's
    // The two sides agree on the tokens, one a direction, and fresh nonces
    // give other tokens.
    auto w = worker_tokens(k, a, b, 0, 1);
    auto p = ps_tokens(k, a, b, 0, 1);
    BOOST_TEST(w.send_token == p.recv_token);
    BOOST_TEST(w.recv_token == p.send_token);
    BOOST_TEST(w.send_token != w.recv_token);
    BOOST_TEST(worker_tokens(k, a, random_nonce(), 0, 1).send_token != w.send_token);
}

BOOST_AUTO_TEST_CASE(tags_carry_channel_sender_and_token)
{
    auto t = split_tag(make_tag(1, 0x123456, 0xdeadbeef));
    BOOST_TEST(t.channel == 1);
    BOOST_TEST(t.sender == 0x123456u);
    BOOST_TEST(t.token == 0xdeadbeefu);
}

BOOST_AUTO_TEST_CASE(workers_with_the_key_get_in_and_agree_on_tokens)
{
    side ps, w0, w1;
    const auto key = random_key();
    auto to0 = endpoint::to_address(*ps.w, w0.w->address(), "worker 0");
    auto to1 = endpoint::to_address(*ps.w, w1.w->address(), "worker 1");
    auto from0 = endpoint::to_address(*w0.w, ps.w->address(), "ps 0");
    auto from1 = endpoint::to_address(*w1.w, ps.w->address(), "ps 0");
    gate g(*ps.w, ps_config(key, 2));
    worker_thread a(w0, from0->get(), key, 0), b(w1, from1->get(), key, 1);
    g.challenge(0, to0->get());
    g.challenge(1, to1->get());
    ps.w->wait_until(
        [&] {
            g.poll();
            return g.complete() && a.finished && b.finished;
        },
        clock_type::now() + std::chrono::seconds(10));
    BOOST_REQUIRE(g.complete());
    BOOST_REQUIRE(a.result);
    BOOST_REQUIRE(b.result);
    BOOST_TEST(a.result->send_token == g.tokens()[0].recv_token);
    BOOST_TEST(a.result->recv_token == g.tokens()[0].send_token);
    BOOST_TEST(b.result->send_token == g.tokens()[1].recv_token);
    BOOST_TEST(a.result->send_token != b.result->send_token);
    BOOST_TEST(g.refused() == 0u);
}

BOOST_AUTO_TEST_CASE(a_worker_with_another_key_is_refused_and_told)
{
    side ps, w0;
    auto to0 = endpoint::to_address(*ps.w, w0.w->address(), "worker 0");
    auto from0 = endpoint::to_address(*w0.w, ps.w->address(), "ps 0");
    gate g(*ps.w, ps_config(key_of(7), 1));
    worker_thread a(w0, from0->get(), key_of(8), 0);
    g.challenge(0, to0->get());
    ps.w->wait_until(
        [&] {
            g.poll();
            return a.finished.load();
        },
        clock_type::now() + std::chrono::seconds(10));
    BOOST_REQUIRE(a.finished);
    BOOST_TEST(!a.result);
    BOOST_TEST(a.failure.find("ps 0 refused this worker: its proof does not match this job step's key") !=
                   std::string::npos,
               a.failure);
    BOOST_TEST(!g.complete());
    BOOST_TEST(g.refused() == 1u);
    BOOST_REQUIRE(g.missing().size() == 1u);
    BOOST_TEST(g.missing()[0].find("worker 0 (its proof does not match") == 0u, g.missing()[0]);
}

BOOST_AUTO_TEST_CASE(a_worker_claiming_another_index_is_refused)
{
    side ps, w0;
    const auto key = random_key();
    auto to0 = endpoint::to_address(*ps.w, w0.w->address(), "worker 0");
    auto from0 = endpoint::to_address(*w0.w, ps.w->address(), "ps 0");
    gate g(*ps.w, ps_config(key, 2));
    worker_thread a(w0, from0->get(), key, 1);  // challenged as worker 0
    g.challenge(0, to0->get());
    ps.w->wait_until(
        [&] {
            g.poll();
            return a.finished.load();
        },
        clock_type::now() + std::chrono::seconds(10));
    BOOST_TEST(!a.result);
    BOOST_TEST(a.failure.find("not a worker this PS expects") != std::string::npos, a.failure);
    BOOST_TEST(g.refused() == 1u);
}

// Past the handshake: a message with a worker's tag but not its pair's
// token reaches nobody and is counted; the worker's own gets through.
BOOST_AUTO_TEST_CASE(messages_without_the_pairs_token_are_dropped)
{
    side worker, rogue;
    auto ps_ctx = std::make_unique<context>();
    auto ps_engine = std::make_unique<engine>(*ps_ctx, progress_mode::spin);
    auto ps_address = ps_engine->address();
    connections c;
    c.peers.push_back(endpoint::to_address(*ps_engine, worker.w->address(), "worker 0"));
    c.tokens.push_back({0x1111, 0x2222});  // what a handshake gave
    ucx_transport ps(std::move(ps_ctx), std::move(ps_engine), std::move(c), 0, {"worker 0"});

    auto legit = endpoint::to_address(*worker.w, ps_address, "ps 0");
    auto evil = endpoint::to_address(*rogue.w, ps_address, "ps 0");
    const char bad[] = "EVIL", good[] = "GOOD";
    std::vector<char> big(1 << 20, 'x');  // goes by rendezvous
    auto s1 = rogue.w->send(evil->get(), make_tag(0, 0, 0x2221), bad, sizeof bad);
    auto s2 = rogue.w->send(evil->get(), make_tag(0, 0, 0), big.data(), big.size());
    auto s3 = rogue.w->send(evil->get(), make_tag(0, 5, 0x2222), bad, sizeof bad);  // no such peer
    // Let the rogue's messages arrive first.
    ps.wait_until(
        [&] {
            rogue.w->progress();
            return ps.dropped() >= 3;
        },
        clock_type::now() + std::chrono::seconds(5));
    auto s4 = worker.w->send(legit->get(), make_tag(0, 0, 0x2222), good, sizeof good);
    char got[16] = {};
    auto r = ps.recv(0, pstrain::ps::channel::control, got, sizeof got);
    bool ok = ps.wait_until(
        [&] {
            worker.w->progress();
            rogue.w->progress();
            return r.complete() && s1.done() && s2.done() && s3.done() && s4.done();
        },
        clock_type::now() + std::chrono::seconds(10));
    BOOST_REQUIRE(ok);
    BOOST_TEST(r.ok());
    BOOST_TEST(std::string(got) == "GOOD");
    BOOST_TEST(ps.dropped() == 3u);
}
