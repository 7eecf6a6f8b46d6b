// What `pstrain plot` draws of a metrics file: a requeued run's time goes
// on across its segments, a click-through run shows AUC and log loss.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE plot
#include <boost/test/unit_test.hpp>

#include "trainer/app/plot.hpp"

#include <sstream>

using namespace pstrain::trainer;

namespace {

run_points points_of(const std::string& text)
{
    std::istringstream in(text);
    return read_points(in);
}

std::vector<double> seconds_of(const std::vector<plot_point>& p)
{
    std::vector<double> out;
    for (const auto& x : p) out.push_back(x.seconds);
    return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_run_is_one_segment_as_written)
{
    const auto r = points_of(R"({"event":"progress","global_step":100,"loss":0.9,"elapsed_seconds":1.5}
{"event":"progress","global_step":200,"loss":0.7,"elapsed_seconds":3.0}
{"event":"eval","global_step":200,"test_accuracy":0.81,"test_cross_entropy":0.5,"elapsed_seconds":3.2}
)");
    BOOST_TEST(r.segments == 1);
    BOOST_TEST(!r.auc);
    BOOST_REQUIRE(r.loss.size() == 2u);
    BOOST_TEST(r.loss[1].step == 200);
    BOOST_TEST(r.loss[1].seconds == 3.0);
    BOOST_TEST(r.loss[1].value == 0.7);
    BOOST_REQUIRE(r.metric.size() == 1u);
    BOOST_TEST(r.metric[0].value == 0.81);
    BOOST_TEST(r.test_loss.empty());
}

BOOST_AUTO_TEST_CASE(a_requeued_run_goes_on_in_time_instead_of_starting_at_zero)
{
    // Stopped by SIGTERM at step 300 after 30 s; requeued, it restores the
    // checkpoint at 300 and its clock starts at 0 again.
    const auto r = points_of(R"({"event":"progress","global_step":100,"loss":0.9,"elapsed_seconds":10}
{"event":"progress","global_step":200,"loss":0.7,"elapsed_seconds":20}
{"event":"checkpoint","global_step":300,"manifest":"ckpt-0000000300.json","elapsed_seconds":30}
{"event":"progress","global_step":400,"loss":0.6,"elapsed_seconds":8}
{"event":"progress","global_step":500,"loss":0.5,"elapsed_seconds":18}
{"event":"eval","global_step":500,"test_accuracy":0.85,"elapsed_seconds":19}
)");
    BOOST_TEST(r.segments == 2);
    BOOST_TEST(seconds_of(r.loss) == (std::vector<double>{10, 20, 38, 48}), boost::test_tools::per_element());
    BOOST_TEST(r.loss[1].segment == 0);
    BOOST_TEST(r.loss[2].segment == 1);
    BOOST_TEST(r.metric[0].seconds == 49.0);
}

BOOST_AUTO_TEST_CASE(a_segment_that_starts_later_but_from_an_older_step_is_a_new_one)
{
    // Killed without SIGTERM: its clock had reached only 5 s, the next
    // start logs at 12 s, but from the checkpoint's step 100.
    const auto r = points_of(R"({"event":"progress","global_step":100,"loss":0.9,"elapsed_seconds":2}
{"event":"progress","global_step":200,"loss":0.8,"elapsed_seconds":5}
{"event":"progress","global_step":150,"loss":0.85,"elapsed_seconds":12}
)");
    BOOST_TEST(r.segments == 2);
    BOOST_TEST(r.loss[2].segment == 1);
    BOOST_TEST(r.loss[2].seconds == 17.0);
}

BOOST_AUTO_TEST_CASE(a_click_through_run_plots_auc_and_test_log_loss)
{
    const auto r = points_of(R"({"event":"progress","global_step":100,"loss":0.52,"elapsed_seconds":3}
{"event":"eval","global_step":100,"test_auc":0.71,"test_logloss":0.49,"test_accuracy":0.77,"elapsed_seconds":4}
{"event":"eval","global_step":200,"test_auc":0.74,"test_logloss":0.47,"test_accuracy":0.78,"elapsed_seconds":7}
)");
    BOOST_TEST(r.auc);
    BOOST_REQUIRE(r.metric.size() == 2u);
    BOOST_TEST(r.metric[1].value == 0.74);  // the AUC, not the accuracy
    BOOST_REQUIRE(r.test_loss.size() == 2u);
    BOOST_TEST(r.test_loss[0].value == 0.49);
}

BOOST_AUTO_TEST_CASE(lines_that_are_not_events_are_skipped)
{
    const auto r =
        points_of("not json\n{\"event\":\"eval\",\"global_step\":1,\"test_accuracy\":null,\"test_mse\":0.1}\n[]\n");
    BOOST_TEST(r.loss.empty());
    BOOST_TEST(r.metric.empty());
}
