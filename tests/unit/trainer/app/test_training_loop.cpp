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
#include <string>
#include <vector>

using namespace pstrain::testing;
using steps = std::vector<std::uint64_t>;

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
