// Who reports a start-up error of a job (bootstrap::judge_start): once per
// job, by the chief when it has it, by each task only when the tasks
// disagree; every other task stops with one line naming the reporter.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE bootstrap_job
#include <boost/test/unit_test.hpp>

#include "library/bootstrap/job.hpp"

#include <string>
#include <vector>

using pstrain::bootstrap::judge_start;
using action = pstrain::bootstrap::start_verdict::action;

namespace {
// Ranks as the plugin orders them: ps 0, then worker 0 (the chief), worker 1.
const std::vector<std::string> names{"ps 0 (n1)", "worker 0 (n1, the chief)", "worker 1 (n2)"};
constexpr std::size_t chief = 1;
}  // namespace

BOOST_AUTO_TEST_CASE(no_error_anywhere_goes_on)
{
    for (std::size_t me = 0; me < 3; ++me) BOOST_TEST((judge_start({"", "", ""}, names, me, chief).what == action::go));
}

BOOST_AUTO_TEST_CASE(the_chief_reports_an_error_every_worker_shares)
{
    const std::vector<std::string> errors{"", "--data-dir /x: no such directory", "--data-dir /x: no such directory"};
    BOOST_TEST((judge_start(errors, names, chief, chief).what == action::report));
    const auto ps = judge_start(errors, names, 0, chief);
    BOOST_TEST((ps.what == action::stop));
    BOOST_TEST(ps.line == "stopped: worker 0 (n1, the chief) reported an error at start-up");
    const auto worker = judge_start(errors, names, 2, chief);
    BOOST_TEST((worker.what == action::stop));
    BOOST_TEST(worker.line == "stopped: worker 0 (n1, the chief) reported the same error at start-up");
}

BOOST_AUTO_TEST_CASE(a_task_that_disagrees_reports_its_own)
{
    const std::vector<std::string> errors{"", "the chief's refusal", "worker 1's own problem"};
    BOOST_TEST((judge_start(errors, names, chief, chief).what == action::report));
    BOOST_TEST((judge_start(errors, names, 2, chief).what == action::report));
    BOOST_TEST(judge_start(errors, names, 0, chief).line ==
               "stopped: worker 0 (n1, the chief) reported an error at start-up");
}

BOOST_AUTO_TEST_CASE(without_the_chief_the_first_task_with_it_reports)
{
    const std::vector<std::string> errors{"--replicas-to-aggregate 3 is more than the 2 workers", "", ""};
    BOOST_TEST((judge_start(errors, names, 0, chief).what == action::report));
    const auto w = judge_start(errors, names, chief, chief);
    BOOST_TEST((w.what == action::stop));
    BOOST_TEST(w.line == "stopped: ps 0 (n1) reported an error at start-up");
    const std::vector<std::string> both{"same", "", "same"};
    BOOST_TEST((judge_start(both, names, 0, chief).what == action::report));
    BOOST_TEST(judge_start(both, names, 2, chief).line == "stopped: ps 0 (n1) reported the same error at start-up");
}
