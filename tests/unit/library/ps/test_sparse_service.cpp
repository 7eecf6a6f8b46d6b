#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE sparse_service
#include <boost/test/unit_test.hpp>

#include "pstrain/loopback.hpp"
#include "library/ps/sparse_service.hpp"

#include <chrono>
#include <cstring>
#include <deque>
#include <vector>

using namespace pstrain::ps;

namespace {

// The sparse service of a PS with one table of dim 2, for two workers (the test plays them).
struct two_workers {
    two_workers()
        : net(1, 2), activity({"worker 0", "worker 1"}), profile(server_phase_names()),
          links(net.ps(0), activity, profile), sparse({table()}, hooks, links, state, profile)
    {
        for (std::size_t i = 0; i < links.size(); ++i) {
            links[i].slot = float_buffer(sparse.slot_floats(), 0);
            links.post(i);
        }
    }
    static embedding_config table()
    {
        embedding_config c;
        c.dim = 2;
        return c;
    }
    // Worker w's message `f` with `payload`, taken by the PS.
    void arrive(int w, const wire::frame& f, std::vector<std::uint8_t> payload)
    {
        payloads.push_back(std::move(payload));
        frames.push_back(f);
        sends.push_back(net.worker(w).send(0, channel::payload, payloads.back().data(), payloads.back().size()));
        sends.push_back(net.worker(w).send(0, channel::control, &frames.back(), sizeof f));
        auto& p = links[static_cast<std::size_t>(w)];
        BOOST_TEST_REQUIRE(links.wait_for(w, "a sparse request", [&] { return p.ready(); }));
        p.posted = p.payload_posted = false;
    }
    // Worker w's reply (its rows into `rows`).
    wire::rows reply_to(int w, std::vector<float>& rows)
    {
        auto& t = net.worker(w);
        wire::frame f;
        auto r = t.recv(0, channel::control, &f, sizeof f);
        t.wait_until([&] { return r.complete(); }, clock::now() + std::chrono::seconds(5));
        BOOST_TEST_REQUIRE(r.complete());
        rows.resize(f.payload_bytes / sizeof(float));
        if (f.payload_bytes > 0) {
            auto payload = t.recv(0, channel::payload, rows.data(), f.payload_bytes);
            t.wait_until([&] { return payload.complete(); }, clock::now() + std::chrono::seconds(5));
        }
        return wire::body<wire::rows>(f);
    }
    std::vector<float> pull(int w, std::uint64_t key)
    {
        std::vector<std::uint8_t> bytes(8);
        std::memcpy(bytes.data(), &key, 8);
        arrive(w, wire::encode(wire::sparse_pull{1, 0, 0}, 8), bytes);
        sparse.on_pull(static_cast<std::size_t>(w),
                       wire::body<wire::sparse_pull>(links[static_cast<std::size_t>(w)].in));
        std::vector<float> rows;
        reply_to(w, rows);
        return rows;
    }
    void push(int w, std::uint64_t key, std::vector<float> grad)
    {
        std::vector<std::uint8_t> bytes;
        wire::encode_sparse_push(std::vector<std::uint64_t>{key}, grad, std::vector<std::uint32_t>{0}, 2, bytes);
        arrive(w, wire::encode(wire::sparse_push{1, 0}, bytes.size()), bytes);
        sparse.on_push(static_cast<std::size_t>(w),
                       wire::body<wire::sparse_push>(links[static_cast<std::size_t>(w)].in));
        std::vector<float> rows;
        const auto r = reply_to(w, rows);
        BOOST_TEST(r.count == 0u);
        BOOST_TEST(rows.empty());
    }
    std::vector<float> row(std::uint64_t key)
    {
        std::vector<float> out(2);
        sparse.tables()[0].lookup(std::vector<std::uint64_t>{key}, out);
        return out;
    }
    loopback_network net;
    activity_recorder activity;
    server_clock profile;
    worker_links links;
    server_hooks hooks;
    training_state state;
    sparse_service sparse;
    std::deque<wire::frame> frames;
    std::deque<std::vector<std::uint8_t>> payloads;
    std::vector<transfer> sends;
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_pull_makes_the_row_and_answers_it_in_place_of_its_key, two_workers)
{
    std::vector<std::uint8_t> bytes(16);
    const std::uint64_t keys[2] = {5, 9};
    std::memcpy(bytes.data(), keys, 16);
    arrive(1, wire::encode(wire::sparse_pull{2, 0, 0}, 16), bytes);
    sparse.on_pull(1, wire::body<wire::sparse_pull>(links[1].in));
    std::vector<float> rows;
    const auto r = reply_to(1, rows);
    BOOST_TEST(r.count == 2u);
    BOOST_TEST_REQUIRE(rows.size() == 4u);
    BOOST_TEST(sparse.tables()[0].rows() == 2u);
    BOOST_TEST((std::vector<float>(rows.begin() + 2, rows.end()) == pull(0, 9)), boost::test_tools::per_element());
    BOOST_TEST(rows[2] != 0.0f);                       // a new row starts random, not zero
    BOOST_TEST(row(9) == (std::vector<float>{0, 0}));  // a lookup reads only rows an update reached
    BOOST_TEST(sparse.keys_pulled() == 3u);
}

BOOST_FIXTURE_TEST_CASE(async_a_row_update_applies_on_arrival, two_workers)
{
    pull(0, 7);
    const auto before = row(7);
    push(0, 7, {1, 1});
    BOOST_TEST(row(7) != before);
    BOOST_TEST(sparse.keys_pushed() == 1u);
}

BOOST_FIXTURE_TEST_CASE(sync_a_row_update_waits_for_its_workers_step_and_is_dropped_with_a_stale_gradient, two_workers)
{
    sparse.hold_for_steps(true);
    pull(0, 7);
    pull(1, 8);
    const auto seven = row(7), eight = row(8);
    push(0, 7, {1, 1});
    push(1, 8, {1, 1});
    BOOST_TEST(row(7) == seven);  // held
    BOOST_TEST(row(8) == eight);
    sparse.drop_held(1);  // worker 1's gradient was stale
    const std::vector<std::size_t> step{0, 1};
    sparse.apply_held(step);
    BOOST_TEST(row(7) != seven);
    BOOST_TEST(row(8) == eight);
}

BOOST_FIXTURE_TEST_CASE(after_training_a_pull_reads_without_making_rows_and_the_reply_says_done, two_workers)
{
    state.done = true;
    std::vector<std::uint8_t> bytes(8);
    const std::uint64_t key = 3;
    std::memcpy(bytes.data(), &key, 8);
    arrive(0, wire::encode(wire::sparse_pull{1, 0, 0}, 8), bytes);
    sparse.on_pull(0, wire::body<wire::sparse_pull>(links[0].in));
    std::vector<float> rows;
    const auto r = reply_to(0, rows);
    BOOST_TEST(r.status == static_cast<std::uint32_t>(wire::values_status::done));
    BOOST_TEST(rows == (std::vector<float>{0, 0}), boost::test_tools::per_element());
    BOOST_TEST(sparse.tables()[0].rows() == 0u);
    BOOST_TEST(links[0].told_done);
}
