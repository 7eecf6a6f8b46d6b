#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE cluster_spec
#include <boost/test/unit_test.hpp>

#include "common/cluster_spec.hpp"
#include "pstrain/error.hpp"

#include <nlohmann/json.hpp>

using namespace pstrain;

namespace {
std::string message_of(const std::string& text)
{
    try {
        parse_tf_config(text);
    } catch (const error& e) {
        return e.what();
    }
    return "";
}
}  // namespace

BOOST_AUTO_TEST_CASE(json_round_trip)
{
    cluster_spec spec{{}, {}, {"n1:30000"}, {"n2:30000", "n3:30001"}};
    auto text = to_json(spec);
    BOOST_TEST(text == R"({"ps":["n1:30000"],"worker":["n2:30000","n3:30001"]})");
    auto back = parse_cluster_spec(text);
    BOOST_TEST(back.ps == spec.ps);
    BOOST_TEST(back.worker == spec.worker);
}

BOOST_AUTO_TEST_CASE(tf_config_has_tensorflow_shape)
{
    cluster_spec spec{{}, {}, {"n1:1"}, {"n2:2", "n3:3"}};
    auto j = nlohmann::json::parse(tf_config_json(spec, {role::worker, 1}));
    // Exactly what TFConfigClusterResolver reads, nothing else.
    BOOST_TEST(j == nlohmann::json::parse(R"({"cluster":{"ps":["n1:1"],"worker":["n2:2","n3:3"]},
        "task":{"type":"worker","index":1},"rpc_layer":"grpc","environment":"cloud"})"));
    auto parsed = parse_tf_config(j.dump());
    BOOST_TEST((parsed.task == task_id{role::worker, 1}));
}

BOOST_AUTO_TEST_CASE(a_chief_is_in_the_cluster_and_the_evaluator_outside_it)
{
    cluster_spec spec{{"n1:5"}, {"n1:6"}, {"n2:5", "n3:5"}, {"n2:6", "n3:6"}};
    // PSTRAIN_CLUSTER: every task of the step, jobs in rank order.
    BOOST_TEST(to_json(spec) ==
               R"({"chief":["n1:5"],"evaluator":["n1:6"],"ps":["n2:5","n3:5"],"worker":["n2:6","n3:6"]})");
    auto back = parse_cluster_spec(to_json(spec));
    BOOST_TEST(back.chief == spec.chief);
    BOOST_TEST(back.evaluator == spec.evaluator);
    // TF_CONFIG: ParameterServerStrategy refuses an evaluator in the cluster.
    for (auto task :
         {task_id{role::chief, 0}, task_id{role::ps, 1}, task_id{role::worker, 0}, task_id{role::evaluator, 0}}) {
        auto j = nlohmann::json::parse(tf_config_json(spec, task));
        BOOST_TEST(j["cluster"] ==
                   nlohmann::json::parse(R"({"chief":["n1:5"],"ps":["n2:5","n3:5"],"worker":["n2:6","n3:6"]})"));
        BOOST_TEST(j["task"]["type"] == std::string(role_name(task.role)));
        BOOST_TEST(j["task"]["index"] == task.index);
        BOOST_TEST((parse_tf_config(j.dump()).task == task));
    }
}

BOOST_AUTO_TEST_CASE(bad_specs_name_the_problem)
{
    BOOST_TEST(message_of("not json").find("not a JSON object") != std::string::npos);
    BOOST_TEST(message_of(R"({"task":{"type":"ps","index":0}})").find("no \"cluster\"") != std::string::npos);
    BOOST_TEST(message_of(R"({"cluster":{"ps":["a:1"],"worker":["b:2"]},"task":{"type":"ps","index":3}})")
                   .find("index 3 is outside") != std::string::npos);
    BOOST_TEST(message_of(R"({"cluster":{"ps":["a:99999"],"worker":["b:2"]},"task":{"type":"ps","index":0}})")
                   .find("no valid port") != std::string::npos);
    BOOST_TEST(
        message_of(R"({"cluster":{"ps":[],"worker":["b:2"]},"task":{"type":"ps","index":0}})").find("non-empty list") !=
        std::string::npos);
    BOOST_TEST(message_of(R"({"cluster":{"ps":["a:1"],"worker":["b:2"]},"task":{"type":"chief","index":0}})")
                   .find("index 0 is outside the chief list (0 entries)") != std::string::npos);
    BOOST_TEST(
        message_of(
            R"({"cluster":{"chief":["a:1","c:1"],"ps":["a:1"],"worker":["b:2"]},"task":{"type":"ps","index":0}})")
            .find("\"chief\" lists 2 tasks: a job has at most 1") != std::string::npos);
    BOOST_TEST(message_of(R"({"cluster":{"ps":["a:1"],"worker":["b:2"]},"task":{"type":"master","index":0}})")
                   .find("'master' is not chief, evaluator, ps or worker") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(host_port_split)
{
    BOOST_TEST(split_host_port("n10:30001").first == "n10");
    BOOST_TEST(split_host_port("n10:30001").second == 30001);
    BOOST_CHECK_THROW(split_host_port("n10"), error);
    BOOST_CHECK_THROW(split_host_port(":5"), error);
}
