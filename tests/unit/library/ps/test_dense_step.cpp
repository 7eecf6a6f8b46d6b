#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE dense_step
#include <boost/test/unit_test.hpp>

#include "pstrain/loopback.hpp"
#include "library/ps/dense_step.hpp"

#include <chrono>
#include <deque>
#include <vector>

using namespace pstrain::ps;

namespace {

optimizer_config sgd()
{
    optimizer_config c;
    c.kind = optimizer_kind::sgd;
    c.learning_rate = 1.0f;
    return c;
}

// The dense step of a PS holding [0, 2) for three workers (the test plays
// them), sync with two gradients a step unless told otherwise.
struct three_workers {
    explicit three_workers(bool sync = true, int replicas = 2)
        : net(1, 3), activity({"worker 0", "worker 1", "worker 2"}), profile(server_phase_names()),
          links(net.ps(0), activity, profile), shard({0, 2}, sgd(), 1), sparse({}, hooks, links, state, profile),
          step(links, shard, sparse, state, profile, activity, hooks, sync, replicas)
    {
        shard.shard().assign(std::vector<float>{10, 20});
        for (std::size_t i = 0; i < links.size(); ++i) {
            links[i].slot = float_buffer(16, 0);
            links.post(i);
        }
    }
    // Worker w pushes `grads` computed on `at_step`, from data position `position`.
    void push(int w, std::vector<float> grads, std::uint64_t at_step, std::uint64_t position = 0)
    {
        payloads.push_back(std::move(grads));
        frames.push_back(wire::encode(wire::push{at_step, 0, 2, position, 0}, 8));
        sends.push_back(net.worker(w).send(0, channel::payload, payloads.back().data(), 8));
        sends.push_back(net.worker(w).send(0, channel::control, &frames.back(), sizeof(wire::frame)));
        auto& p = links[static_cast<std::size_t>(w)];
        BOOST_TEST_REQUIRE(links.wait_for(w, "a push", [&] { return p.ready(); }));
        p.posted = p.payload_posted = false;
        step.on_push(static_cast<std::size_t>(w), wire::body<wire::push>(p.in));
    }
    // Worker w's reply, if one came within `wait`.
    std::optional<wire::values> reply_to(int w, std::chrono::milliseconds wait = std::chrono::seconds(5))
    {
        auto& t = net.worker(w);
        wire::frame f;
        std::vector<float> values(2);
        auto frame = t.recv(0, channel::control, &f, sizeof f), payload = t.recv(0, channel::payload, values.data(), 8);
        t.wait_until([&] { return frame.complete(); }, clock::now() + wait);
        if (!frame.complete()) {
            frame.cancel();
            payload.cancel();
            t.wait_until([&] { return frame.complete() && payload.complete(); },
                         clock::now() + std::chrono::seconds(1));
            return std::nullopt;
        }
        t.wait_until([&] { return payload.complete(); }, clock::now() + wait);
        last_values = values;
        return wire::body<wire::values>(f);
    }
    loopback_network net;
    activity_recorder activity;
    server_clock profile;
    worker_links links;
    served_shard shard;
    server_hooks hooks;
    training_state state;
    sparse_service sparse;
    dense_step step;
    std::deque<wire::frame> frames;
    std::deque<std::vector<float>> payloads;
    std::vector<transfer> sends;
    std::vector<float> last_values;
};

std::vector<float> values_of(const served_shard& s)
{
    const auto v = s.shard().values();
    return {v.begin(), v.end()};
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_sync_step_waits_for_its_gradients_then_applies_their_mean_and_answers_each, three_workers)
{
    push(2, {4, 8}, 0, 31);
    BOOST_TEST(step.contributions() == 1u);
    BOOST_TEST(step.contributed(2));
    BOOST_TEST(!step.contributed(0));
    BOOST_TEST(state.step == 0u);
    BOOST_TEST(!reply_to(2, std::chrono::milliseconds(50)).has_value());  // no answer before the step
    push(0, {2, 0}, 0, 17);
    BOOST_TEST(state.step == 1u);
    BOOST_TEST(values_of(shard) == (std::vector<float>{7, 16}), boost::test_tools::per_element());
    for (int w : {0, 2}) {
        const auto v = reply_to(w);
        BOOST_TEST_REQUIRE(v.has_value());
        BOOST_TEST(v->step == 1u);
        BOOST_TEST(v->status == static_cast<std::uint32_t>(wire::values_status::ok));
        BOOST_TEST(last_values == (std::vector<float>{7, 16}), boost::test_tools::per_element());
    }
    // Positions count once the step is applied.
    BOOST_TEST(links[0].position == 17u);
    BOOST_TEST(links[2].position == 31u);
    BOOST_TEST(step.contributions() == 0u);
}

BOOST_FIXTURE_TEST_CASE(a_gradient_of_an_older_step_is_dropped_and_answered_stale, three_workers)
{
    push(1, {1, 1}, 0);
    push(2, {1, 1}, 0);
    BOOST_TEST_REQUIRE(state.step == 1u);
    push(0, {100, 100}, 0, 5);
    const auto v = reply_to(0);
    BOOST_TEST_REQUIRE(v.has_value());
    BOOST_TEST(v->status == static_cast<std::uint32_t>(wire::values_status::stale));
    BOOST_TEST(state.stale == 1u);
    BOOST_TEST(links[0].counters.stale == 1u);
    BOOST_TEST(links[0].position == 5u);
    BOOST_TEST(values_of(shard) == (std::vector<float>{9, 19}), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(at_shutdown_the_waiting_gradients_are_answered_done, three_workers)
{
    push(1, {1, 1}, 0);
    state.done = true;
    step.answer_waiting();
    const auto v = reply_to(1);
    BOOST_TEST_REQUIRE(v.has_value());
    BOOST_TEST(v->status == static_cast<std::uint32_t>(wire::values_status::done));
    BOOST_TEST(links[1].told_done);
    BOOST_TEST(state.step == 0u);
}

struct async_workers : three_workers {
    async_workers() : three_workers(false, 3) {}
};

BOOST_FIXTURE_TEST_CASE(async_applies_each_gradient_on_arrival_and_counts_its_staleness, async_workers)
{
    push(1, {1, 2}, 0);
    push(2, {1, 2}, 0);
    BOOST_TEST(state.step == 2u);
    BOOST_TEST(values_of(shard) == (std::vector<float>{8, 16}), boost::test_tools::per_element());
    BOOST_TEST(links[2].counters.staleness_sum == 1u);
    BOOST_TEST(links[2].counters.staleness_max == 1u);
    BOOST_TEST(reply_to(1)->step == 1u);
    BOOST_TEST(reply_to(2)->step == 2u);
}

// The server asks contributed() to refuse a second push of one worker to
// the step (request_check): a worker has contributed from its push until
// the step is applied.
BOOST_FIXTURE_TEST_CASE(a_worker_has_contributed_from_its_sync_push_until_the_step_is_applied, three_workers)
{
    BOOST_TEST(!step.contributed(1));
    push(1, {4, 4}, 0);
    BOOST_TEST(step.contributed(1));
    BOOST_TEST(!step.contributed(0));
    BOOST_TEST(step.contributions() == 1u);
    BOOST_TEST(state.step == 0u);  // one worker's gradient is not a step of two
    push(0, {0, 0}, 0);
    BOOST_TEST(state.step == 1u);
    BOOST_TEST(!step.contributed(1));
    BOOST_TEST(values_of(shard) == (std::vector<float>{8, 18}), boost::test_tools::per_element());
}
