// The evaluations as the run reports them: their fields, the "eval" event,
// and the final line.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE evaluation
#include <boost/test/unit_test.hpp>

#include "trainer/app/evaluation.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace pstrain::trainer;

namespace {

struct temp_dir {
    temp_dir()
    {
        char tmpl[] = "/tmp/pstrain-test-evaluation-XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~temp_dir() { std::filesystem::remove_all(path); }
    std::string path;
};

train_options linear_options()
{
    train_options o;
    o.model = "linear";
    o.family = model_family::linear;
    o.device = pstrain::compute::device_kind::cpu;
    o.threads = 1;
    return o;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_regression_reports_its_mse_weight_and_bias_and_no_accuracy)
{
    const auto s = open_session(linear_options());
    pstrain::model::eval_result r;
    r.loss = 0.25;
    const std::vector<float> params{2.0f, 10.0f};
    const auto f = evaluation_fields(s, r, params);
    BOOST_TEST(f["test_accuracy"].is_null());
    BOOST_TEST(f["test_cross_entropy"].is_null());
    BOOST_TEST(f["test_mse"].get<double>() == 0.25);
    BOOST_TEST(f["weight"].get<double>() == 2.0);
    BOOST_TEST(f["bias"].get<double>() == 10.0);
}

BOOST_AUTO_TEST_CASE(an_evaluation_is_an_eval_event_at_its_step_in_the_metrics_file)
{
    temp_dir d;
    report_config c;
    c.train_steps = 100;
    c.metrics_file = d.path + "/metrics.jsonl";
    {
        reporter prog(c);
        const auto e = record_evaluation({{"test_accuracy", 0.5}}, 42, prog);
        BOOST_TEST(e["event"].get<std::string>() == "eval");
        BOOST_TEST(e["global_step"].get<long>() == 42);
        BOOST_TEST(e["test_accuracy"].get<double>() == 0.5);
    }
    std::ifstream metrics(c.metrics_file);
    std::string line;
    BOOST_TEST_REQUIRE(static_cast<bool>(std::getline(metrics, line)));
    const auto written = nlohmann::json::parse(line);
    BOOST_TEST(written["event"].get<std::string>() == "eval");
    BOOST_TEST(written["global_step"].get<long>() == 42);
    BOOST_TEST(written["test_accuracy"].get<double>() == 0.5);
}

BOOST_AUTO_TEST_CASE(the_final_line_counts_every_segment)
{
    // 30 s and 60000 examples before the requeue, 10 s and 20000 after: 2000 samples/s over 40 s.
    const auto done = done_line({{"test_accuracy", 0.8}}, 30.0 + 10.0, 60000 + 20000, 1, 2, "sync");
    BOOST_TEST(done["train_seconds"].get<double>() == 40.0);
    BOOST_TEST(done["samples_per_sec"].get<double>() == 2000.0);
    BOOST_TEST(done["event"].get<std::string>() == "done");
    BOOST_TEST(done["test_accuracy"].get<double>() == 0.8);  // the last evaluation's fields
    BOOST_TEST(done["ps"].get<int>() == 1);
    BOOST_TEST(done["workers"].get<int>() == 2);
    BOOST_TEST(done["mode"].get<std::string>() == "sync");
}

BOOST_AUTO_TEST_CASE(a_run_that_trained_no_time_reports_zero_samples_per_second)
{
    const auto done = done_line({}, 0.0, 500, 0, 1, "standalone");
    BOOST_TEST(done["samples_per_sec"].get<double>() == 0.0);
}
