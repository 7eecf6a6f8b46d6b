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
