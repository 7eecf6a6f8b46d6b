// SIGTERM (Slurm's preemption, scancel, scontrol requeue): the chief saves
// a checkpoint at its next step and tells every task to stop; it exits
// with status 143 so that the requeued job resumes from it (pstrain(1)).
// When that checkpoint cannot be written, the status is 1 and the previous
// checkpoint is the one a requeued job resumes.  The signal, once caught,
// stays requested for the whole process: every case here runs under it.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE preemption
#include <boost/test/unit_test.hpp>

#include "tests/unit/trainer/app/standalone_job.hpp"
#include "trainer/app/signals.hpp"

#include <csignal>
#include <string>
#include <vector>

using namespace pstrain::testing;
using pstrain::trainer::preempted_exit_status;
using steps = std::vector<std::uint64_t>;

namespace {

// As Slurm does it: the handler run_standalone installs, then the signal.
void sigterm()
{
    pstrain::trainer::catch_termination();
    BOOST_TEST_REQUIRE(std::raise(SIGTERM) == 0);
    BOOST_TEST_REQUIRE(pstrain::trainer::termination_requested());
}

// A checkpoint at step 1 to resume from (a run of one step ends before it
// looks for SIGTERM, so it is the same under the signal).
void first_checkpoint(const std::string& dir)
{
    const auto r = run_linear(linear_run(dir, 1));
    BOOST_TEST_REQUIRE(r.status == 0);
    BOOST_TEST_REQUIRE(complete_steps(dir) == steps{1});
}

}  // namespace

BOOST_AUTO_TEST_CASE(sigterm_saves_a_checkpoint_at_the_next_step_stops_the_ps_and_exits_143)
{
    scratch_directory dir;
    sigterm();
    const auto r = run_linear(linear_run(dir.path, 100));
    const auto& log = r.stderr_text;
    BOOST_TEST(r.status == preempted_exit_status);
    BOOST_TEST(r.status == 143);
    BOOST_TEST((r.ps == pstrain::ps::server_outcome::stopped));
    BOOST_TEST(contains(log, "SIGTERM at global step 1: saving a checkpoint, then stopping every task"), log);
    BOOST_TEST(
        contains(log, fmt::format("stopped at global step 1: exiting with status 143 so that a requeued job resumes "
                                  "from {}/ckpt-0000000001.json",
                                  dir.path)),
        log);
    BOOST_TEST(complete_steps(dir.path) == steps{1}, log);
}

BOOST_AUTO_TEST_CASE(a_requeued_job_under_sigterm_resumes_then_saves_and_stops_at_its_next_step)
{
    scratch_directory dir;
    first_checkpoint(dir.path);
    sigterm();
    const auto r = run_linear(linear_run(dir.path, 100));
    BOOST_TEST(r.status == 143);
    BOOST_TEST(contains(r.stderr_text, "SIGTERM at global step 2: saving a checkpoint"), r.stderr_text);
    BOOST_TEST(complete_steps(dir.path) == (steps{2, 1}), r.stderr_text);
}

BOOST_AUTO_TEST_CASE(sigterm_with_a_failing_store_exits_1_and_leaves_the_previous_checkpoint_to_resume)
{
    scratch_directory dir;
    first_checkpoint(dir.path);
    block_shard_of_step(dir.path, 2);
    sigterm();
    const auto r = run_linear(linear_run(dir.path, 100));
    unblock(dir.path);
    const auto& log = r.stderr_text;
    BOOST_TEST(r.status == 1);
    // Every task is still told to stop.
    BOOST_TEST((r.ps == pstrain::ps::server_outcome::stopped));
    BOOST_TEST(contains(log, "error: checkpoint at global step 2 failed: ps 0 could not write its shard"), log);
    BOOST_TEST(contains(log,
                        "error: stopped at global step 2 without a new checkpoint (see the error above): a requeued "
                        "job resumes from the previous one"),
               log);
    BOOST_TEST(complete_steps(dir.path) == steps{1}, log);
    BOOST_TEST(files_in(dir.path).size() == 2u,
               fmt::format("{}", fmt::join(files_in(dir.path), " ")));  // its manifest and shard
}
