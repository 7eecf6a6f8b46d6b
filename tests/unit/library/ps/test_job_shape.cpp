#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE job_shape
#include <boost/test/unit_test.hpp>

#include "library/ps/job_shape.hpp"

#include <string>

using namespace pstrain::ps;

namespace {

training_settings async_settings() { return {}; }

training_settings sync_settings()
{
    training_settings s;
    s.sync = true;
    return s;
}

// A job of 2 ps tasks and 2 workers, with a checkpoint directory.
job_shape two_by_two()
{
    job_shape j;
    j.num_ps = 2;
    j.num_workers = 2;
    j.checkpoints = true;
    return j;
}

void expect_refused(const training_settings& s, const job_shape& j, const std::string& flags,
                    const std::string& settings)
{
    const auto r = check_job(s, j);
    BOOST_REQUIRE(r);
    BOOST_TEST(r->flags == flags);
    BOOST_TEST(r->settings == settings);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_plain_job_and_its_command_line_alone_start)
{
    BOOST_TEST(!check_job(async_settings(), two_by_two()));
    BOOST_TEST(!check_job(sync_settings(), two_by_two()));
    BOOST_TEST(!check_job(async_settings(), job_shape{}));  // nothing known yet
    auto j = two_by_two();
    j.standalone = true;
    j.num_ps = 1;
    j.num_workers = 1;
    BOOST_TEST(!check_job(async_settings(), j));
}

BOOST_AUTO_TEST_CASE(a_staleness_bound_is_async_only)
{
    auto s = sync_settings();
    s.max_staleness = 2;
    expect_refused(s, two_by_two(),
                   "--max-staleness bounds async training and --sync-replicas trains in lock-step already: give one "
                   "of them",
                   "a staleness bound (2) is for async training, and this job is sync");
    s.max_staleness = 0;  // lock-step is a bound too
    BOOST_TEST(check_job(s, two_by_two()).has_value());
    s.max_staleness = unbounded_staleness;
    BOOST_TEST(!check_job(s, two_by_two()));
    auto a = async_settings();
    a.max_staleness = 0;
    BOOST_TEST(!check_job(a, two_by_two()));
}

BOOST_AUTO_TEST_CASE(room_for_more_workers_needs_elastic_and_no_standalone)
{
    job_shape j;
    j.max_workers = 8;
    expect_refused(async_settings(), j,
                   "--max-workers 8: room for workers that join later is for --elastic jobs: give --elastic to every "
                   "task too",
                   "room for workers that join later is for elastic jobs: set server_config::training.elastic");
    auto elastic = async_settings();
    elastic.elastic = true;
    BOOST_TEST(!check_job(elastic, j));
    j.standalone = true;
    expect_refused(elastic, j,
                   "--max-workers 8: --standalone has one worker and no room for others: leave one of them out",
                   "a standalone job has one worker and no room for others");
}

BOOST_AUTO_TEST_CASE(the_room_holds_at_least_the_workers_the_job_starts_with)
{
    auto elastic = async_settings();
    elastic.elastic = true;
    auto j = two_by_two();
    j.num_workers = 3;
    j.max_workers = 2;
    expect_refused(elastic, j, "--max-workers 2 is fewer than the job's 3 workers: give 3 or more, or leave it out",
                   "3 workers start with the job, and the transport has room for 2");
    j.max_workers = 3;
    BOOST_TEST(!check_job(elastic, j));
    j.max_workers = 5;
    BOOST_TEST(!check_job(elastic, j));
    BOOST_TEST(j.room() == 5);
}

BOOST_AUTO_TEST_CASE(a_step_aggregates_at_most_the_room_for_workers)
{
    auto s = sync_settings();
    s.replicas_to_aggregate = 5;
    expect_refused(s, two_by_two(), "--replicas-to-aggregate 5 is more than the 2 workers: use at most 2",
                   "sync training cannot aggregate 5 gradients per step from 2 workers");
    s.replicas_to_aggregate = 2;
    BOOST_TEST(!check_job(s, two_by_two()));
    // The room for workers that join later counts.
    s.elastic = true;
    s.replicas_to_aggregate = 4;
    auto j = two_by_two();
    j.max_workers = 4;
    BOOST_TEST(!check_job(s, j));
    // The command line alone does not know the workers.
    s.replicas_to_aggregate = 5;
    BOOST_TEST(!check_job(s, job_shape{}));
    // Async too: the flag is refused whatever the mode (the trainer's rule).
    auto a = async_settings();
    a.replicas_to_aggregate = 3;
    expect_refused(a, two_by_two(), "--replicas-to-aggregate 3 is more than the 2 workers: use at most 2",
                   "async training cannot aggregate 3 gradients per step from 2 workers");
}

BOOST_AUTO_TEST_CASE(spares_need_checkpoints_no_elastic_no_standalone_and_leave_a_ps)
{
    job_shape j;
    j.ps_spares = 1;
    expect_refused(async_settings(), j,
                   "--ps-spares 1: a spare restores a lost PS's shard from the newest checkpoint: give "
                   "--checkpoint-dir on a path every node shares",
                   "a spare PS restores a lost PS's shard from the newest checkpoint, and this job has no checkpoint "
                   "directory");
    j.checkpoints = true;
    BOOST_TEST(!check_job(async_settings(), j));
    auto elastic = async_settings();
    elastic.elastic = true;
    expect_refused(elastic, j,
                   "--ps-spares 1 with --elastic: a worker that joins later does not yet learn which spare stands in "
                   "for a lost PS: give one of them",
                   "spare PS tasks are not for elastic jobs: a worker that joins later does not yet learn which spare "
                   "stands in for a lost PS");
    j.standalone = true;
    expect_refused(async_settings(), j, "--ps-spares 1: --standalone has no ps task to lose: leave one of them out",
                   "a standalone job has no ps task to lose");
    // The counts: the spares are the last ps tasks, and one must be left to serve.
    auto k = two_by_two();
    k.ps_spares = 1;
    BOOST_TEST(!check_job(async_settings(), k));
    k.ps_spares = 2;
    expect_refused(async_settings(), k,
                   "--ps-spares 2 leaves no ps task to serve: this job has 2 ps tasks, and the spares are the last "
                   "ones: run 1 more ps task (sbatch --ps-spares adds them)",
                   "2 spare PS tasks leave none of the job's 2 to serve");
    k.num_ps = 1;
    k.ps_spares = 3;
    expect_refused(async_settings(), k,
                   "--ps-spares 3 leaves no ps task to serve: this job has 1 ps task, and the spares are the last "
                   "ones: run 3 more ps tasks (sbatch --ps-spares adds them)",
                   "3 spare PS tasks leave none of the job's 1 to serve");
}

BOOST_AUTO_TEST_CASE(pstrain_serve_has_no_spares_and_no_room)
{
    auto j = two_by_two();
    j.serving = true;
    BOOST_TEST(!check_job(async_settings(), j));
    j.ps_spares = 1;
    expect_refused(async_settings(), j,
                   "--ps-spares 1: spare ps tasks serve pstrain's own workers only in this version, not a program's "
                   "through pstrain serve: submit the job without spares",
                   "spare PS tasks serve pstrain's own workers only, not a program's");
    j.ps_spares = 0;
    j.max_workers = 4;
    expect_refused(async_settings(), j,
                   "--max-workers 4: workers join a running job through pstrain's own --join in this version, which "
                   "a program's workers do not have: leave it out",
                   "a program's workers do not join a running job: it has no room for more");
}

BOOST_AUTO_TEST_CASE(the_first_rule_broken_is_the_one_named)
{
    // As the command line's checks always did: the staleness bound before the room, the room before the spares.
    auto s = sync_settings();
    s.max_staleness = 1;
    job_shape j;
    j.max_workers = 4;
    j.ps_spares = 1;
    BOOST_TEST(check_job(s, j)->flags.rfind("--max-staleness", 0) == 0);
    s.max_staleness = unbounded_staleness;
    BOOST_TEST(check_job(s, j)->flags.rfind("--max-workers 4: room", 0) == 0);
    s.elastic = true;
    j.max_workers = 0;
    BOOST_TEST(check_job(s, j)->flags.rfind("--ps-spares 1: a spare restores", 0) == 0);
}
