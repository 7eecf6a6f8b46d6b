// Who trains on a PS: the membership class itself (the slots, who counts
// as live, the gradients per step, a worker coming back or new, the verdict
// on a lost worker), then the server's cases of lost, leaving and new
// workers over the in-process loopback.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE membership
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "library/ps/membership.hpp"
#include "tests/unit/library/ps/loopback_job.hpp"
#include "tests/unit/library/ps/server_cases.hpp"
#include "tests/unit/stderr_capture.hpp"

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

// One PS's membership of 3 worker slots, the test as the workers.
struct members_of_three {
    explicit members_of_three(server_config c)
        : net(1, 3), activity({"worker 0", "worker 1", "worker 2"}), profile(server_phase_names()),
          links(net.ps(0), activity, profile), cfg(std::move(c)), bound(3, unbounded_staleness),
          members(net.ps(0), links, bound, cfg, state)
    {
        members.configure();
    }
    // What the membership logs while `f` runs.
    template <class F>
    std::string log_of(F f)
    {
        return pstrain::testing::stderr_of(f);
    }
    loopback_network net;
    activity_recorder activity;
    server_clock profile;
    worker_links links;
    server_config cfg;
    training_state state;
    staleness_bound bound;
    membership members;
};

server_config elastic_sync()
{
    auto c = sync_config();
    c.training.elastic = true;
    return c;
}

}  // namespace

// ------------------------------------------------------ the membership itself

BOOST_AUTO_TEST_CASE(every_slot_is_live_from_the_start_and_a_step_aggregates_every_worker)
{
    members_of_three m(sync_config());
    BOOST_TEST(m.members.slots() == 3u);
    BOOST_TEST(m.members.live() == 3);
    BOOST_TEST(m.members.replicas_wanted() == 3);
    BOOST_TEST(m.members.replicas() == 3);
    BOOST_TEST(m.members.pace_words() == " aggregating 3 of 3 workers");
}

BOOST_AUTO_TEST_CASE(room_for_later_workers_starts_lost_and_an_elastic_step_aggregates_the_live_ones)
{
    auto c = elastic_sync();
    c.started_workers = 2;
    members_of_three m(c);
    BOOST_TEST(m.links[2].lost);
    BOOST_TEST(m.members.live() == 2);
    BOOST_TEST(m.members.replicas_wanted() == 3);
    BOOST_TEST(m.members.replicas() == 2);
    BOOST_TEST(m.members.pace_words() ==
               " aggregating 2 of 2 workers (elastic: fewer when workers are lost), room for 3 workers");
}

BOOST_AUTO_TEST_CASE(replicas_to_aggregate_is_what_a_step_asks_for)
{
    members_of_three m(sync_config(2));
    BOOST_TEST(m.members.replicas_wanted() == 2);
    BOOST_TEST(m.members.replicas() == 2);
}

BOOST_AUTO_TEST_CASE(async_words_are_the_staleness_bound)
{
    members_of_three unbounded(async_config());
    BOOST_TEST(unbounded.members.pace_words() == "");
    members_of_three bounded(bounded_config(1));
    BOOST_TEST(bounded.members.pace_words() == " (a worker at most 1 pushes ahead of the slowest)");
    BOOST_TEST(bounded.bound.bounded());
}

// The one definition: a new process whose hello is not welcomed yet is not
// live (nor counted in the values replies); once welcomed it is.
BOOST_AUTO_TEST_CASE(a_new_process_is_live_from_the_welcome_of_its_hello)
{
    members_of_three m(elastic_sync());
    m.links[2].lost = true;
    BOOST_TEST(m.members.live() == 2);
    m.links[2].lost = false;
    m.links[2].rejoining = true;
    BOOST_TEST(!m.links[2].live());
    BOOST_TEST(m.members.live() == 2);
    BOOST_TEST(m.links.live() == 2);
    const auto log = m.log_of([&] { m.members.welcomed(2); });
    BOOST_TEST(m.links[2].live());
    BOOST_TEST(m.members.live() == 3);
    BOOST_TEST(log.find("worker 2 joined again: elastic sync training aggregates 3 gradients per step from global "
                        "step 0 (was 3)") != std::string::npos,
               log);
}

BOOST_AUTO_TEST_CASE(a_lost_worker_of_an_elastic_sync_job_lowers_the_gradients_per_step)
{
    members_of_three m(elastic_sync());
    m.net.kill_worker(2);
    const auto log = m.log_of([&] { m.members.lost(2); });
    BOOST_TEST(m.members.live() == 2);
    BOOST_TEST(m.members.replicas() == 2);
    BOOST_TEST(log.find("lost worker 2 (") != std::string::npos, log);
    BOOST_TEST(log.find("elastic sync training goes on, aggregating 2 gradients per step from global step 0 (was 3); 2 "
                        "workers alive") != std::string::npos,
               log);
}

BOOST_AUTO_TEST_CASE(a_lost_worker_of_an_async_job_is_no_loss_to_the_others)
{
    members_of_three m(async_config());
    m.net.kill_worker(1);
    const auto log = m.log_of([&] { m.members.lost(1); });
    BOOST_TEST(m.members.live() == 2);
    BOOST_TEST(log.find("going on with 2 workers") != std::string::npos, log);
}

BOOST_AUTO_TEST_CASE(a_lost_worker_that_sync_needs_ends_the_job_naming_the_fix)
{
    members_of_three m(sync_config());
    m.net.kill_worker(2);
    try {
        m.log_of([&] { m.members.lost(2); });
        BOOST_ERROR("sync went on with too few workers");
    } catch (const pstrain::peer_error& e) {
        BOOST_TEST(e.peer() == "worker 2");
        BOOST_TEST(std::string(e.what()).find("sync training aggregates 3 gradients per step and only 2 workers are "
                                              "left; use --replicas-to-aggregate 2 to run with backup workers") !=
                       std::string::npos,
                   e.what());
    }
}

BOOST_AUTO_TEST_CASE(losing_the_chief_ends_even_an_elastic_job)
{
    members_of_three m(elastic_sync());
    m.net.kill_worker(0);
    try {
        m.log_of([&] { m.members.lost(0); });
        BOOST_ERROR("the job went on without its chief");
    } catch (const pstrain::peer_error& e) {
        BOOST_TEST(e.peer() == "worker 0");
        BOOST_TEST(std::string(e.what()).find("the chief initialises, evaluates and ends the job") != std::string::npos,
                   e.what());
    }
}

BOOST_AUTO_TEST_CASE(after_the_end_a_lost_worker_is_named_only_before_its_last_reply)
{
    members_of_three m(async_config());
    m.state.done = true;
    m.links[1].told_done = true;
    m.net.kill_worker(1);
    m.net.kill_worker(2);
    const auto log = m.log_of([&] {
        m.members.lost(1);
        m.members.lost(2);
    });
    BOOST_TEST(log.find("lost worker 1") == std::string::npos, log);
    BOOST_TEST(log.find("lost worker 2 (") != std::string::npos, log);
}

BOOST_AUTO_TEST_CASE(a_worker_that_left_lowers_a_sync_step_whatever_the_settings)
{
    members_of_three m(sync_config());
    const auto log = m.log_of([&] { m.members.left(2); });
    BOOST_TEST(m.members.live() == 2);
    BOOST_TEST(m.members.replicas() == 2);
    BOOST_TEST(log.find("worker 2 left (its program ended): sync training aggregates 2 gradients per step from "
                        "global step 0 (was 3)") != std::string::npos,
               log);
}

// -------------------------------------------- a server's lost and new workers

BOOST_AUTO_TEST_CASE(async_goes_on_without_a_lost_worker)
{
    ps_job job(1, 3, async_config());
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 3);
    job.net().kill_worker(2);
    fill(w0.grads(), g0);
    w0.wait(w0.async_push());
    fill(w1.grads(), g1);
    w1.wait(w1.async_push());
    BOOST_TEST(to_vector(w1.params()) == (std::vector<float>{-1, 1, 2, 4, 4.5f, 6}), boost::test_tools::per_element());
    w0.shutdown();
    pull_until_done(w1);
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(!end.threw, end.what);
    BOOST_TEST((end.outcome == server_outcome::done));
}

BOOST_AUTO_TEST_CASE(a_worker_lost_after_the_end_before_its_last_reply_is_named)
{
    // A killed worker found only after the chief ended the job (a short
    // run, a slow heartbeat) is still named; one that left is not.
    ps_job job(1, 3, async_config());
    start(job, 3);
    pstrain::testing::run_end end;
    const auto log = pstrain::testing::stderr_of([&] {
        job.chief().shutdown();
        pull_until_done(job.worker(1));
        job.net().kill_worker(2);
        end = job.finish();
    });
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(!end.threw, end.what);
    BOOST_TEST((end.outcome == server_outcome::done));
    BOOST_TEST(log.find("lost worker 2 (") != std::string::npos, log);
    BOOST_TEST(log.find("after training ended at global step 0") != std::string::npos, log);
    BOOST_TEST(log.find("lost worker 1") == std::string::npos, log);
}

BOOST_AUTO_TEST_CASE(sync_with_a_backup_worker_goes_on_without_a_lost_worker)
{
    ps_job job(1, 3, sync_config(2));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 3);
    job.net().kill_worker(2);
    push_g0_and_g1(w0, w1);
    BOOST_TEST(to_vector(w1.params()) == after_one_step, boost::test_tools::per_element());
    w0.shutdown();
    pull_until_done(w1);
    const auto end = job.finish();
    BOOST_TEST(!end.threw, end.what);
    BOOST_TEST((end.outcome == server_outcome::done));
}

// A worker whose program ends says so (client::leave): a sync job that is
// not elastic goes on with the chief's gradients alone, the end of the
// worker's connection is no loss, and the job ends as the chief says.
BOOST_AUTO_TEST_CASE(sync_goes_on_without_a_worker_that_left)
{
    ps_job job(1, 2, sync_config());
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    pstrain::testing::run_end end;
    const auto log = pstrain::testing::stderr_of([&] {
        push_g0_and_g1(w0, w1);
        w1.leave();
        job.net().kill_worker(1);  // its process ends
        fill(w0.grads(), g0);
        w0.step();
        BOOST_TEST(job.server(0).global_step() == 2u);
        w0.shutdown();
        end = job.finish();
    });
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(!end.threw, end.what);
    BOOST_TEST((end.outcome == server_outcome::done));
    BOOST_TEST(log.find("worker 1 left (its program ended): sync training aggregates 1 gradients per step from "
                        "global step 1 (was 2)") != std::string::npos,
               log);
    BOOST_TEST(log.find("lost") == std::string::npos, log);
    BOOST_CHECK_THROW(w1.async_pull(), pstrain::error);
    BOOST_CHECK_THROW(w0.leave(), pstrain::error);  // the chief ends the job instead
}

server_config elastic_config()
{
    auto c = sync_config();  // every worker's gradient, every step, while all are alive
    c.training.elastic = true;
    return c;
}

BOOST_AUTO_TEST_CASE(elastic_sync_aggregates_the_workers_left_after_a_loss)
{
    ps_job job(1, 3, elastic_config());
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 3);
    pstrain::testing::run_end end;
    const auto log = pstrain::testing::stderr_of([&] {
        job.net().kill_worker(2);
        // Two steps of the two workers left: each the mean of their two gradients.
        for (const auto& expected : {after_one_step, after_two_steps}) {
            push_g0_and_g1(w0, w1);
            BOOST_TEST(to_vector(w1.params()) == expected, boost::test_tools::per_element());
        }
        w0.shutdown();
        pull_until_done(w1);
        end = job.finish();
    });
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(!end.threw, end.what);
    BOOST_TEST((end.outcome == server_outcome::done));
    BOOST_TEST(log.find("lost worker 2 (") != std::string::npos, log);
    BOOST_TEST(log.find("aggregating 2 gradients per step from global step 0 (was 3)") != std::string::npos, log);
}

// Every values reply says how many workers the PS has not lost and the
// reader's rank among them: the workers of an elastic job re-split their
// data by it.  Worker 1 of 3 lost: worker 2 becomes rank 1 of 2.
BOOST_AUTO_TEST_CASE(values_say_the_live_workers_and_the_readers_rank_among_them)
{
    ps_job job(1, 3, elastic_config());
    auto& w0 = job.chief();
    auto& w2 = job.worker(2);
    start(job, 3);
    BOOST_TEST((w0.live_workers() == client::membership{3, 0}));
    BOOST_TEST((w2.live_workers() == client::membership{3, 2}));
    pstrain::testing::run_end end;
    const auto log = pstrain::testing::stderr_of([&] {
        job.net().kill_worker(1);
        push_g0_and_g1(w0, w2);
        w0.shutdown();
        pull_until_done(w2);
        end = job.finish();
    });
    BOOST_TEST(!end.threw, end.what);
    BOOST_TEST((w0.live_workers() == client::membership{2, 0}));
    BOOST_TEST((w2.live_workers() == client::membership{2, 1}), log);
}

BOOST_AUTO_TEST_CASE(elastic_sync_completes_the_step_that_waited_for_the_lost_worker)
{
    ps_job job(1, 3, elastic_config());
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 3);
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    const auto t0 = w0.async_push();
    const auto t1 = w1.async_push();
    BOOST_TEST(held_for_the_step(job, w0, 0, t0), "two gradients of three completed a step");
    job.net().kill_worker(2);
    w0.wait(t0);
    w1.wait(t1);
    BOOST_TEST(job.server(0).global_step() == 1u);
    BOOST_TEST(to_vector(w0.params()) == after_one_step, boost::test_tools::per_element());
    BOOST_TEST(to_vector(w1.params()) == after_one_step, boost::test_tools::per_element());
    w0.shutdown();
    pull_until_done(w1);
    const auto end = job.finish();
    BOOST_TEST(!end.threw, end.what);
}

BOOST_AUTO_TEST_CASE(elastic_sync_still_ends_when_the_chief_is_lost)
{
    ps_job job(1, 3, elastic_config());
    start(job, 3);
    job.net().kill_worker(0);
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(end.peer_error, end.what);
    BOOST_TEST(end.what.find("the chief initialises, evaluates and ends the job") != std::string::npos, end.what);
}

// After a step of workers 0 and 1 alone: a new worker 2 (its hello
// welcomed) pulls the values of now, the next step waits for its gradient
// too (the mean of three), and the values replies count it; then the chief
// ends the job.
void a_new_worker_2_pulls_and_the_next_step_aggregates_three(ps_job& job, chief_client& w0, client& w1)
{
    auto& w2 = job.restart_worker(2);
    w2.wait(w2.async_pull());
    BOOST_TEST(to_vector(w2.params()) == after_one_step, boost::test_tools::per_element());
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    fill(w2.grads(), std::vector<float>{2, 1, 1, 0, 0.5f, 0});  // g0 and g1's mean: the step's mean stays it
    const auto t0 = w0.async_push();
    const auto t1 = w1.async_push();
    BOOST_TEST(held_for_the_step(job, w0, 0, t0), "two gradients of three completed a step");
    w2.wait(w2.async_push());
    w0.wait(t0);
    w1.wait(t1);
    BOOST_TEST(to_vector(w2.params()) == after_two_steps, boost::test_tools::per_element());
    BOOST_TEST((w0.live_workers() == client::membership{3, 0}));
    BOOST_TEST((w2.live_workers() == client::membership{3, 2}));
    w0.shutdown();
    pull_until_done(w1);
    pull_until_done(w2);
}

BOOST_AUTO_TEST_CASE(elastic_sync_takes_a_restarted_worker_back_and_aggregates_it_again)
{
    ps_job job(1, 3, elastic_config());
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 3);
    pstrain::testing::run_end end;
    const auto log = pstrain::testing::stderr_of([&] {
        job.net().kill_worker(2);
        push_g0_and_g1(w0, w1);
        BOOST_TEST((w1.live_workers() == client::membership{2, 1}));
        a_new_worker_2_pulls_and_the_next_step_aggregates_three(job, w0, w1);
        end = job.finish();
    });
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(!end.threw, end.what);
    BOOST_TEST(log.find("aggregating 2 gradients per step from global step 0 (was 3)") != std::string::npos, log);
    BOOST_TEST(log.find("worker 2 is back: a new process took its place at global step 1") != std::string::npos, log);
    BOOST_TEST(log.find("worker 2 joined again: elastic sync training aggregates 3 gradients per step from global "
                        "step 1 (was 2)") != std::string::npos,
               log);
}

// A job that grows: 3 workers' room, 2 started.  Sync aggregates the 2 from
// the start (no step waits for the third), and a worker that joins later
// takes the free slot: it pulls the values of now, and the next step
// aggregates its gradient too.
BOOST_AUTO_TEST_CASE(elastic_sync_grows_when_a_worker_joins_the_room_kept_for_it)
{
    auto config = elastic_config();
    config.started_workers = 2;
    ps_job job(1, 3, config);
    job.net().kill_worker(2);  // no process in the third slot yet
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    pstrain::testing::run_end end;
    const auto log = pstrain::testing::stderr_of([&] {
        start(job, 2);
        push_g0_and_g1(w0, w1);
        BOOST_TEST((w1.live_workers() == client::membership{2, 1}));
        a_new_worker_2_pulls_and_the_next_step_aggregates_three(job, w0, w1);
        end = job.finish();
    });
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(!end.threw, end.what);
    BOOST_TEST(log.find("aggregating 2 of 2 workers (elastic: fewer when workers are lost), room for 3 workers") !=
                   std::string::npos,
               log);
    BOOST_TEST(log.find("worker 2 is connected: a new worker in room the job kept for one, at global step 1") !=
                   std::string::npos,
               log);
    BOOST_TEST(log.find("worker 2 joined: elastic sync training aggregates 3 gradients per step from global step 1 "
                        "(was 2)") != std::string::npos,
               log);
}

// Async with a staleness bound: the free slot holds nobody back.
BOOST_AUTO_TEST_CASE(an_empty_slot_is_no_slowest_worker_for_the_staleness_bound)
{
    auto config = async_config();
    config.training.elastic = true;
    config.started_workers = 2;
    config.training.max_staleness = 0;
    ps_job job(1, 3, config);
    job.net().kill_worker(2);
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    for (int s = 0; s < 3; ++s) {
        fill(w0.grads(), g0);
        fill(w1.grads(), g1);
        const auto t0 = w0.async_push();
        const auto t1 = w1.async_push();
        w0.wait(t0);
        w1.wait(t1);
    }
    w0.wait(w0.async_pull());
    BOOST_TEST(w0.global_step() == 6u, "six pushes applied, none held for the empty slot");
    w0.shutdown();
    pull_until_done(w1);
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(!end.threw, end.what);
}

BOOST_AUTO_TEST_CASE(room_for_workers_that_join_later_is_for_elastic_jobs)
{
    auto config = async_config();
    config.started_workers = 2;
    loopback_network net(1, 3);
    BOOST_CHECK_EXCEPTION(server(net.ps(0), config, {}), pstrain::error, [](const pstrain::error& e) {
        return std::string(e.what()) ==
               "room for workers that join later is for elastic jobs: set server_config::training.elastic";
    });
}

BOOST_AUTO_TEST_CASE(a_restarted_worker_is_refused_by_a_job_that_is_not_elastic)
{
    ps_job job(1, 3, async_config());
    auto& w0 = job.chief();
    start(job, 3);
    job.net().kill_worker(2);
    auto& w2 = job.restart_worker(2);
    try {
        w2.wait(w2.async_pull());
        BOOST_ERROR("a job that is not elastic took a restarted worker back");
    } catch (const pstrain::error& e) {
        BOOST_TEST(std::string(e.what()).find("this job is not elastic: a restarted worker cannot take the place of a "
                                              "lost one (start the job with --elastic to take workers back)") !=
                       std::string::npos,
                   e.what());
    }
    fill(w0.grads(), g0);
    w0.wait(w0.async_push());  // the job goes on without it
    w0.shutdown();
    pull_until_done(job.worker(1));
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(!end.threw, end.what);
}

BOOST_AUTO_TEST_CASE(losing_the_chief_ends_the_server_and_the_other_workers_hear_why)
{
    ps_job job(1, 2, async_config());
    auto& w1 = job.worker(1);
    start(job, 2);
    job.net().kill_worker(0);
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(end.peer_error, end.what);
    BOOST_TEST(end.who == "worker 0");
    BOOST_TEST(end.what.find("chief") != std::string::npos, end.what);
    try {
        w1.wait(w1.async_pull());
        BOOST_ERROR("worker 1 pulled from a PS that ended the job");
    } catch (const pstrain::peer_error& e) {
        BOOST_TEST(e.peer() == "ps 0");
        BOOST_TEST(std::string(e.what()).find("lost worker 0") != std::string::npos, e.what());
    }
}

BOOST_AUTO_TEST_CASE(sync_without_enough_workers_ends_and_tells_the_waiting_workers)
{
    ps_job job(1, 3, sync_config());  // every worker's gradient, every step
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 3);
    const auto t0 = w0.async_push();
    const auto t1 = w1.async_push();
    BOOST_TEST(held_for_the_step(job, w0, 0, t0));
    job.net().kill_worker(2);
    for (auto [w, t] : {std::pair{static_cast<client*>(&w0), t0}, std::pair{&w1, t1}}) {
        try {
            w->wait(t);
            BOOST_ERROR("a step completed without worker 2");
        } catch (const pstrain::peer_error& e) {
            BOOST_TEST(e.peer() == "ps 0");
            BOOST_TEST(std::string(e.what()).find("lost worker 2") != std::string::npos, e.what());
        }
    }
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(end.peer_error, end.what);
    BOOST_TEST(end.who == "worker 2");
    BOOST_TEST(end.what.find("only 2 workers are left") != std::string::npos, end.what);
}
