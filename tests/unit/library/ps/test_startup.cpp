// A server's start-up, step by step, with the test as the chief over the
// loopback: the hello, the shard it plans and allocates, the chief's init
// or restore; and the lines that end the server when the chief does not
// follow these steps.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE startup
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "pstrain/loopback.hpp"
#include "library/ps/startup.hpp"

#include <chrono>
#include <deque>
#include <string>
#include <vector>

using namespace pstrain::ps;

namespace {

// PS `index` of 2, serving 2 workers; the test plays worker 0, the chief.
struct ps_of_two {
    explicit ps_of_two(int index = 1, std::uint64_t max_shard_bytes = 0)
        : net(2, 2), activity({"worker 0", "worker 1"}), profile(server_phase_names()),
          links(net.ps(index), activity, profile), cfg(config(index, max_shard_bytes)),
          steps(net.ps(index), links, cfg, hooks), ps(index)
    {}
    static server_config config(int index, std::uint64_t max_shard_bytes)
    {
        server_config c;
        c.index = index;
        c.num_ps = 2;
        c.max_shard_bytes = max_shard_bytes;
        return c;
    }
    // The chief sends `f` (and `payload`) to this PS.
    void chief_sends(const wire::frame& f, const std::vector<float>& payload = {})
    {
        frames.push_back(f);
        if (!payload.empty())
            sends.push_back(net.worker(0).send(ps, channel::payload, payload.data(), payload.size() * 4));
        sends.push_back(net.worker(0).send(ps, channel::control, &frames.back(), sizeof f));
    }
    // What the server's error says, or "" when it did not throw.
    template <class F>
    std::string error_of(F f)
    {
        try {
            f();
        } catch (const pstrain::peer_error& e) {
            BOOST_TEST(e.peer() == "worker 0");
            return e.what();
        }
        return "";
    }
    loopback_network net;
    activity_recorder activity;
    server_clock profile;
    worker_links links;
    server_hooks hooks;
    server_config cfg;
    startup steps;
    int ps;
    std::deque<wire::frame> frames;
    std::vector<transfer> sends;
};

wire::frame hello_of(std::uint64_t num_params) { return wire::encode(wire::hello{num_params, 0, 0, 0, 2, 0, 0}); }

}  // namespace

BOOST_AUTO_TEST_CASE(the_hello_plans_this_ps_part_of_the_model_and_the_init_fills_it)
{
    ps_of_two s;  // PS 1 of 2: the second half of 10 parameters
    s.chief_sends(hello_of(10));
    const auto h = s.steps.receive_hello();
    BOOST_TEST(h.num_params == 10u);
    const auto range = s.steps.plan_shard(h);
    BOOST_TEST((range == shard_range{5, 10}));
    s.steps.receive_hello_payload(h);
    BOOST_TEST(!s.steps.chief_settings(h));
    auto shard = s.steps.allocate(range, 0);
    s.steps.apply_hello_payload(h, *shard);
    s.links.post(0);
    s.chief_sends(wire::encode(wire::init{5, 10}, 20), {1, 2, 3, 4, 5});
    training_state state;
    BOOST_TEST(!s.steps.await_init_or_restore(*shard, {}, state));
    const auto v = shard->values(range);
    BOOST_TEST((std::vector<float>(v.begin(), v.end()) == std::vector<float>{1, 2, 3, 4, 5}),
               boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_restore_goes_through_the_restore_hook)
{
    ps_of_two s(0);
    s.hooks.restore = [](std::uint64_t step, shard_range r, std::uint64_t n) {
        BOOST_TEST(step == 7u);
        BOOST_TEST((r == shard_range{0, 2}));
        BOOST_TEST(n == 4u);
        return shard_state{{9, 8}, {}, 3, {}};
    };
    s.chief_sends(hello_of(4));
    const auto h = s.steps.receive_hello();
    s.steps.receive_hello_payload(h);
    auto shard = s.steps.allocate(s.steps.plan_shard(h), 0);
    s.steps.apply_hello_payload(h, *shard);
    s.links.post(0);
    s.chief_sends(wire::encode(wire::restore{7}));
    training_state state;
    BOOST_TEST(s.steps.await_init_or_restore(*shard, {}, state));
    const auto v = shard->values({0, 2});
    BOOST_TEST((std::vector<float>(v.begin(), v.end()) == std::vector<float>{9, 8}), boost::test_tools::per_element());
    BOOST_TEST(shard->shard().updates() == 3u);
}

BOOST_AUTO_TEST_CASE(a_chief_that_does_not_begin_with_hello_ends_the_server)
{
    ps_of_two s;
    s.chief_sends(wire::encode(wire::pull{0, 1, 0}));
    BOOST_TEST(s.error_of([&] { s.steps.receive_hello(); }) ==
               "worker 0 began with a pull message instead of hello: run the same pstrain in every task");
}

BOOST_AUTO_TEST_CASE(a_model_whose_shard_does_not_fit_ends_the_server_before_anything_is_allocated)
{
    ps_of_two s(1, 700);  // a shard of 50 floats takes 4 copies of 200 bytes (values, sums, 2 slots)
    s.chief_sends(hello_of(100));
    const auto h = s.steps.receive_hello();
    const auto why = s.error_of([&] { s.steps.plan_shard(h); });
    BOOST_TEST(why.starts_with("worker 0 announced 100 parameters: this PS's shard of 50 needs 800 bytes (4 copies"),
               why);
    BOOST_TEST(why.find("more than the 700 bytes max_shard_bytes allows: use more PS tasks") != std::string::npos, why);
}

BOOST_AUTO_TEST_CASE(a_chief_that_does_not_initialise_after_hello_ends_the_server)
{
    ps_of_two s;
    s.chief_sends(hello_of(10));
    const auto h = s.steps.receive_hello();
    s.steps.receive_hello_payload(h);
    auto shard = s.steps.allocate(s.steps.plan_shard(h), 0);
    s.steps.apply_hello_payload(h, *shard);
    s.links.post(0);
    s.chief_sends(wire::encode(wire::init{0, 10}, 40), std::vector<float>(10, 1.0f));  // the whole model, not [5, 10)
    training_state state;
    BOOST_TEST(s.error_of([&] { s.steps.await_init_or_restore(*shard, {}, state); }) ==
               "worker 0 initialised [0, 10) with 40 bytes, this PS holds [5, 10): run the same pstrain in every task");
}

BOOST_AUTO_TEST_CASE(a_chief_lost_before_its_hello_is_named)
{
    ps_of_two s;
    s.net.kill_worker(0);
    const auto why = s.error_of([&] { s.steps.receive_hello(); });
    BOOST_TEST(why.starts_with("lost worker 0 before it said hello: "), why);
}

BOOST_AUTO_TEST_CASE(the_chiefs_hello_brings_its_training_settings_after_its_ranges)
{
    ps_of_two s;
    training_settings t;
    t.optimizer.kind = optimizer_kind::adam;
    t.optimizer.learning_rate = 0.125f;
    t.sync = true;
    embedding_config table;
    table.dim = 8;
    t.tables.push_back(table);
    const auto bytes = wire::encode_settings(t);
    const std::vector<shard_range> moving{{6, 8}};
    auto payload = wire::hello_payload({}, moving, bytes);
    wire::hello h{10, 0, 0, 0, 2, 1, 1, static_cast<std::uint32_t>(bytes.size())};
    s.frames.push_back(wire::encode(h, payload.size()));
    s.sends.push_back(s.net.worker(0).send(s.ps, channel::payload, payload.data(), payload.size()));
    s.sends.push_back(s.net.worker(0).send(s.ps, channel::control, &s.frames.back(), sizeof(wire::frame)));
    const auto got = s.steps.receive_hello();
    s.steps.receive_hello_payload(got);
    const auto said = s.steps.chief_settings(got);
    BOOST_TEST_REQUIRE(said.has_value());
    BOOST_TEST(!settings_difference(*said, t, "here", "there"));
    auto shard = s.steps.allocate(s.steps.plan_shard(got), 0);
    s.steps.apply_hello_payload(got, *shard);  // the moving range [6, 8) is in this PS's [5, 10)
}

BOOST_AUTO_TEST_CASE(settings_this_ps_cannot_read_end_the_server_naming_the_chief)
{
    ps_of_two s;
    std::vector<std::uint8_t> bytes(wire::settings_head_bytes, 0);
    bytes[0] = 9;  // an optimizer of another version
    wire::hello h{10, 0, 0, 0, 2, 0, 0, static_cast<std::uint32_t>(bytes.size())};
    s.frames.push_back(wire::encode(h, bytes.size()));
    s.sends.push_back(s.net.worker(0).send(s.ps, channel::payload, bytes.data(), bytes.size()));
    s.sends.push_back(s.net.worker(0).send(s.ps, channel::control, &s.frames.back(), sizeof(wire::frame)));
    const auto got = s.steps.receive_hello();
    s.steps.receive_hello_payload(got);
    BOOST_TEST(s.error_of([&] { s.steps.chief_settings(got); }) ==
               "worker 0 sent training settings this PS cannot read: its optimizer 9 is none this PS knows (a pstrain "
               "of another version?): run the same pstrain version in every task");
}
