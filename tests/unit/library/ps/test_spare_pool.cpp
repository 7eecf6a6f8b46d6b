// Replacing a lost PS from the client's side: spare_pool on its own (over
// the loopback, a test's hand playing the spares), then whole jobs where a
// spare takes a lost PS's place (each server in a thread, the test driving
// the workers' clients).
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE spare_pool
#include <boost/test/unit_test.hpp>

#include "library/ps/activity_recorder.hpp"
#include "library/ps/exchange.hpp"
#include "library/ps/spare_pool.hpp"
#include "library/ps/ticket_book.hpp"
#include "tests/unit/library/ps/loopback_job.hpp"
#include "tests/unit/library/ps/server_cases.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace pstrain::ps;
using pstrain::testing::fill;
using pstrain::testing::job_options;
using pstrain::testing::ps_job;
using pstrain::testing::to_vector;
using namespace std::chrono_literals;
using namespace pstrain::testing::server_cases;

namespace {

// ------------------------------------------------------- the pool alone

// Worker `w`'s exchange and spare pool in a loopback job of num_ps PS tasks
// and `spares` spares (the loopback's PS tasks num_ps on), two workers.
struct pool_at {
    loopback_network net;
    const int w;
    std::vector<float> values = std::vector<float>(8);
    activity_recorder activity;
    exchange ex;
    ticket_book book{4};
    spare_pool pool;

    pool_at(int num_ps, int spares, int worker)
        : net(num_ps + spares, 2), w(worker), activity(peer_names(net.worker(w))),
          ex(net.worker(w), static_cast<std::size_t>(num_ps), values.data(), 1s, {}, activity),
          pool(net.worker(w), ex, static_cast<std::size_t>(num_ps), w != 0)
    {}
    ~pool_at()
    {
        pool.cancel();
        net.worker(w).wait_until([&] { return pool.settled(); }, clock::now() + 1s);
    }
    // Spare s (the loopback's PS s) tells this worker it stands in for PS p.
    void say_standing_in(int s, std::uint32_t p)
    {
        wire::standing_in m;
        m.index = p;
        frames.push_back(wire::encode(m));
        net.ps(s).send(static_cast<std::size_t>(w), channel::control, &frames.back(), sizeof(wire::frame));
    }
    std::vector<wire::frame> frames;
};

std::string what_of(const std::function<void()>& f)
{
    try {
        f();
    } catch (const pstrain::peer_error& e) {
        return e.peer() + ": " + e.what();
    }
    return "no error";
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_peers_after_the_ps_tasks_are_spares_and_a_gone_one_is_not_left)
{
    pool_at a(2, 2, 1);
    BOOST_TEST(!a.pool.empty());
    BOOST_TEST(a.pool.left() == 2u);
    BOOST_TEST(a.pool.waiting() == (std::vector<std::size_t>{2, 3}), boost::test_tools::per_element());
    a.net.kill_ps(3);
    BOOST_TEST(a.pool.left() == 1u);
    BOOST_TEST(a.pool.waiting() == std::vector<std::size_t>{2}, boost::test_tools::per_element());
    BOOST_TEST(a.pool.lost().empty());
    a.net.kill_ps(0);
    BOOST_TEST(a.pool.lost() == std::vector<std::size_t>{0}, boost::test_tools::per_element());
    BOOST_TEST(a.pool.serving({0}) == std::vector<std::size_t>{1}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_job_without_spares_has_an_empty_pool_that_never_names_too_few)
{
    pool_at a(2, 0, 0);
    BOOST_TEST(a.pool.empty());
    BOOST_TEST(a.pool.left() == 0u);
    a.net.kill_ps(1);
    BOOST_TEST(!a.pool.replaceable({1}, "ps 1").has_value());
    BOOST_CHECK_NO_THROW(a.pool.enough_for({1}));
}

// Only the loss itself is healed, and only while a spare is left for each lost PS.
BOOST_AUTO_TEST_CASE(a_loss_is_replaceable_when_the_error_names_a_lost_ps_and_spares_suffice)
{
    pool_at a(2, 1, 0);
    BOOST_TEST(a.pool.replaceable({1}, "ps 1").value_or(9) == 1u);
    BOOST_TEST(!a.pool.replaceable({1}, "ps 0").has_value());  // another PS's refusal or silence
    BOOST_TEST(!a.pool.replaceable({}, "ps 1").has_value());
    BOOST_TEST(!a.pool.replaceable({0, 1}, "ps 1").has_value());
    BOOST_CHECK_NO_THROW(a.pool.enough_for({1}));
    BOOST_TEST(what_of([&] {
                   a.pool.enough_for({0, 1});
               }) == "ps 0: lost ps 0 and ps 1, and 1 spare is left to take their places: training cannot go on");
    a.net.kill_ps(2);
    BOOST_TEST(!a.pool.replaceable({1}, "ps 1").has_value());
    BOOST_TEST(what_of([&] { a.pool.enough_for({1}); }) ==
               "ps 1: lost ps 1, and 0 spares are left to take their places: training cannot go on");
}

BOOST_AUTO_TEST_CASE(the_chief_tells_an_idle_spare_to_take_over_and_routes_the_lost_ps_to_it)
{
    pool_at a(2, 2, 0);
    a.net.kill_ps(2);  // the first spare is gone: the next one is asked
    wire::frame got;
    auto recv = a.net.ps(3).recv(0, channel::control, &got, sizeof got);
    a.pool.take_over(1, {1});
    BOOST_TEST_REQUIRE(recv.complete());
    BOOST_TEST(got.kind == static_cast<std::uint16_t>(wire::kind::take_over));
    BOOST_TEST(wire::body<wire::take_over>(got).index == 1u);
    BOOST_TEST(wire::body<wire::take_over>(got).num_ps == 2u);
    BOOST_TEST(a.ex.peer(1) == 3u);
    BOOST_TEST(a.ex.peer(0) == 0u);
    BOOST_TEST(a.pool.left() == 0u);
    BOOST_TEST(a.pool.waiting().empty());
    BOOST_TEST(what_of([&] { a.pool.take_over(0, {0}); }) ==
               "ps 0: lost ps 0, and 0 spares are left to take their places: training cannot go on");
}

// Each spare's word is heard in the receive posted for it from the start,
// whichever spare speaks first.
BOOST_AUTO_TEST_CASE(a_worker_routes_a_lost_ps_to_the_spare_that_says_it_stands_in)
{
    pool_at a(2, 2, 1);
    a.say_standing_in(3, 0);
    a.pool.stand_in(0);
    BOOST_TEST(a.ex.peer(0) == 3u);
    BOOST_TEST(a.pool.left() == 1u);
    a.say_standing_in(2, 1);
    a.pool.stand_in(1);
    BOOST_TEST(a.ex.peer(1) == 2u);
    BOOST_TEST(a.ex.ps_peers() == (std::vector<std::size_t>{3, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_spare_that_says_something_else_is_named)
{
    pool_at a(1, 1, 1);
    a.frames.push_back(wire::encode(wire::stats{}));
    a.net.ps(1).send(1, channel::control, &a.frames.back(), sizeof(wire::frame));
    BOOST_TEST(what_of([&] { a.pool.stand_in(0); }) ==
               "ps 1: ps 1, a spare, sent a stats message where standing_in was expected: are all tasks running the "
               "same pstrain?");
}

BOOST_AUTO_TEST_CASE(a_worker_waits_for_a_spare_at_most_the_timeout_and_not_at_all_when_none_is_left)
{
    {
        pool_at a(1, 1, 1);
        const auto begun = clock::now();
        BOOST_TEST(what_of([&] { a.pool.stand_in(0); }) ==
                   "ps 0: lost ps 0, and no spare took its place within 1s (--peer-timeout)");
        BOOST_TEST((clock::now() - begun >= 1s));
    }
    {
        pool_at a(1, 1, 1);
        a.net.kill_ps(1);
        const auto begun = clock::now();
        BOOST_TEST(what_of([&] { a.pool.stand_in(0); }) ==
                   "ps 1: lost ps 0, and no spare is left to take its place (ps 1 ended first: see its log and the "
                   "chief's)");
        BOOST_TEST((clock::now() - begun < 1s));
    }
}

// The calls in flight are abandoned; a reply a serving PS still owes is
// waited for (it must not land in a later receive), a lost PS's is not.
BOOST_AUTO_TEST_CASE(settling_waits_for_the_replies_the_serving_ps_tasks_owe)
{
    pool_at a(2, 1, 0);
    const auto t = a.book.open();
    for (std::size_t p = 0; p < 2; ++p) {
        auto& op = a.book.at(t).ops.emplace_back();
        op.ps = p;
        op.out = wire::encode(wire::stats{});
        op.expected = wire::kind::stats_reply;
        a.ex.post_and_send(op, nullptr);
    }
    a.net.kill_ps(1);
    {
        // ps 0 never answers: the owed reply is waited for until the timeout.
        const auto begun = clock::now();
        BOOST_TEST(what_of([&] { a.pool.settle(a.book, a.pool.abandon(a.book)); }) ==
                   "ps 1: lost ps 1, and the other PS tasks did not answer what they owed within 1s "
                   "(--peer-timeout): training cannot go on");
        BOOST_TEST((clock::now() - begun >= 1s));
        BOOST_TEST(!a.book.outstanding(t));  // abandoned
    }
    // ps 0 answers what it owed: settled, and the lost PS is named.
    wire::frame asked;
    auto got = a.net.ps(0).recv(0, channel::control, &asked, sizeof asked);
    BOOST_TEST_REQUIRE(got.complete());
    const auto reply = wire::encode(wire::refusal{});
    a.net.ps(0).send(0, channel::control, &reply, sizeof reply);
    BOOST_TEST(a.pool.settle(a.book, a.pool.abandon(a.book)) == std::vector<std::size_t>{1},
               boost::test_tools::per_element());
}

// ------------------------------------------------------- whole jobs

namespace {

std::vector<float> part(const std::vector<float>& v, shard_range r)
{
    return {v.begin() + static_cast<std::ptrdiff_t>(r.begin), v.begin() + static_cast<std::ptrdiff_t>(r.end)};
}

// The snapshots the servers' hooks stored, and a restore hook that returns
// what was stored for that step and range (a checkpoint on the shared
// path, in one process).
struct recorder {
    std::mutex mu;
    struct snapshot_seen {
        std::uint64_t step = 0;
        shard_range range;
        std::vector<float> values, state;
        std::uint64_t updates = 0;
        std::vector<std::uint64_t> positions;
    };
    std::vector<snapshot_seen> snapshots;
};

server_hooks restoring_hooks(recorder& rec)
{
    server_hooks h;
    h.snapshot = [&rec](const shard_snapshot& s) {
        std::lock_guard lock(rec.mu);
        rec.snapshots.push_back({s.step,
                                 s.range,
                                 to_vector(s.values),
                                 to_vector(s.state),
                                 s.updates,
                                 {s.positions.begin(), s.positions.end()}});
        return snapshot_receipt{1000 + static_cast<std::uint64_t>(s.index),
                                0xc0ffee00 + static_cast<std::uint64_t>(s.index)};
    };
    h.restore = [&rec](std::uint64_t step, shard_range range, std::uint64_t) {
        std::lock_guard lock(rec.mu);
        for (const auto& s : rec.snapshots)
            if (s.step == step && s.range == range) {
                shard_state st;
                st.values = s.values;
                st.state = s.state;
                st.updates = s.updates;
                st.positions = s.positions;
                return st;
            }
        throw pstrain::error("no snapshot of that step and range");
    };
    return h;
}

// Both workers' next call meets the lost PS: lost_ps names it.
void expect_lost_ps(client& w, ticket t, std::size_t index)
{
    try {
        w.wait(t);
        BOOST_ERROR("a push to a dead PS completed");
    } catch (const lost_ps& e) {
        BOOST_TEST(e.index() == index);
        // Named as the transport names the peer: a spare that stood in has its own name.
        BOOST_TEST(std::string(e.what()).find("lost " + e.peer()) != std::string::npos, e.what());
    }
}

// Sync: the chief's replacement (in a thread) and worker 1's at once, as
// their tasks do it; each returns the PS tasks replaced, or its error.
struct both_replaced {
    std::vector<std::size_t> chief, worker;
    std::string chief_error, worker_error;
};

// Both replaced ps 1, without an error.
void expect_ps_1_replaced(const both_replaced& r)
{
    BOOST_TEST(r.chief_error == "no error");
    BOOST_TEST(r.worker_error == "no error");
    BOOST_TEST(r.chief == std::vector<std::size_t>{1}, boost::test_tools::per_element());
    BOOST_TEST(r.worker == std::vector<std::size_t>{1}, boost::test_tools::per_element());
}

// Sync, two workers: three steps, a snapshot at step 2; the values at steps 2 and 3.
std::pair<std::vector<float>, std::vector<float>> three_steps_with_a_snapshot_at_2(ps_job& job, chief_client& w0,
                                                                                   client& w1)
{
    start(job, 2);
    push_g0_and_g1(w0, w1);
    push_g0_and_g1(w0, w1);
    auto at_2 = to_vector(w0.params());
    BOOST_TEST_REQUIRE(w0.snapshot(2).size() == 2u);  // the spare takes no snapshot: it holds no shard yet
    push_g0_and_g1(w0, w1);
    return {std::move(at_2), to_vector(w0.params())};
}

// The chief ends the job: ps 0 and the spare in ps 1's place (server 2) end done.
void end_with_ps_0_and_the_spare(ps_job& job, chief_client& w0, client& w1)
{
    w0.shutdown();
    pull_until_done(w1);
    for (int p : {0, 2}) {
        const auto end = job.finish(p);
        BOOST_TEST_REQUIRE(end.returned, "server " << p);
        BOOST_TEST((end.outcome == server_outcome::done), "server " << p << ": " << end.what);
    }
}

// After a sync replacement: both workers pull the snapshot's values (step
// 2), and training goes on from there, through the spare, to the values of
// step 3 as before the loss.
void expect_back_at_2_and_on_to_3(chief_client& w0, client& w1, const std::vector<float>& at_2,
                                  const std::vector<float>& at_3)
{
    for (client* w : {static_cast<client*>(&w0), &w1}) {
        w->wait(w->async_pull());
        BOOST_TEST(to_vector(w->params()) == at_2, boost::test_tools::per_element());
        BOOST_TEST(w->global_step() == 2u);
        BOOST_TEST(w->restored_step().value_or(0) == 2u);
    }
    push_g0_and_g1(w0, w1);
    BOOST_TEST(to_vector(w0.params()) == at_3, boost::test_tools::per_element());
    BOOST_TEST(to_vector(w1.params()) == at_3, boost::test_tools::per_element());
    BOOST_TEST(w0.global_step() == 3u);
}

// Sync: ps 0 waits for the missing gradients of a step it holds.
void until_ps_0_holds_a_step(ps_job& job)
{
    BOOST_TEST_REQUIRE(eventually([&] {
        const auto a = job.server(0).activity();
        return a.waiting && a.request.starts_with("the missing gradients of a sync step");
    }));
}

// Worker 1's replacement first (in a thread): its fillers complete the step
// ps 0 holds the chief's push in before the chief replaces the PS and rolls
// back to `step`.
both_replaced replace_worker_1_first(ps_job& job, chief_client& w0, client& w1, std::uint64_t step)
{
    const auto held_at = job.server(0).global_step();
    both_replaced r;
    std::thread worker([&] { r.worker_error = what_of([&] { r.worker = w1.replace_lost_ps(true); }); });
    BOOST_TEST_REQUIRE(eventually([&] { return job.server(0).global_step() > held_at; }));
    r.chief_error = what_of([&] { r.chief = w0.replace_lost_ps(step, true); });
    worker.join();
    return r;
}

both_replaced replace_at_once(chief_client& w0, client& w1, std::uint64_t step)
{
    both_replaced r;
    std::thread chief([&] { r.chief_error = what_of([&] { r.chief = w0.replace_lost_ps(step, true); }); });
    r.worker_error = what_of([&] { r.worker = w1.replace_lost_ps(true); });
    chief.join();
    return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sync_a_spare_takes_the_lost_ps_place_and_every_shard_rolls_back_to_the_snapshot)
{
    recorder rec;
    ps_job job(2, 2, sync_config(), restoring_hooks(rec), with_spares(1));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    const auto [at_2, at_3] = three_steps_with_a_snapshot_at_2(job, w0, w1);
    BOOST_TEST(at_3 != at_2);

    job.net().kill_ps(1);
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    const auto t0 = w0.async_push();
    const auto t1 = w1.async_push();
    expect_lost_ps(w0, t0, 1);
    expect_lost_ps(w1, t1, 1);
    BOOST_TEST(w0.spares_left() == 1u);
    BOOST_CHECK_THROW(w0.async_pull(), pstrain::error);  // not before the replacement

    expect_ps_1_replaced(replace_at_once(w0, w1, 2));
    BOOST_TEST(w0.spares_left() == 0u);
    // Every shard is the snapshot's: ps 0 rolled back from step 5 (the
    // fillers completed step 4), the spare restored ps 1's shard.
    expect_back_at_2_and_on_to_3(w0, w1, at_2, at_3);

    end_with_ps_0_and_the_spare(job, w0, w1);
}

// The lost PS answered a step to the chief and not to worker 1: the chief
// pushed its next step to ps 0, which holds it for worker 1's gradient,
// and worker 1 never pushed it.  The rollback is the chief's next message
// to ps 0, which ps 0 reads only once it has answered that push: worker
// 1's filler completes the step, and both go on from the snapshot (before
// it, each waited for the other until the timeout).
BOOST_AUTO_TEST_CASE(sync_the_chief_a_step_ahead_of_a_worker_that_lost_the_ps_still_rolls_back)
{
    recorder rec;
    ps_job job(2, 2, sync_config(), restoring_hooks(rec), with_spares(1));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    const auto [at_2, at_3] = three_steps_with_a_snapshot_at_2(job, w0, w1);

    const auto ps0 = w0.partition()[0], ps1 = w0.partition()[1];
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    const auto held = w0.async_push(ps0);
    until_ps_0_holds_a_step(job);
    BOOST_TEST_REQUIRE(!w0.test(held));
    job.net().kill_ps(1);
    expect_lost_ps(w0, w0.async_push(ps1), 1);
    expect_lost_ps(w1, w1.async_push(ps1), 1);  // worker 1 pushed nothing to ps 0

    expect_ps_1_replaced(replace_at_once(w0, w1, 2));
    BOOST_CHECK_THROW(w0.test(held), pstrain::error);  // settled and abandoned: no longer outstanding
    expect_back_at_2_and_on_to_3(w0, w1, at_2, at_3);

    end_with_ps_0_and_the_spare(job, w0, w1);
}

// The same with whole-vector pushes, as pstrain's workers make them: the
// lost PS's reply to worker 1 never came, ps 0's did, in the same ticket,
// which stays open.  Worker 1's filler must join the step ps 0 is at (its
// reply said so), not the one the ticket was for, or ps 0 drops it as
// stale and holds the chief's push until the timeout (before the fix: "the
// other PS tasks did not answer what they owed within 3s").  Found by
// bench/chaos: a sync job whose ps, stopped after it had answered the
// chief, was never replaced by its spare.  And each worker decides on its
// fillers by what it had when it learned of the loss: worker 1's filler
// may answer the chief's held push before the chief decides, and a filler
// of the step after it would hold that step for nobody.
BOOST_AUTO_TEST_CASE(sync_a_worker_whose_whole_push_the_lost_ps_did_not_answer_fills_the_step_ps_0_is_at)
{
    recorder rec;
    ps_job job(2, 2, sync_config(), restoring_hooks(rec), with_spares(1));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    const auto [at_2, at_3] = three_steps_with_a_snapshot_at_2(job, w0, w1);

    job.net().hold_replies(1, 1);  // ps 1's replies to worker 1 stay in flight
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    const auto behind = w1.async_push();
    w0.wait(w0.async_push());  // the step applied on both PS; only the chief heard from both
    const auto ahead = w0.async_push();
    until_ps_0_holds_a_step(job);
    job.net().kill_ps(1);
    expect_lost_ps(w1, behind, 1);
    expect_lost_ps(w0, ahead, 1);

    // Worker 1 first: its filler completes the step of the chief's held
    // push before the chief decides.
    expect_ps_1_replaced(replace_worker_1_first(job, w0, w1, 2));
    expect_back_at_2_and_on_to_3(w0, w1, at_2, at_3);

    end_with_ps_0_and_the_spare(job, w0, w1);
}

// The same with buckets, as the overlapped step pushes them: [4, 6) on
// ps 1, [1, 4) across both PS tasks, [0, 1) on ps 0, each worker all of a
// step's buckets before it waits.  Ps 1's replies to worker 1 stay in
// flight, the chief's next step waits on ps 0 for worker 1's buckets; ps 1
// is lost.  Worker 1's fillers must be the buckets it pushed, in its order:
// a whole shard would overlap the chief's held bucket [1, 3) and be refused.
BOOST_AUTO_TEST_CASE(sync_bucketed_fillers_are_the_buckets_the_worker_pushed)
{
    recorder rec;
    ps_job job(2, 2, sync_config(), restoring_hooks(rec), with_spares(1));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    BOOST_TEST_REQUIRE(w0.partition()[0].end == 3u);
    const std::vector<shard_range> buckets{{4, 6}, {1, 4}, {0, 1}};
    const auto push_buckets = [&](client& w, const std::vector<float>& g) {
        fill(w.grads(), g);
        std::vector<ticket> tickets;
        for (const auto& b : buckets) tickets.push_back(w.async_push(b));
        return tickets;
    };
    const auto bucketed_step = [&] {
        const auto t0 = push_buckets(w0, g0), t1 = push_buckets(w1, g1);
        for (const auto t : t0) w0.wait(t);
        for (const auto t : t1) w1.wait(t);
    };
    start(job, 2);
    bucketed_step();
    bucketed_step();
    const auto at_2 = to_vector(w0.params());
    BOOST_TEST(at_2 == after_two_steps, boost::test_tools::per_element());
    BOOST_TEST_REQUIRE(w0.snapshot(2).size() == 2u);
    bucketed_step();
    const auto at_3 = to_vector(w0.params());

    job.net().hold_replies(1, 1);  // ps 1's replies to worker 1 stay in flight
    const auto behind = push_buckets(w1, g1);
    for (const auto t : push_buckets(w0, g0)) w0.wait(t);  // step 4 applied on both PS
    const auto ahead = push_buckets(w0, g0);
    until_ps_0_holds_a_step(job);
    job.net().kill_ps(1);
    expect_lost_ps(w1, behind.front(), 1);
    expect_lost_ps(w0, ahead.front(), 1);

    expect_ps_1_replaced(replace_worker_1_first(job, w0, w1, 2));
    expect_back_at_2_and_on_to_3(w0, w1, at_2, at_3);

    end_with_ps_0_and_the_spare(job, w0, w1);
}

BOOST_AUTO_TEST_CASE(async_only_the_lost_shard_goes_back_to_the_snapshot)
{
    recorder rec;
    ps_job job(2, 1, async_config(), restoring_hooks(rec), with_spares(1));
    auto& w0 = job.chief();
    start(job, 1);
    fill(w0.grads(), g0);
    for (int k = 0; k < 2; ++k) w0.wait(w0.async_push());
    const auto at_2 = to_vector(w0.params());
    BOOST_TEST_REQUIRE(w0.snapshot(2).size() == 2u);
    w0.wait(w0.async_push());
    const auto at_3 = to_vector(w0.params());
    w0.wait(w0.async_push());
    const auto at_4 = to_vector(w0.params());

    job.net().kill_ps(1);
    expect_lost_ps(w0, w0.async_pull(), 1);
    BOOST_TEST(w0.replace_lost_ps(2, false) == std::vector<std::size_t>{1}, boost::test_tools::per_element());
    w0.wait(w0.async_pull());
    const auto& ps1 = w0.partition()[1];
    BOOST_TEST(part(to_vector(w0.params()), w0.partition()[0]) == part(at_4, w0.partition()[0]),
               boost::test_tools::per_element());
    BOOST_TEST(part(to_vector(w0.params()), ps1) == part(at_2, ps1), boost::test_tools::per_element());
    BOOST_TEST(w0.global_step() == 4u);  // ps 0's: it did not go back
    w0.wait(w0.async_push());            // the spare applies it
    BOOST_TEST(part(to_vector(w0.params()), ps1) == part(at_3, ps1), boost::test_tools::per_element());
    w0.shutdown();
    BOOST_TEST((job.finish(2).outcome == server_outcome::done));
}

// Async with a staleness bound: ps 0 holds the chief's reply until worker
// 1 pushes, and worker 1, which lost ps 1, pushes again only once the spare
// the chief asks for stands in.  The chief puts the spare in place first
// and waits for the held reply after (before, each waited for the other
// until the timeout).
BOOST_AUTO_TEST_CASE(async_the_chief_held_by_the_staleness_bound_still_puts_the_spare_in_place)
{
    recorder rec;
    ps_job job(2, 2, bounded_config(1), restoring_hooks(rec), with_spares(1));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    w1.wait(w1.async_push());
    w0.wait(w0.async_push());
    BOOST_TEST_REQUIRE(w0.snapshot(2).size() == 2u);
    w0.wait(w0.async_push());           // one ahead of worker 1: within the bound
    const auto held = w0.async_push();  // two ahead: held on both PS tasks
    for (int p : {0, 1})                // the spare (server 2) holds nothing
        BOOST_TEST_REQUIRE(eventually(
            [&] { return job.server(p).activity().request.starts_with("the gradients of the slowest workers"); }));
    BOOST_TEST_REQUIRE(!w0.test(held));
    job.net().kill_ps(1);
    expect_lost_ps(w0, held, 1);
    expect_lost_ps(w1, w1.async_pull(), 1);

    std::vector<std::size_t> chief, worker;
    std::string chief_error;
    std::thread t([&] { chief_error = what_of([&] { chief = w0.replace_lost_ps(2, false); }); });
    const auto worker_error = what_of([&] {
        worker = w1.replace_lost_ps();
        w1.wait(w1.async_pull());
        w1.wait(w1.async_push());  // the slowest worker's push: ps 0 answers the chief's held push
    });
    t.join();
    BOOST_TEST(worker_error == "no error");
    BOOST_TEST(worker == std::vector<std::size_t>{1}, boost::test_tools::per_element());
    BOOST_TEST(chief_error == "no error");
    BOOST_TEST(chief == std::vector<std::size_t>{1}, boost::test_tools::per_element());
    w0.wait(w0.async_pull());
    BOOST_TEST(part(to_vector(w0.params()), w0.partition()[1]) == part(to_vector(w1.params()), w0.partition()[1]),
               boost::test_tools::per_element());
    end_with_ps_0_and_the_spare(job, w0, w1);
}

BOOST_AUTO_TEST_CASE(two_ps_lost_with_one_spare_left_ends_the_client_naming_both)
{
    recorder rec;
    ps_job job(2, 1, async_config(), restoring_hooks(rec), with_spares(1));
    auto& w0 = job.chief();
    start(job, 1);
    job.net().kill_ps(0);
    job.net().kill_ps(1);
    try {
        w0.wait(w0.async_pull());
        BOOST_ERROR("a pull from two dead PS tasks completed");
    } catch (const lost_ps&) {
        BOOST_ERROR("two lost PS tasks and one spare: lost_ps, as if one spare could replace both");
    } catch (const pstrain::peer_error& e) {
        BOOST_TEST(std::string(e.what()) ==
                   "lost ps 0 and ps 1, and 1 spare is left to take their places: training cannot go on");
    }
    BOOST_CHECK_THROW(w0.async_pull(), pstrain::error);
    // The chief's task exits with that error: the waiting spare ends too, naming it.
    job.net().kill_worker(0);
    const auto spare = job.finish(2);
    BOOST_TEST_REQUIRE(spare.returned);
    BOOST_TEST(spare.peer_error);
    BOOST_TEST(spare.what.find("lost worker 0") != std::string::npos, spare.what);
}

// The chief could not go on (no checkpoint to restore from) and its task
// ended, and the waiting spare with it: another worker waiting for the
// spare's word ends at once, naming the spare, not at the timeout.
BOOST_AUTO_TEST_CASE(a_worker_waiting_for_a_spare_that_ended_stops_waiting)
{
    recorder rec;
    ps_job job(1, 2, async_config(), restoring_hooks(rec), with_spares(1));
    auto& w1 = job.worker(1);
    start(job, 2);
    job.net().kill_ps(0);
    expect_lost_ps(w1, w1.async_pull(), 0);
    job.net().kill_worker(0);
    const auto spare = job.finish(1);
    BOOST_TEST_REQUIRE(spare.returned);
    job.net().kill_ps(1);  // and its task exits
    try {
        w1.replace_lost_ps();
        BOOST_ERROR("replace_lost_ps returned with no spare left");
    } catch (const pstrain::peer_error& e) {
        // "and 0 spares are left" or "and no spare is left to take its
        // place (ps 1 ended first ...)", as the loss is seen first; never
        // the timeout's "no spare took its place within 3s".
        const std::string what = e.what();
        BOOST_TEST(what.find("lost ps 0, and ") == 0, what);
        BOOST_TEST((what.find("0 spares are left") != std::string::npos ||
                    what.find("no spare is left to take its place (ps 1 ended first") != std::string::npos),
                   what);
    }
}

// Two spares, used one after the other: each worker hears from the one
// that stands in (a receive is posted for each spare from the start).
BOOST_AUTO_TEST_CASE(the_second_spare_takes_the_place_of_the_first_when_it_is_lost_too)
{
    recorder rec;
    ps_job job(1, 2, async_config(), restoring_hooks(rec), with_spares(2));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w0.grads(), g0);
    for (int k = 0; k < 2; ++k) w0.wait(w0.async_push());
    const auto at_2 = to_vector(w0.params());
    BOOST_TEST_REQUIRE(w0.snapshot(2).size() == 1u);
    for (int lost : {0, 1}) {
        w0.wait(w0.async_push());
        job.net().kill_ps(lost);
        expect_lost_ps(w0, w0.async_pull(), 0);
        expect_lost_ps(w1, w1.async_pull(), 0);
        BOOST_TEST(w0.replace_lost_ps(2, false) == std::vector<std::size_t>{0}, boost::test_tools::per_element());
        BOOST_TEST(w1.replace_lost_ps() == std::vector<std::size_t>{0}, boost::test_tools::per_element());
        for (client* w : {static_cast<client*>(&w0), &w1}) {
            w->wait(w->async_pull());
            BOOST_TEST(to_vector(w->params()) == at_2, boost::test_tools::per_element());
        }
    }
    BOOST_TEST(w0.spares_left() == 0u);
    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST((job.finish(2).outcome == server_outcome::done));
}

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

// With one PS there is nothing else to roll back: the chief asks no one
// for a rollback, and the spare restores the whole model.
BOOST_AUTO_TEST_CASE(sync_with_one_ps_the_spare_restores_the_whole_model_and_no_one_rolls_back)
{
    recorder rec;
    ps_job job(1, 2, sync_config(), restoring_hooks(rec), with_spares(1));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    push_g0_and_g1(w0, w1);
    const auto at_1 = to_vector(w0.params());
    BOOST_TEST_REQUIRE(w0.snapshot(1).size() == 1u);
    push_g0_and_g1(w0, w1);

    job.net().kill_ps(0);
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    const auto t0 = w0.async_push();
    const auto t1 = w1.async_push();
    expect_lost_ps(w0, t0, 0);
    expect_lost_ps(w1, t1, 0);
    // No other PS: no filler, no rollback; one after the other.
    BOOST_TEST(w0.replace_lost_ps(1, true) == std::vector<std::size_t>{0}, boost::test_tools::per_element());
    BOOST_TEST(w1.replace_lost_ps(true) == std::vector<std::size_t>{0}, boost::test_tools::per_element());
    for (client* w : {static_cast<client*>(&w0), &w1}) {
        w->wait(w->async_pull());
        BOOST_TEST(to_vector(w->params()) == at_1, boost::test_tools::per_element());
        BOOST_TEST(w->global_step() == 1u);
    }
    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST((job.finish(1).outcome == server_outcome::done));
}
