// A lost PS's recovery (ps_recovery.hpp, --ps-spares): the checkpoint the
// chief restores a lost shard from, the updates async training loses, and
// the chief's line once the spares stand in.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE ps_recovery
#include <boost/test/unit_test.hpp>

#include "trainer/app/ps_recovery.hpp"
#include "pstrain/error.hpp"
#include "tests/unit/trainer/app/standalone_job.hpp"

#include <fstream>
#include <iterator>
#include <string>

using namespace pstrain;
using namespace pstrain::testing;

namespace {

std::string error_of(const std::string& dir, std::size_t lost, std::uint64_t step)
{
    try {
        trainer::checkpoint_to_restore(dir, lost, step);
    } catch (const error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_ps_lost_before_the_first_checkpoint_ends_the_job_asking_for_sooner_checkpoints)
{
    scratch_directory dir;
    BOOST_TEST(error_of(dir.path, 1, 7) ==
               "lost ps 1 at global step 7, before the first checkpoint: a spare restores a lost shard from the "
               "newest checkpoint in " +
                   dir.path + ", and there is none yet; checkpoint sooner (--save-checkpoint-steps)");
}

BOOST_AUTO_TEST_CASE(a_checkpoint_that_cannot_be_read_is_named_with_the_loss)
{
    scratch_directory dir;
    std::ofstream(dir.path + "/" + checkpoint::manifest_name(4)) << "not a manifest\n";
    const auto why = error_of(dir.path, 0, 9);
    BOOST_TEST(why.rfind("lost ps 0 at global step 9, and no checkpoint can restore its shard: ", 0) == 0, why);
}

BOOST_AUTO_TEST_CASE(the_newest_complete_checkpoint_restores_the_lost_shard)
{
    scratch_directory dir;
    auto o = linear_run(dir.path, 6);
    o.save_checkpoint_steps = 2;
    BOOST_TEST_REQUIRE(run_linear(o).status == 0);
    BOOST_TEST(trainer::checkpoint_to_restore(dir.path, 0, 7).global_step == 6u);
}

BOOST_AUTO_TEST_CASE(async_loses_the_lost_shards_updates_since_the_checkpoint_and_sync_none)
{
    BOOST_TEST(trainer::lost_updates(false, 130, 100) == 30u);
    BOOST_TEST(trainer::lost_updates(false, 0, 100) == 0u);   // no reply came from it
    BOOST_TEST(trainer::lost_updates(true, 130, 100) == 0u);  // the steps since are trained again
}

BOOST_AUTO_TEST_CASE(the_chiefs_line_says_what_went_back)
{
    BOOST_TEST(trainer::restored_line({1}, "/ckpt", 100, 130, true, 0, 0) ==
               "ps 1 restored by a spare from /ckpt/" + checkpoint::manifest_name(100) +
                   ": every shard rolled back from global step 130 to 100; the 30 steps since are trained again");
    BOOST_TEST(trainer::restored_line({0, 2}, "/ckpt", 100, 130, false, 25, 125) ==
               "ps 0, ps 2 restored by a spare from /ckpt/" + checkpoint::manifest_name(100) +
                   " (global step 100): about 25 updates of its shard were lost (its step was 125 in its last reply "
                   "to the chief); the other shards keep theirs");
}

// A job of one worker (the chief, sync) and one PS with a spare over the
// loopback, the PS killed when it completes step 12 (before its reply: the
// chief saw step 11): the spare restores the checkpoint of step 10, the
// data go back with the model, and the job trains to the end.
BOOST_AUTO_TEST_CASE(a_spare_takes_the_killed_ps_place_and_the_job_trains_on_from_the_checkpoint)
{
    scratch_directory dir;
    auto o = linear_run(dir.path, 30);
    o.standalone = false;
    o.sync_replicas = true;
    o.save_checkpoint_steps = 5;
    o.ps_spares = 1;
    o.peer_timeout = 30;
    o.metrics_file = dir.path + "/metrics.jsonl";
    int status = -1;
    const auto log = stderr_of([&] {
        checkpoint::prepare_directory(o.checkpoint_dir);
        ps::loopback_network net(2, 1);
        auto hooks = trainer::server_hooks_for(o);
        hooks.step_completed = [done = hooks.step_completed, &net](std::uint64_t step) {
            if (step == 12) net.kill_ps(0);
            return done(step);
        };
        ps::server first(net.ps(0), trainer::server_config_for(o, 0, 1), hooks);
        auto spare_config = trainer::server_config_for(o, 1, 1);
        spare_config.spare = true;
        ps::server spare(net.ps(1), spare_config, trainer::server_hooks_for(o));
        std::thread first_thread([&] {
            try {
                first.run();
            } catch (...) {}  // killed
        });
        std::exception_ptr spare_error;
        std::thread spare_thread([&] {
            try {
                spare.run();
            } catch (...) {
                spare_error = std::current_exception();
            }
        });
        trainer::loop_role who;
        who.num_ps = 1;
        who.ps_spares = 1;
        who.name = "worker 0";
        who.worker_names = {"worker 0"};
        who.after_shutdown = [&] { spare_thread.join(); };
        try {
            status = trainer::run_training_loop(o, who, net.worker(0));
        } catch (...) {
            net.kill_worker(0);
            if (spare_thread.joinable()) spare_thread.join();
            first_thread.join();
            throw;
        }
        if (spare_thread.joinable()) spare_thread.join();
        first_thread.join();
        if (spare_error) std::rethrow_exception(spare_error);
    });
    BOOST_TEST(status == 0, log);
    BOOST_TEST(contains(log, "a spare takes its place (1 spare left before)"), log);
    BOOST_TEST(contains(log, "ps 0 restored by a spare from " + dir.path + "/" + checkpoint::manifest_name(10) +
                                 ": every shard rolled back from global step 11 to 10; the 1 steps since are "
                                 "trained again"),
               log);
    BOOST_TEST(contains(log, "training went on at global step 11, "), log);
    BOOST_TEST(contains(log, "after this worker saw ps 0 lost"), log);
    BOOST_TEST(complete_steps(dir.path).front() == 30u);
    // The chief's record of it, for `pstrain status`.
    std::ifstream metrics(o.metrics_file);
    const std::string events((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
    BOOST_TEST(contains(events, R"("event":"ps_replaced")"), events);
    BOOST_TEST(contains(events, R"("rolled_back_from":11)"), events);
    BOOST_TEST(contains(events, R"("lost_updates":0)"), events);
}
