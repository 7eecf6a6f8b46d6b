// pstrain-run's decisions: who ends the step, what a program's end means
// for it, the classic flags.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE run_core
#include <boost/test/unit_test.hpp>

#include "launcher/run_core.hpp"
#include "pstrain/error.hpp"

#include <csignal>

using namespace pstrain;
using namespace pstrain::run;

namespace {

task make(role r, int index, bool has_chief, const std::string& host = "n2")
{
    task t;
    t.id = {r, index};
    t.host = host;
    t.has_chief = has_chief;
    return t;
}

const exit_info ok{false, 0};
const exit_info failed{false, 3};
const exit_info killed{true, SIGKILL};

}  // namespace

BOOST_AUTO_TEST_CASE(the_chief_decides_else_worker_0)
{
    BOOST_TEST(make(role::chief, 0, true).decides());
    BOOST_TEST(!make(role::worker, 0, true).decides());
    BOOST_TEST(make(role::worker, 0, false).decides());
    BOOST_TEST(!make(role::worker, 1, false).decides());
    BOOST_TEST(!make(role::ps, 0, false).decides());
    BOOST_TEST(make(role::worker, 0, false, "n1").name() == "worker 0 (n1, the chief)");
    BOOST_TEST(make(role::worker, 0, true, "n1").name() == "worker 0 (n1)");
    BOOST_TEST(make(role::chief, 0, true, "n1").name() == "chief 0 (n1)");
}

BOOST_AUTO_TEST_CASE(the_deciders_end_is_the_steps_with_its_status)
{
    auto o = on_program_exit(make(role::chief, 0, true, "n1"), ok, worker_failures::automatic);
    BOOST_TEST(o.end_step);
    BOOST_TEST(o.exit_code == 0);
    BOOST_TEST(!o.is_error);
    BOOST_TEST(o.line == "chief 0 (n1) ended with exit status 0: ending the step's other tasks");
    o = on_program_exit(make(role::worker, 0, false), failed, worker_failures::automatic);
    BOOST_TEST(o.end_step);
    BOOST_TEST(o.exit_code == 3);
    BOOST_TEST(o.is_error);
    // Stopped by SIGTERM (preemption): 143, which tf-train.sh requeues on.
    o = on_program_exit(make(role::chief, 0, true), exit_info{true, SIGTERM}, worker_failures::automatic);
    BOOST_TEST(o.exit_code == 143);
}

BOOST_AUTO_TEST_CASE(a_dead_ps_ends_the_step_naming_it)
{
    const auto o = on_program_exit(make(role::ps, 1, true, "n3"), killed, worker_failures::automatic);
    BOOST_TEST(o.end_step);
    BOOST_TEST(o.exit_code == 137);
    BOOST_TEST(o.is_error);
    BOOST_TEST(o.line.rfind("ps 1 (n3) ended with signal 9 (Killed): the job cannot go on without its ps tasks", 0) ==
                   0u,
               o.line);
    // A ps serves until the step ends: one that exits 0 on its own leaves the chief waiting too.
    const auto early = on_program_exit(make(role::ps, 0, true, "n2"), ok, worker_failures::automatic);
    BOOST_TEST(early.end_step);
    BOOST_TEST(early.exit_code == 1);
    BOOST_TEST(early.line.find("before the chief (does the program join() its server?)") != std::string::npos,
               early.line);
}

BOOST_AUTO_TEST_CASE(a_ps_told_to_finish_leaves_the_end_to_the_chief_but_a_dead_one_still_ends_it)
{
    // pstrain serve exits 0 once the chief has shut it down (torch-train.sh's --ps-may-finish).
    auto o = on_program_exit(make(role::ps, 0, false, "n1"), ok, worker_failures::tolerate, ps_exit::may_finish);
    BOOST_TEST(!o.end_step);
    BOOST_TEST(o.exit_code == 0);
    BOOST_TEST(!o.is_error);
    BOOST_TEST(o.line ==
               "ps 0 (n1) ended with exit status 0: its server was shut down; the step ends when the chief does");
    o = on_program_exit(make(role::ps, 1, false, "n3"), killed, worker_failures::tolerate, ps_exit::may_finish);
    BOOST_TEST(o.end_step);
    BOOST_TEST(o.exit_code == 137);
    BOOST_TEST(o.line.rfind("ps 1 (n3) ended with signal 9 (Killed): the job cannot go on without its ps tasks", 0) ==
                   0u,
               o.line);
    BOOST_TEST(
        on_program_exit(make(role::ps, 0, false), failed, worker_failures::tolerate, ps_exit::may_finish).end_step);
}

BOOST_AUTO_TEST_CASE(a_dead_worker_is_tolerated_with_a_chief_and_fatal_without)
{
    auto o = on_program_exit(make(role::worker, 1, true), killed, worker_failures::automatic);
    BOOST_TEST(!o.end_step);
    BOOST_TEST(o.exit_code == 0);  // the step must not be ended for it
    BOOST_TEST(o.line.find("the job goes on without it") != std::string::npos);
    o = on_program_exit(make(role::worker, 1, false), killed, worker_failures::automatic);
    BOOST_TEST(o.end_step);
    BOOST_TEST(o.exit_code == 137);
    BOOST_TEST(o.line.find("--worker-failures tolerate") != std::string::npos);
    BOOST_TEST(!on_program_exit(make(role::worker, 1, false), killed, worker_failures::tolerate).end_step);
    BOOST_TEST(on_program_exit(make(role::worker, 1, true), killed, worker_failures::fail).end_step);
    // With a chief, a worker that exits with an error failed (its server could
    // not listen, its script is wrong): the coordinator would wait for it forever.
    o = on_program_exit(make(role::worker, 1, true, "n2"), failed, worker_failures::automatic);
    BOOST_TEST(o.end_step);
    BOOST_TEST(o.exit_code == 3);
    BOOST_TEST(o.line.find("worker 1 (n2) ended with exit status 3: the coordinator would wait for it forever") == 0u,
               o.line);
    // A between-graph worker that finished: nothing happens.
    o = on_program_exit(make(role::worker, 1, false), ok, worker_failures::automatic);
    BOOST_TEST(!o.end_step);
    BOOST_TEST(o.line.empty());
    // The evaluator is a side-car.
    BOOST_TEST(!on_program_exit(make(role::evaluator, 0, true), failed, worker_failures::fail).end_step);
}

BOOST_AUTO_TEST_CASE(tolerate_killed_goes_on_without_a_killed_worker_but_not_one_that_failed)
{
    auto o = on_program_exit(make(role::worker, 1, false, "n2"), killed, worker_failures::tolerate_killed);
    BOOST_TEST(!o.end_step);
    BOOST_TEST(o.exit_code == 0);
    BOOST_TEST(o.line ==
               "worker 1 (n2) ended with signal 9 (Killed); the job goes on without it (pstrain's servers go on with "
               "the workers left)");
    // An error (a bad input, a bug) would come back on any worker: the step ends with its status.
    o = on_program_exit(make(role::worker, 1, false, "n2"), failed, worker_failures::tolerate_killed);
    BOOST_TEST(o.end_step);
    BOOST_TEST(o.exit_code == 3);
    BOOST_TEST(o.is_error);
    BOOST_TEST(o.line ==
               "worker 1 (n2) ended with exit status 3: a worker that fails (rather than being killed) would fail "
               "again: see its error above: ending the step");
    // The chief still decides, however it ended.
    BOOST_TEST(on_program_exit(make(role::worker, 0, false), killed, worker_failures::tolerate_killed).end_step);
}

BOOST_AUTO_TEST_CASE(stopped_because_the_step_ends_exits_0)
{
    const auto o = on_step_ending(make(role::ps, 0, true), exit_info{true, SIGTERM});
    BOOST_TEST(!o.end_step);
    BOOST_TEST(o.exit_code == 0);
}

BOOST_AUTO_TEST_CASE(a_signalled_step_ends_nothing_more_and_keeps_the_status)
{
    // Preemption: every task got SIGTERM; a ps that dies of it is no failure of its own.
    auto o = on_step_signalled(make(role::ps, 0, true, "n1"), exit_info{true, SIGTERM}, SIGTERM);
    BOOST_TEST(!o.end_step);
    BOOST_TEST(!o.is_error);
    BOOST_TEST(o.exit_code == 0);  // srun --kill-on-bad-exit must not cut the chief short
    BOOST_TEST(on_step_signalled(make(role::chief, 0, true), exit_info{true, SIGTERM}, SIGTERM).exit_code == 143);
    BOOST_TEST(o.line == "ps 0 (n1) ended with signal 15 (Terminated) after the step was sent signal 15 (Terminated)");
    o = on_step_signalled(make(role::chief, 0, true), exit_info{false, 0}, SIGTERM);  // it saved and exited
    BOOST_TEST(o.exit_code == 0);
}

BOOST_AUTO_TEST_CASE(classic_flags_name_every_host_and_this_task)
{
    cluster_spec spec{{}, {}, {"n1:5000", "n2:5000"}, {"n2:5001", "n3:5000"}};
    BOOST_TEST(classic_flags(spec, {role::worker, 1}) ==
               (std::vector<std::string>{"--ps_hosts=n1:5000,n2:5000", "--worker_hosts=n2:5001,n3:5000",
                                         "--job_name=worker", "--task_index=1"}));
    spec.chief = {"n1:5001"};
    BOOST_TEST(classic_flags(spec, {role::ps, 0}).at(2) == "--chief_hosts=n1:5001");
    BOOST_TEST((parse_worker_failures("tolerate") == worker_failures::tolerate));
    BOOST_TEST((parse_worker_failures("tolerate-killed") == worker_failures::tolerate_killed));
    BOOST_CHECK_THROW(parse_worker_failures("sometimes"), error);
}
