// The training loop's checkpoints when the store fails (pstrain(1),
// Checkpoints): a failed checkpoint is an error line while training goes
// on, the save is tried again at the next step the schedule allows, and a
// failed final checkpoint makes the exit status 1; a failed write leaves
// no file of its step behind, and the previous checkpoint intact.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE training_loop
#include <boost/test/unit_test.hpp>

#include "tests/unit/trainer/app/standalone_job.hpp"

#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace pstrain::testing;
using steps = std::vector<std::uint64_t>;

// The async overlapped step (--bucket-mb): the linear model's two tensors
// go as two buckets, which the PS applies on arrival as the step's one Adam
// update; a worker alone ends where one push after backward ends, bit for
// bit, at the same global step.
BOOST_AUTO_TEST_CASE(async_buckets_end_where_one_push_ends_bit_for_bit)
{
    const auto final_shard = [](double bucket_mb) {
        scratch_directory dir;
        auto o = linear_run(dir.path, 40);
        o.optimizer = pstrain::ps::optimizer_kind::adam;
        o.learning_rate = 0.05f;
        o.bucket_mb = bucket_mb;
        const auto r = run_linear(o);
        BOOST_TEST(r.status == 0, r.stderr_text);
        BOOST_TEST(contains(r.stderr_text, "async steps push the gradient in 2 buckets") == (bucket_mb > 0),
                   r.stderr_text);
        BOOST_TEST_REQUIRE(complete_steps(dir.path).front() == 40u);
        return pstrain::checkpoint::read_shard(dir.path, pstrain::checkpoint::shard_name(40, 0, 1));
    };
    const auto one_push = final_shard(0);
    const auto buckets = final_shard(1e-9);  // a bucket a tensor
    BOOST_TEST(buckets.meta.updates == one_push.meta.updates);
    BOOST_TEST(buckets.values == one_push.values, boost::test_tools::per_element());
    BOOST_TEST(buckets.state == one_push.state, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_store_that_works_saves_every_second_step_and_at_the_end)
{
    scratch_directory dir;
    auto o = linear_run(dir.path, 6);
    o.save_checkpoint_steps = 2;
    const auto r = run_linear(o);
    BOOST_TEST(r.status == 0);
    BOOST_TEST(complete_steps(dir.path) == (steps{6, 4, 2}), r.stderr_text);
    BOOST_TEST(!contains(r.stderr_text, "failed"), r.stderr_text);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_that_fails_once_is_saved_at_the_next_step_and_training_goes_on)
{
    scratch_directory dir;
    auto o = linear_run(dir.path, 6);
    o.save_checkpoint_steps = 2;
    block_shard_of_step(dir.path, 2);
    const auto r = run_linear(o);
    unblock(dir.path);
    const auto& log = r.stderr_text;
    // The PS's line says why, the chief's that the previous checkpoint stands.
    BOOST_TEST(
        contains(log, fmt::format("error: checkpoint at global step 2 failed: cannot rename into place {}/{}.tmp.",
                                  dir.path, pstrain::checkpoint::shard_name(2, 0, 1))),
        log);
    BOOST_TEST(contains(log, ": Is a directory: choose another --checkpoint-dir; the previous checkpoint is intact"),
               log);
    BOOST_TEST(contains(log,
                        "error: checkpoint at global step 2 failed: ps 0 could not write its shard (its error line "
                        "says why); the previous checkpoint is intact"),
               log);
    // Tried again at step 3, not at the next multiple of 2, then on schedule and at the end.
    BOOST_TEST(contains(log, "checkpoint at global step 3 saved"), log);
    BOOST_TEST(complete_steps(dir.path) == (steps{6, 4, 3}), log);
    BOOST_TEST(r.status == 0);
    BOOST_TEST(!any_temporary_file(dir.path));
}

BOOST_AUTO_TEST_CASE(a_store_that_keeps_failing_ends_with_status_1_and_leaves_no_checkpoint_file)
{
    scratch_directory dir;
    auto o = linear_run(dir.path, 6);
    o.save_checkpoint_steps = 2;
    for (std::uint64_t s = 1; s <= 6; ++s) block_shard_of_step(dir.path, s);
    const auto r = run_linear(o);
    unblock(dir.path);
    const auto& log = r.stderr_text;
    // Tried at 2, again at 3, then at each multiple (4, 6: not 5), and
    // training reaches its end.
    for (int s : {2, 3, 4, 6})
        BOOST_TEST(
            contains(log, fmt::format("error: checkpoint at global step {} failed: ps 0 could not write its shard", s)),
            "step " << s << ": " << log);
    BOOST_TEST(!contains(log, "error: checkpoint at global step 5 failed"), log);
    BOOST_TEST(contains(log,
                        "error: the final checkpoint was not written (see the error above): the result of this run is "
                        "only in the line above"),
               log);
    BOOST_TEST(r.status == 1);
    // No manifest, no shard, no temporary file: nothing a resume could take for a checkpoint.
    BOOST_TEST(files_in(dir.path).empty(), fmt::format("{}", fmt::join(files_in(dir.path), " ")));
}

// Async: the chief, stopped (or slow) while the other worker made the last
// steps, hears done from one PS whose values are final and has older ones
// from the other, which its held push reaches last.  Its final checkpoint
// and evaluation are of every PS's final values (bench/chaos found it:
// "eval at global step 23409" of a job that ended at 30000, half of the
// model 6600 updates old), and the other worker leaves the lagging PS
// instead of being lost to it.
BOOST_AUTO_TEST_CASE(an_async_chief_behind_the_end_evaluates_and_saves_every_ps_final_values)
{
    using namespace pstrain;
    scratch_directory dir;
    auto o = linear_run(dir.path, 40);
    o.standalone = false;
    int status = -1;
    std::string worker_end = "running";
    const auto log = stderr_of([&] {
        checkpoint::prepare_directory(o.checkpoint_dir);
        ps::loopback_network net(2, 2);
        std::vector<std::unique_ptr<ps::server>> servers;
        for (int p = 0; p < 2; ++p) {
            auto hooks = trainer::server_hooks_for(o);
            if (p == 1)  // from global step 5 on, the chief's messages to ps 1 stay in flight
                hooks.step_completed = [&net, end = hooks.step_completed](std::uint64_t step) {
                    if (step == 5) net.hold_messages(0, 1);
                    return end(step);
                };
            servers.push_back(std::make_unique<ps::server>(net.ps(p), trainer::server_config_for(o, p, 2), hooks));
        }
        std::vector<std::thread> ps_threads;
        for (auto& s : servers) ps_threads.emplace_back([&s] { s->run(); });
        const auto role = [](int index) {
            trainer::loop_role who;
            who.index = index;
            who.num_ps = 2;
            who.num_workers = 2;
            who.worker_names = {"worker 0", "worker 1"};
            who.name = who.worker_names[static_cast<std::size_t>(index)];
            return who;
        };
        std::thread worker([&] {
            try {
                trainer::run_worker_task(o, role(1), net.worker(1), net.worker(1));  // and its connections closed
                worker_end = "ended";
            } catch (const std::exception& e) {
                worker_end = e.what();
            }
        });
        // Once worker 1 has made the last steps, the held push reaches ps 1.
        std::thread release([&] {
            worker.join();
            net.release_messages(0, 1);
        });
        auto chief = role(0);
        chief.after_shutdown = [&] {
            for (auto& t : ps_threads) t.join();
        };
        try {
            status = trainer::run_training_loop(o, chief, net.worker(0));
        } catch (...) {
            net.kill_worker(0);
        }
        release.join();
        for (auto& t : ps_threads)
            if (t.joinable()) t.join();
    });
    BOOST_TEST_MESSAGE(log);
    BOOST_TEST(status == 0);
    BOOST_TEST(worker_end == "ended");
    BOOST_TEST(contains(log, "eval at global step 40:"), log);
    BOOST_TEST(complete_steps(dir.path).front() == 40u, log);
    BOOST_TEST(!contains(log, "lost worker 1"), log);
}

// A chief whose final checkpoint was not written (status 1) ended the job
// in order: its connections close as after a success, so that its shutdown
// reaches a spare even while the link to the spare still holds it in
// flight.  bench/chaos found it under 5% loss: the chief closed with force,
// dropping the shutdown, and the spare reported it lost ("lost worker 0
// (n1, the chief) while this spare waited").
BOOST_AUTO_TEST_CASE(a_chief_whose_final_checkpoint_failed_still_tells_a_waiting_spare_that_training_ended)
{
    using namespace pstrain;
    scratch_directory dir;
    auto o = linear_run(dir.path, 6);
    o.standalone = false;
    o.ps_spares = 1;
    block_shard_of_step(dir.path, 6);
    int status = -1;
    std::string ps_end, spare_end;  // "done", or what the server threw
    const auto log = stderr_of([&] {
        checkpoint::prepare_directory(o.checkpoint_dir);
        ps::loopback_network net(2, 1);  // ps 0 serves, ps 1 is its spare
        auto hooks = trainer::server_hooks_for(o);
        hooks.snapshot = [&net, store = hooks.snapshot](const ps::shard_snapshot& s) {
            if (s.step == 6) net.hold_messages(0, 1);  // from the final checkpoint on, the spare's link is slow
            return store(s);
        };
        ps::server server(net.ps(0), trainer::server_config_for(o, 0, 1), hooks);
        auto spare_config = trainer::server_config_for(o, 1, 1);
        spare_config.spare = true;
        ps::server spare(net.ps(1), spare_config, trainer::server_hooks_for(o));
        const auto run = [](ps::server& s, std::string& end) {
            try {
                s.run();
                end = "done";
            } catch (const std::exception& e) {
                end = e.what();
            }
        };
        std::thread ps_thread([&] { run(server, ps_end); });
        std::thread spare_thread([&] { run(spare, spare_end); });
        trainer::loop_role who;
        who.name = "worker 0 (the chief)";
        who.ps_spares = 1;
        who.worker_names = {who.name};
        who.after_shutdown = [&] { ps_thread.join(); };
        try {
            status = trainer::run_worker_task(o, who, net.worker(0), net.worker(0));
        } catch (...) {
            net.kill_worker(0);
        }
        if (ps_thread.joinable()) ps_thread.join();
        spare_thread.join();
    });
    BOOST_TEST_MESSAGE(log);
    BOOST_TEST(contains(log, "error: the final checkpoint was not written"), log);
    BOOST_TEST(status == 1);
    BOOST_TEST(ps_end == "done");
    BOOST_TEST(spare_end == "done", "the spare: " << spare_end);
    BOOST_TEST(!contains(log, "lost worker 0"), log);
}
