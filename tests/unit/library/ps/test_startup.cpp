// A server's start-up, step by step, with the test as the chief over the
// loopback: the hello, the shard it plans and allocates, the chief's init
// or restore; and the lines that end the server when the chief does not
// follow these steps.  Then the server's cases of its settings (its own,
// or the chief's) and of a spare's wait, over the in-process loopback.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE startup
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "pstrain/loopback.hpp"
#include "library/ps/startup.hpp"
#include "tests/unit/library/ps/loopback_job.hpp"
#include "tests/unit/library/ps/server_cases.hpp"

#include <chrono>
#include <deque>
#include <string>
#include <vector>

using namespace pstrain::ps;
using pstrain::testing::fill;
using pstrain::testing::job_options;
using pstrain::testing::ps_job;
using pstrain::testing::to_vector;
using namespace pstrain::testing::server_cases;
using namespace std::chrono_literals;

namespace {

// PS `index` of 2, serving 2 workers; the test plays worker 0, the chief.
struct ps_of_two {
    explicit ps_of_two(int index = 1, std::uint64_t max_shard_bytes = 0)
        : net(2, 2), activity({"worker 0", "worker 1"}), profile(server_phase_names()),
          links(net.ps(index), activity, profile), cfg(config(index, max_shard_bytes)), bound(2, unbounded_staleness),
          members(net.ps(index), links, bound, cfg, state), sparse(cfg.training.tables, hooks, links, state, profile),
          steps(net.ps(index), links, cfg, hooks, members, sparse, activity, profile), ps(index)
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
    training_state state;
    staleness_bound bound;
    membership members;
    sparse_service sparse;
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

// ------------------------------------------ the settings, the server's own

BOOST_AUTO_TEST_CASE(a_ps_without_settings_of_its_own_takes_the_chiefs_staleness_bound)
{
    server_config c;
    c.settings_from_chief = true;
    c.shutdown_wait = 2s;
    auto s = sgd_settings_for_the_bound();
    s.max_staleness = 0;
    job_options o;
    o.settings = s;
    ps_job job(1, 2, c, {}, o);
    auto& w0 = job.chief();
    start(job, 2);
    fill(w0.grads(), g0);
    const auto t0 = w0.async_push();
    BOOST_TEST_REQUIRE(held_by_the_bound(job, w0, 0, t0), "the chief's bound was not taken");
    fill(job.worker(1).grads(), g1);
    job.worker(1).wait(job.worker(1).async_push());
    w0.wait(t0);
    w0.shutdown();
    pull_until_done(job.worker(1));
    BOOST_TEST(!job.finish().threw);
}

BOOST_AUTO_TEST_CASE(a_staleness_bound_on_a_sync_server_is_refused_naming_the_fix)
{
    loopback_network net(1, 1);
    auto c = sync_config();
    c.training.max_staleness = 2;
    BOOST_CHECK_EXCEPTION(server(net.ps(0), c, {}), pstrain::error, [](const pstrain::error& e) {
        return std::string(e.what()) ==
               "a staleness bound (2) is for async training, and this job is sync: leave it out, or train async";
    });
}

// ------------------------------------------------------- a spare's wait

BOOST_AUTO_TEST_CASE(a_spare_that_was_not_needed_ends_with_the_job)
{
    ps_job job(1, 2, sync_config(), {}, with_spares(1));
    start(job, 2);
    push_g0_and_g1(job.chief(), job.worker(1));
    // Waiting, it is idle (a program's watchdog counts no stall); the PS that serves is not.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!job.server(1).activity().idle && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    BOOST_TEST(job.server(1).activity().idle);
    BOOST_TEST(!job.server(0).activity().idle);
    job.chief().shutdown();
    pull_until_done(job.worker(1));
    BOOST_TEST((job.finish(0).outcome == server_outcome::done));
    const auto spare = job.finish(1);
    BOOST_TEST_REQUIRE(spare.returned);
    BOOST_TEST((spare.outcome == server_outcome::done), spare.what);
}

// ------------------------------------------------- the chief's settings

namespace {

training_settings sgd_settings(bool sync)
{
    training_settings t;
    t.optimizer.kind = optimizer_kind::sgd;
    t.optimizer.learning_rate = 0.5f;
    t.sync = sync;
    return t;
}

job_options with_settings(training_settings t)
{
    job_options o;
    o.settings = std::move(t);
    return o;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_ps_without_settings_of_its_own_trains_as_the_chief_says)
{
    server_config c;  // async, adagrad, learning rate 3: all ignored
    c.training.optimizer.kind = optimizer_kind::adagrad;
    c.training.optimizer.learning_rate = 3;
    c.settings_from_chief = true;
    c.shutdown_wait = 2s;
    ps_job job(2, 2, c, {}, with_settings(sgd_settings(true)));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w0.grads(), g0);
    const auto t0 = w0.async_push();
    BOOST_TEST(held_for_the_step(job, w0, 0, t0), "the chief's sync was not taken: one gradient made a step");
    fill(w1.grads(), g1);
    const auto t1 = w1.async_push();
    w0.wait(t0);
    w1.wait(t1);
    BOOST_TEST(to_vector(w0.params()) == after_one_step, boost::test_tools::per_element());
    w0.shutdown();
    pull_until_done(w1);
    for (int p = 0; p < 2; ++p) {
        const auto end = job.finish(p);
        BOOST_TEST_REQUIRE(end.returned);
        BOOST_TEST(!end.threw, end.what);
    }
}

BOOST_AUTO_TEST_CASE(a_chief_whose_settings_differ_from_the_ps_tasks_flags_is_refused_naming_the_difference)
{
    auto c = async_config();  // SGD at 0.5, async
    auto theirs = sgd_settings(false);
    theirs.optimizer.learning_rate = 0.25f;
    ps_job job(1, 1, c, {}, with_settings(theirs));
    BOOST_CHECK_THROW(job.chief().wait(job.chief().async_init()), pstrain::peer_error);
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(end.peer_error);
    BOOST_TEST(end.who == "worker 0");
    BOOST_TEST(end.what == "worker 0 trains with other settings than this PS: the learning rate is 0.5 on this PS and "
                           "0.25 on worker 0: give every task of the job the same flags");
}

BOOST_AUTO_TEST_CASE(a_ps_without_settings_refuses_a_chief_that_says_none)
{
    server_config c;
    c.settings_from_chief = true;
    ps_job job(1, 1, c);
    BOOST_CHECK_THROW(job.chief().wait(job.chief().async_init()), pstrain::peer_error);
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(end.peer_error);
    BOOST_TEST(end.what.find("worker 0 did not say how to train") == 0u, end.what);
}

BOOST_AUTO_TEST_CASE(the_chiefs_tables_are_made_on_a_ps_without_settings)
{
    server_config c;
    c.settings_from_chief = true;
    c.shutdown_wait = 2s;
    auto t = sgd_settings(false);
    embedding_config table;
    table.dim = 4;
    t.tables.push_back(table);
    ps_job job(1, 1, c, {}, with_settings(t));
    auto& w0 = job.chief();
    start(job, 1);
    const std::vector<std::uint64_t> keys{7, 9};
    std::vector<float> rows(8, 0.0f);
    w0.wait(w0.async_pull_rows(0, keys, rows));
    BOOST_TEST(std::any_of(rows.begin(), rows.end(), [](float v) { return v != 0.0f; }), "no row was made");
    w0.shutdown();
    BOOST_TEST(job.finish().returned);
}
