// Drives the SPANK plugin's core through a fake SPANK host: every context,
// every bad input, the task layouts and the GPU binding.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE pstrain_core
#include <boost/test/unit_test.hpp>

#include "config.h"
#include "pstrain/error.hpp"
#include "plugin/pstrain_core.hpp"
#include "tests/unit/allocation_probe.hpp"

#include <map>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

using namespace pstrain;
using namespace pstrain::plugin;
using nlohmann::json;

namespace {

class fake_host final : public spank_host {
public:
    explicit fake_host(context c) : ctx(c) {}
    context where() const override { return ctx; }
    std::optional<std::string> getenv(const std::string& name) const override
    {
        auto it = env.find(name);
        return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
    }
    bool setenv(const std::string& name, const std::string& value) override
    {
        env[name] = value;
        ++sets;
        return true;
    }
    std::optional<std::uint32_t> get(item what) const override
    {
        auto it = items.find(what);
        return it == items.end() ? std::nullopt : std::optional<std::uint32_t>(it->second);
    }
    void error(const std::string& line) override { errors.push_back(line); }
    void verbose(const std::string&) override {}
    void info(const std::string& line) override { infos.push_back(line); }
    std::optional<std::string> ephemeral_ports() const override { return ephemeral; }

    context ctx;
    std::optional<std::string> ephemeral;
    std::map<std::string, std::string> env;
    std::map<item, std::uint32_t> items;
    std::vector<std::string> errors;
    std::vector<std::string> infos;
    int sets = 0;
};

// A step of a real layout: the environment slurmstepd gives task `rank`.
fake_host remote_task(int rank, int total, const std::string& nodes, const std::string& per_node,
                      const std::string& dist = "", std::uint32_t job = 42, std::uint32_t step = 0)
{
    fake_host h(context::remote);
    h.items = {{item::job_id, job},
               {item::step_id, step},
               {item::total_tasks, static_cast<std::uint32_t>(total)},
               {item::task_global_id, static_cast<std::uint32_t>(rank)}};
    h.env = {{"SLURM_STEP_NODELIST", nodes}, {"SLURM_STEP_TASKS_PER_NODE", per_node}};
    if (!dist.empty()) h.env["SLURM_DISTRIBUTION"] = dist;
    return h;
}

// Runs the remote callbacks for one task; returns task_init's status.
int run_remote(fake_host& h, const char* ps, const char* workers, std::vector<std::string> args = {})
{
    spank_plugin p;
    BOOST_REQUIRE_EQUAL(p.init(args, h), 0);
    if (ps) p.set_option(option::ps, ps);
    if (workers) p.set_option(option::workers, workers);
    BOOST_REQUIRE_EQUAL(p.init_post_opt(h), 0);  // never fails on a compute node
    return p.task_init(h);
}

std::string submit_error(context where, const char* ps, const char* workers, std::vector<std::string> args = {},
                         std::optional<std::uint32_t> tasks = std::nullopt)
{
    fake_host h(where);
    if (tasks) h.items[item::total_tasks] = *tasks;
    spank_plugin p;
    if (p.init(args, h) != 0) return h.errors.at(0);
    if (ps) p.set_option(option::ps, ps);
    if (workers) p.set_option(option::workers, workers);
    if (p.init_post_opt(h) != 0) return h.errors.at(0);
    if (where == context::local && p.local_user_init(h) != 0) return h.errors.at(0);
    BOOST_TEST(h.errors.empty());
    return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_SUITE(errors)

BOOST_AUTO_TEST_CASE(zero_negative_text_empty)
{
    for (auto where : {context::local, context::allocator}) {
        BOOST_TEST(submit_error(where, "0", "2") == "pstrain: --ps=0 is not a valid number of parameter-server tasks: "
                                                    "give a whole number from 1 to 4096, e.g. --ps=1");
        BOOST_TEST(contains(submit_error(where, "-1", "2"), "--ps=-1 is not a valid number"));
        BOOST_TEST(contains(submit_error(where, "abc", "2"), "--ps=abc is not a valid number"));
        BOOST_TEST(contains(submit_error(where, "1", "two"), "--workers=two is not a valid number of worker tasks"));
        BOOST_TEST(submit_error(where, "", "2") ==
                   "pstrain: --ps= is empty: give the number of parameter-server tasks, e.g. --ps=1");
    }
}

// --ps=0 --workers=0: a step of a --ps/--workers batch job that is not its
// training step (pstrain --join, a shell), whose srun would otherwise
// inherit the job's options: no roles, no task count to match.
BOOST_AUTO_TEST_CASE(ps_0_workers_0_is_a_step_without_roles)
{
    for (auto where : {context::local, context::allocator}) BOOST_TEST(submit_error(where, "0", "0", {}, 1u) == "");
    auto h = remote_task(0, 1, "n1", "1");
    BOOST_TEST(run_remote(h, "0", "0") == 0);
    BOOST_TEST(!h.env.count("PSTRAIN_ROLE"), "a step without roles gets none");
    BOOST_TEST(!h.env.count("TF_CONFIG"));
    fake_host a(context::allocator);
    spank_plugin p;
    BOOST_REQUIRE_EQUAL(p.init({}, a), 0);
    p.set_option(option::ps, "0");
    p.set_option(option::workers, "0");
    p.set_option(option::ps_spares, "1");
    BOOST_TEST(p.init_post_opt(a) == -1);
    BOOST_TEST(a.errors.at(0) == "pstrain: --ps=0 --workers=0 makes a step without pstrain's roles: leave out "
                                 "--ps-spares, --chief and --evaluator");
}

BOOST_AUTO_TEST_CASE(one_without_the_other)
{
    BOOST_TEST(submit_error(context::local, "1", nullptr) ==
               "pstrain: --ps=1 was given without --workers: give both, e.g. --ps=1 --workers=2");
    BOOST_TEST(submit_error(context::allocator, nullptr, "2") ==
               "pstrain: --workers=2 was given without --ps: give both, e.g. --ps=1 --workers=2");
}

BOOST_AUTO_TEST_CASE(values_over_the_bound)
{
    BOOST_TEST(contains(submit_error(context::local, "5000", "2"), "--ps=5000 is too large: at most 4096"));
    BOOST_TEST(contains(submit_error(context::local, "99999999999999999999", "2"), "is too large"));
    BOOST_TEST(contains(submit_error(context::local, "3000", "3000"), "makes 6000 tasks, more than 4096"));
    BOOST_TEST(contains(submit_error(context::local, "9", "2", {"max_tasks=8"}), "--ps=9 is too large: at most 8"));
}

BOOST_AUTO_TEST_CASE(chief_or_evaluator_alone_and_their_task_count)
{
    fake_host h(context::allocator);
    spank_plugin p;
    BOOST_REQUIRE_EQUAL(p.init({}, h), 0);
    p.set_option(option::chief, nullptr);
    BOOST_TEST(p.init_post_opt(h) == -1);
    BOOST_TEST(h.errors.at(0) ==
               "pstrain: --chief was given without --ps and --workers: give them too, e.g. --ps=2 --workers=2 --chief");
    fake_host l(context::local);
    l.items[item::total_tasks] = 4;
    spank_plugin q;
    BOOST_REQUIRE_EQUAL(q.init({}, l), 0);
    q.set_option(option::ps, "2");
    q.set_option(option::workers, "2");
    q.set_option(option::chief, nullptr);
    q.set_option(option::evaluator, nullptr);
    BOOST_REQUIRE_EQUAL(q.init_post_opt(l), 0);
    BOOST_TEST(q.local_user_init(l) == -1);
    BOOST_TEST(
        l.errors.at(0) ==
        "pstrain: --ps=2 --workers=2 --chief --evaluator needs 6 tasks, the step has 4: use -n 6 (or leave -n out)");
}

BOOST_AUTO_TEST_CASE(task_count_must_match)
{
    BOOST_TEST(submit_error(context::local, "1", "2", {}, 4u) ==
               "pstrain: --ps=1 --workers=2 needs 3 tasks, the step has 4: use -n 3 (or leave -n out)");
    BOOST_TEST(submit_error(context::local, "1", "2", {}, 3u) == "");
}

BOOST_AUTO_TEST_CASE(unknown_plugstack_argument)
{
    BOOST_TEST(contains(submit_error(context::local, nullptr, nullptr, {"colour=blue"}),
                        "unknown plugstack.conf argument 'colour' for spank_pstrain.so: known keys are"));
    BOOST_TEST(
        contains(submit_error(context::local, "1", "1", {"gpu_bind=all"}), "gpu_bind=all: use split, share or none"));
    BOOST_TEST(contains(submit_error(context::local, "1", "1", {"tf_config"}), "is not key=value"));
    BOOST_TEST(contains(submit_error(context::local, "1", "1", {"port_range=9-5"}), "port_range"));
}

// Found by tests/fuzz/fuzz_plugin_options: a node name with a byte that is
// not UTF-8 made the cluster spec's JSON dump() throw nlohmann's own
// exception out of task_init; the task now fails with one pstrain line.
BOOST_AUTO_TEST_CASE(a_node_name_that_is_not_ascii_fails_the_task_with_one_line)
{
    auto h = remote_task(0, 3, "n[1-2]\xff", "2,1");
    int rc = 0;
    BOOST_CHECK_NO_THROW(rc = run_remote(h, "1", "2"));
    BOOST_TEST(rc == -1);
    BOOST_TEST_REQUIRE(h.errors.size() == 1u);
    BOOST_TEST(contains(h.errors[0], "host names are printable ASCII"), h.errors[0]);
}

BOOST_AUTO_TEST_CASE(remote_errors_fail_the_task_not_the_node)
{
    auto h = remote_task(0, 3, "n1", "3");
    BOOST_TEST(run_remote(h, "1", nullptr) == -1);  // init_post_opt returned 0
    BOOST_TEST(contains(h.errors.at(0), "--ps=1 was given without --workers"));

    auto g = remote_task(0, 3, "n1", "3");
    BOOST_TEST(run_remote(g, "1", "2", {"bogus=1"}) == -1);
    BOOST_TEST(contains(g.errors.at(0), "unknown plugstack.conf argument 'bogus'"));

    auto f = remote_task(0, 4, "n1", "4");
    BOOST_TEST(run_remote(f, "1", "2") == -1);
    BOOST_TEST(contains(f.errors.at(0), "needs 3 tasks, the step has 4"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(contexts)

BOOST_AUTO_TEST_CASE(inert_without_options)
{
    for (auto where : {context::local, context::allocator, context::remote}) {
        auto h = where == context::remote ? remote_task(0, 1, "n1", "1") : fake_host(where);
        h.items[item::total_tasks] = 7;
        spank_plugin p;
        BOOST_TEST(p.init({}, h) == 0);
        BOOST_TEST(p.init_post_opt(h) == 0);
        BOOST_TEST(p.local_user_init(h) == 0);
        BOOST_TEST(p.task_init(h) == 0);
        BOOST_TEST(h.sets == 0);
        BOOST_TEST(h.errors.empty());
    }
}

BOOST_AUTO_TEST_CASE(submit_side_exports_the_sizes)
{
    fake_host h(context::allocator);
    spank_plugin p;
    p.init({}, h);
    p.set_option(option::ps, "2");
    p.set_option(option::workers, "3");
    BOOST_TEST(p.init_post_opt(h) == 0);
    BOOST_TEST(h.env["PSTRAIN_NUM_PS"] == "2");
    BOOST_TEST(h.env["PSTRAIN_NUM_WORKERS"] == "3");
}

BOOST_AUTO_TEST_CASE(a_submission_is_named_by_its_utc_time_and_random_hex)
{
    BOOST_TEST(submission_id(1795548600, 0xa1b2c3d4u) == "20261124T193000-a1b2c3d4");
    BOOST_TEST(submission_id(0, 0x1fu) == "19700101T000000-0000001f");
    // two draws from the kernel's source differ (a 1 in 2^32 chance of a false failure, three times over)
    BOOST_TEST((random_bits() != random_bits() || random_bits() != random_bits() || random_bits() != random_bits()));
}

BOOST_AUTO_TEST_CASE(sbatch_and_srun_make_a_submission_id_once)
{
    for (auto where : {context::allocator, context::local}) {
        fake_host h(where);
        spank_plugin p;
        p.init({}, h);
        p.set_option(option::ps, "1");
        p.set_option(option::workers, "2");
        BOOST_TEST(p.init_post_opt(h) == 0);
        BOOST_TEST(std::regex_match(h.env["PSTRAIN_SUBMISSION"], std::regex(R"(20\d{6}T\d{6}-[0-9a-f]{8})")),
                   h.env["PSTRAIN_SUBMISSION"]);
        // Another submission gets another id.
        fake_host other(where);
        spank_plugin q;
        q.init({}, other);
        q.set_option(option::ps, "1");
        q.set_option(option::workers, "2");
        q.init_post_opt(other);
        BOOST_TEST(other.env["PSTRAIN_SUBMISSION"] != h.env["PSTRAIN_SUBMISSION"]);
    }
    // An srun inside the job (its environment has the job's id) keeps it.
    fake_host inner(context::local);
    inner.env["PSTRAIN_SUBMISSION"] = "20261124T193000-a1b2c3d4";
    spank_plugin p;
    p.init({}, inner);
    p.set_option(option::ps, "1");
    p.set_option(option::workers, "2");
    BOOST_TEST(p.init_post_opt(inner) == 0);
    BOOST_TEST(inner.env["PSTRAIN_SUBMISSION"] == "20261124T193000-a1b2c3d4");
}

BOOST_AUTO_TEST_CASE(compute_nodes_never_make_a_submission_id)
{
    // The batch step and the tasks have the job's, from its stored
    // environment: one made there would differ after a requeue.
    auto batch = remote_task(0, 1, "n1", "1", "", 42, batch_step_id);
    BOOST_TEST(run_remote(batch, "1", "2") == 0);
    BOOST_TEST(batch.env.count("PSTRAIN_SUBMISSION") == 0u);
    auto task = remote_task(0, 3, "n1", "3");
    BOOST_TEST(run_remote(task, "1", "2") == 0);
    BOOST_TEST(task.env.count("PSTRAIN_SUBMISSION") == 0u);
}

BOOST_AUTO_TEST_CASE(batch_step_gets_only_the_sizes)
{
    auto h = remote_task(0, 1, "n1", "1", "", 42, batch_step_id);
    BOOST_TEST(run_remote(h, "1", "2") == 0);
    BOOST_TEST(h.env["PSTRAIN_NUM_PS"] == "1");
    BOOST_TEST(h.env["PSTRAIN_NUM_WORKERS"] == "2");
    BOOST_TEST(h.env.count("PSTRAIN_ROLE") == 0u);
    BOOST_TEST(h.env.count("TF_CONFIG") == 0u);
}

// What slurmd's log says once per job, and what every task learns.
const std::string job_42_version_line =
    "pstrain: spank_pstrain.so of pstrain " PACKAGE_VERSION " (built against Slurm " PSTRAIN_BUILT_WITH_SLURM
    "), job 42: --ps=1 --workers=2";

BOOST_AUTO_TEST_CASE(the_batch_step_logs_the_plugins_version_once_and_tells_the_script)
{
    auto h = remote_task(0, 1, "n1", "1", "", 42, batch_step_id);
    BOOST_TEST(run_remote(h, "1", "2") == 0);
    BOOST_TEST(h.infos == std::vector<std::string>{job_42_version_line}, boost::test_tools::per_element());
    BOOST_TEST(h.env["PSTRAIN_PLUGIN_VERSION"] == PACKAGE_VERSION);
}

BOOST_AUTO_TEST_CASE(the_steps_of_a_batch_job_tell_every_task_the_version_and_log_nothing_more)
{
    for (int rank = 0; rank < 3; ++rank) {
        auto h = remote_task(rank, 3, "n[1-3]", "1(x3)");
        h.env["ENVIRONMENT"] = "BATCH";
        BOOST_TEST(run_remote(h, "1", "2") == 0);
        BOOST_TEST(h.infos.empty());
        BOOST_TEST(h.env["PSTRAIN_PLUGIN_VERSION"] == PACKAGE_VERSION);
    }
}

BOOST_AUTO_TEST_CASE(a_job_srun_made_logs_the_version_from_the_first_task_of_its_first_step)
{
    std::vector<std::string> logged;
    for (std::uint32_t step : {0u, 1u}) {
        for (int rank = 0; rank < 3; ++rank) {
            auto h = remote_task(rank, 3, "n[1-3]", "1(x3)", "", 42, step);
            BOOST_TEST(run_remote(h, "1", "2") == 0);
            logged.insert(logged.end(), h.infos.begin(), h.infos.end());
        }
    }
    BOOST_TEST(logged == std::vector<std::string>{job_42_version_line}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_job_without_the_options_hears_nothing_of_the_version)
{
    auto h = remote_task(0, 1, "n1", "1", "", 42, batch_step_id);
    BOOST_TEST(run_remote(h, nullptr, nullptr) == 0);
    BOOST_TEST(h.infos.empty());
    BOOST_TEST(h.env.count("PSTRAIN_PLUGIN_VERSION") == 0u);
}

BOOST_AUTO_TEST_CASE(tf_config_can_be_turned_off)
{
    auto h = remote_task(1, 2, "n1", "2");
    BOOST_TEST(run_remote(h, "1", "1", {"tf_config=no"}) == 0);
    BOOST_TEST(h.env.count("TF_CONFIG") == 0u);
    BOOST_TEST(h.env["PSTRAIN_ROLE"] == "worker");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(layouts)

// Hosts of the cluster spec, in ps then worker order.
std::vector<std::string> hosts_of(const fake_host& h)
{
    auto spec = json::parse(h.env.at("PSTRAIN_CLUSTER"));
    std::vector<std::string> hosts;
    for (auto* key : {"ps", "worker"})
        for (auto& a : spec[key]) {
            auto s = a.get<std::string>();
            hosts.push_back(s.substr(0, s.find(':')));
        }
    return hosts;
}

BOOST_AUTO_TEST_CASE(block_one_per_node)
{
    for (int rank = 0; rank < 3; ++rank) {
        auto h = remote_task(rank, 3, "n[1-3]", "1(x3)");
        BOOST_REQUIRE(run_remote(h, "1", "2") == 0);
        BOOST_TEST(hosts_of(h) == (std::vector<std::string>{"n1", "n2", "n3"}));
        BOOST_TEST(h.env["PSTRAIN_ROLE"] == (rank == 0 ? "ps" : "worker"));
        BOOST_TEST(h.env["PSTRAIN_TASK_INDEX"] == std::to_string(rank == 0 ? 0 : rank - 1));
        auto tf = json::parse(h.env["TF_CONFIG"]);
        BOOST_TEST(tf["task"]["type"] == h.env["PSTRAIN_ROLE"]);
        BOOST_TEST(tf["cluster"] == json::parse(h.env["PSTRAIN_CLUSTER"]));
    }
}

BOOST_AUTO_TEST_CASE(cyclic_two_ps_four_workers)
{
    auto h = remote_task(4, 6, "n[1-3]", "2(x3)", "cyclic");
    BOOST_REQUIRE(run_remote(h, "2", "4") == 0);
    BOOST_TEST(hosts_of(h) == (std::vector<std::string>{"n1", "n2", "n3", "n1", "n2", "n3"}));
    BOOST_TEST(h.env["PSTRAIN_ROLE"] == "worker");
    BOOST_TEST(h.env["PSTRAIN_TASK_INDEX"] == "2");
}

BOOST_AUTO_TEST_CASE(uneven_tasks_per_node)
{
    auto h = remote_task(0, 5, "n[1-2]", "3,2");
    BOOST_REQUIRE(run_remote(h, "1", "4") == 0);
    BOOST_TEST(hosts_of(h) == (std::vector<std::string>{"n1", "n1", "n1", "n2", "n2"}));
    auto spec = json::parse(h.env["PSTRAIN_CLUSTER"]);
    // Tasks sharing a node get different ports.
    BOOST_TEST(spec["ps"][0] != spec["worker"][0]);
    BOOST_TEST(spec["worker"][0] != spec["worker"][1]);
}

BOOST_AUTO_TEST_CASE(numeric_node_order_n9_n10)
{
    auto h = remote_task(0, 3, "n[9-11]", "1(x3)");
    BOOST_REQUIRE(run_remote(h, "1", "2") == 0);
    BOOST_TEST(hosts_of(h) == (std::vector<std::string>{"n9", "n10", "n11"}));
}

// The task counts Slurm's environment gives decide the size of the layout:
// counts that add up to more than the step's tasks (here 2^20 nodes of 2^20
// tasks, 2^40 in all) fail the task with one line before a layout of that
// size is made.
BOOST_AUTO_TEST_CASE(task_counts_that_do_not_add_up_fail_the_task_before_allocating)
{
    auto h = remote_task(0, 3, "n[1-1048576]", "1048576(x1048576)");
    pstrain::testing::allocation_probe probe;
    BOOST_TEST(run_remote(h, "1", "2") != 0);
    BOOST_TEST_REQUIRE(h.errors.size() == 1u);
    BOOST_TEST(h.errors[0] ==
               "pstrain: SLURM_STEP_TASKS_PER_NODE=1048576(x1048576) counts 1099511627776 tasks but the step has 3");
    BOOST_TEST(probe.largest() < std::size_t(64) << 20);  // the counts, not a layout of 2^40 tasks

    auto few = remote_task(0, 3, "n[1-3]", "1,1");
    BOOST_TEST(run_remote(few, "1", "2") != 0);
    BOOST_TEST(few.errors.at(0) == "pstrain: SLURM_STEP_TASKS_PER_NODE=1,1 counts 2 tasks but the step has 3");
}

BOOST_AUTO_TEST_CASE(spread_placement_puts_ps_on_different_nodes)
{
    auto h = remote_task(0, 6, "n[1-3]", "2(x3)");  // block: n1 n1 n2 n2 n3 n3
    BOOST_REQUIRE(run_remote(h, "3", "3", {"ps_placement=spread"}) == 0);
    BOOST_TEST(hosts_of(h) == (std::vector<std::string>{"n1", "n2", "n3", "n1", "n2", "n3"}));
}

int run_remote_tf(fake_host& h, const char* ps, const char* workers, bool chief, bool evaluator)
{
    spank_plugin p;
    BOOST_REQUIRE_EQUAL(p.init({}, h), 0);
    p.set_option(option::ps, ps);
    p.set_option(option::workers, workers);
    if (chief) p.set_option(option::chief, nullptr);
    if (evaluator) p.set_option(option::evaluator, nullptr);
    BOOST_REQUIRE_EQUAL(p.init_post_opt(h), 0);
    return p.task_init(h);
}

BOOST_AUTO_TEST_CASE(chief_and_evaluator_come_first_as_slurmclusterresolver_orders_jobs)
{
    // 6 tasks on n1 n1 n2 n2 n3 n3: chief, evaluator, ps 0, ps 1, worker 0, worker 1.
    const std::vector<std::pair<std::string, int>> expected{{"chief", 0}, {"evaluator", 0}, {"ps", 0},
                                                            {"ps", 1},    {"worker", 0},    {"worker", 1}};
    for (int rank = 0; rank < 6; ++rank) {
        auto h = remote_task(rank, 6, "n[1-3]", "2(x3)");
        BOOST_REQUIRE(run_remote_tf(h, "2", "2", true, true) == 0);
        BOOST_TEST(h.env["PSTRAIN_ROLE"] == expected[static_cast<std::size_t>(rank)].first);
        BOOST_TEST(h.env["PSTRAIN_TASK_INDEX"] == std::to_string(expected[static_cast<std::size_t>(rank)].second));
        BOOST_TEST(h.env["PSTRAIN_CHIEF"] == "1");
        auto spec = json::parse(h.env["PSTRAIN_CLUSTER"]);
        BOOST_TEST(spec["chief"].size() == 1u);
        BOOST_TEST(spec["chief"][0].get<std::string>().rfind("n1:", 0) == 0u);
        BOOST_TEST(spec["evaluator"][0].get<std::string>().rfind("n1:", 0) == 0u);
        BOOST_TEST(spec["worker"][1].get<std::string>().rfind("n3:", 0) == 0u);
        auto tf = json::parse(h.env["TF_CONFIG"]);
        BOOST_TEST(tf["task"]["type"] == h.env["PSTRAIN_ROLE"]);
        BOOST_TEST(!tf["cluster"].contains("evaluator"));  // ParameterServerStrategy refuses it there
        BOOST_TEST(tf["cluster"]["chief"] == spec["chief"]);
        BOOST_TEST(tf["rpc_layer"] == "grpc");
        BOOST_TEST(tf["environment"] == "cloud");
    }
}

BOOST_AUTO_TEST_CASE(the_chief_gets_no_gpu_the_evaluator_shares_with_workers)
{
    // One node, 2 GPUs: chief, evaluator, ps, worker.
    auto gpus_of = [](int rank) {
        auto h = remote_task(rank, 4, "n1", "4");
        h.env["CUDA_VISIBLE_DEVICES"] = "0,1";
        BOOST_REQUIRE(run_remote_tf(h, "1", "1", true, true) == 0);
        return h.env["CUDA_VISIBLE_DEVICES"];
    };
    BOOST_TEST(gpus_of(0) == "");   // chief
    BOOST_TEST(gpus_of(1) == "0");  // evaluator
    BOOST_TEST(gpus_of(2) == "");   // ps
    BOOST_TEST(gpus_of(3) == "1");  // worker 0
}

BOOST_AUTO_TEST_CASE(without_chief_nothing_changes_and_worker_0_decides)
{
    auto h = remote_task(1, 3, "n[1-3]", "1(x3)");
    BOOST_REQUIRE(run_remote_tf(h, "1", "2", false, false) == 0);
    BOOST_TEST(h.env["PSTRAIN_ROLE"] == "worker");
    BOOST_TEST(h.env.count("PSTRAIN_CHIEF") == 0u);
    BOOST_TEST(!json::parse(h.env["TF_CONFIG"])["cluster"].contains("chief"));
}

BOOST_AUTO_TEST_CASE(arbitrary_distribution_is_refused)
{
    auto h = remote_task(0, 3, "n[1-3]", "1(x3)", "arbitrary");
    BOOST_TEST(run_remote(h, "1", "2") == -1);
    BOOST_TEST(contains(h.errors.at(0), "'arbitrary' is not supported"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ports)

std::string ps_address(std::uint32_t job, std::uint32_t step, std::optional<std::string> resv = std::nullopt)
{
    auto h = remote_task(0, 3, "n1", "3", "", job, step);
    if (resv) h.env["SLURM_STEP_RESV_PORTS"] = *resv;
    BOOST_REQUIRE(run_remote(h, "1", "2") == 0);
    return json::parse(h.env["PSTRAIN_CLUSTER"])["ps"][0];
}

BOOST_AUTO_TEST_CASE(port_scope_step_gives_every_task_its_own_port)
{
    // 2 nodes x 2 tasks: by node, n1 and n2 reuse the same two numbers.
    auto ports_of = [](std::vector<std::string> args) {
        auto h = remote_task(0, 4, "n[1-2]", "2(x2)");
        BOOST_REQUIRE(run_remote(h, "2", "2", args) == 0);
        std::set<std::string> ports;
        const auto spec = json::parse(h.env["PSTRAIN_CLUSTER"]);
        for (auto* key : {"ps", "worker"})
            for (auto& a : spec[key]) {
                auto s = a.get<std::string>();
                ports.insert(s.substr(s.find(':') + 1));
            }
        return ports.size();
    };
    BOOST_TEST(ports_of({}) == 2u);
    BOOST_TEST(ports_of({"port_scope=node"}) == 2u);
    BOOST_TEST(ports_of({"port_scope=step"}) == 4u);
    BOOST_CHECK_THROW(parse_plugstack_args({"port_scope=job"}), error);
}

BOOST_AUTO_TEST_CASE(steps_and_jobs_get_different_ports)
{
    BOOST_TEST(ps_address(42, 0) != ps_address(42, 1));
    BOOST_TEST(ps_address(42, 0) != ps_address(43, 0));
    BOOST_TEST(ps_address(42, 0) == ps_address(42, 0));  // every task computes the same spec
}

BOOST_AUTO_TEST_CASE(reserved_ports_are_used_when_slurm_gives_them)
{
    BOOST_TEST(ps_address(42, 0, std::string("12000-12002")) == "n1:12000");
    // Too few reserved ports for the tasks of a node: fall back to port_range.
    auto addr = ps_address(42, 0, std::string("12000"));
    auto port = std::stoi(addr.substr(addr.find(':') + 1));
    BOOST_TEST(port >= 20000);
    BOOST_TEST(port <= 29999);
}

BOOST_AUTO_TEST_CASE(the_default_port_range_stays_below_the_kernels_ephemeral_ports)
{
    // Linux's default net.ipv4.ip_local_port_range: outgoing connections
    // take these, and a task's server would find its port in use.
    for (std::uint32_t job = 1; job < 200; ++job) {
        auto h = remote_task(0, 3, "n1", "3", "", job, 0);
        h.ephemeral = "32768\t60999";
        BOOST_REQUIRE(run_remote(h, "1", "2") == 0);
        BOOST_TEST(h.errors.empty());
        const auto spec = json::parse(h.env["PSTRAIN_CLUSTER"]);
        for (auto* key : {"ps", "worker"})
            for (auto& a : spec[key]) {
                auto s = a.get<std::string>();
                BOOST_TEST(std::stoi(s.substr(s.find(':') + 1)) < 32768);
            }
    }
}

BOOST_AUTO_TEST_CASE(a_port_range_inside_the_ephemeral_ports_is_named_once_a_step)
{
    auto warnings_of = [](int rank) {
        auto h = remote_task(rank, 3, "n1", "3", "", 42, 0);
        h.ephemeral = "32768\t60999";
        BOOST_REQUIRE(run_remote(h, "1", "2", {"port_range=40000-40999"}) == 0);
        return h.errors;
    };
    const auto first = warnings_of(0);
    BOOST_REQUIRE_EQUAL(first.size(), 1u);
    BOOST_TEST(first[0].find("port_range 40000-40999") != std::string::npos);
    BOOST_TEST(first[0].find("ephemeral ports 32768-60999") != std::string::npos);
    BOOST_TEST(first[0].find("net.ipv4.ip_local_port_range") != std::string::npos);
    BOOST_TEST(warnings_of(1).empty());  // one line for the step, not one per task
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(gpus)

fake_host gpu_task(int rank, int total, const std::string& nodes, const std::string& per_node, const std::string& cvd,
                   const std::string& dist = "")
{
    auto h = remote_task(rank, total, nodes, per_node, dist);
    h.env["CUDA_VISIBLE_DEVICES"] = cvd;
    return h;
}

BOOST_AUTO_TEST_CASE(ps_gets_none_workers_split_one_node)
{
    std::vector<std::string> expect{"", "0", "1"};
    for (int rank = 0; rank < 3; ++rank) {
        auto h = gpu_task(rank, 3, "n1", "3", "0,1");
        BOOST_REQUIRE(run_remote(h, "1", "2") == 0);
        BOOST_TEST(h.env["CUDA_VISIBLE_DEVICES"] == expect[static_cast<std::size_t>(rank)]);
    }
}

BOOST_AUTO_TEST_CASE(slurm_device_ids_are_kept_and_split_evenly)
{
    auto h0 = gpu_task(1, 3, "n1", "3", "4,5,6,7");
    auto h1 = gpu_task(2, 3, "n1", "3", "4,5,6,7");
    BOOST_REQUIRE(run_remote(h0, "1", "2") == 0);
    BOOST_REQUIRE(run_remote(h1, "1", "2") == 0);
    BOOST_TEST(h0.env["CUDA_VISIBLE_DEVICES"] == "4,5");
    BOOST_TEST(h1.env["CUDA_VISIBLE_DEVICES"] == "6,7");
}

BOOST_AUTO_TEST_CASE(cyclic_two_nodes_one_gpu_each)
{
    // -N2 -n4 --ntasks-per-node=2 -m cyclic: n1 gets ranks 0,2; n2 gets 1,3.
    for (int rank = 0; rank < 4; ++rank) {
        auto h = gpu_task(rank, 4, "n[1-2]", "2(x2)", "0", "cyclic");
        BOOST_REQUIRE(run_remote(h, "2", "2") == 0);
        BOOST_TEST(h.env["CUDA_VISIBLE_DEVICES"] == (rank < 2 ? "" : "0"));
    }
}

BOOST_AUTO_TEST_CASE(worker_without_a_gpu_is_warned_not_failed)
{
    auto h = gpu_task(3, 4, "n1", "4", "0,1");  // 3 workers, 2 GPUs: worker 2 has none
    BOOST_TEST(run_remote(h, "1", "3") == 0);
    BOOST_TEST(h.env["CUDA_VISIBLE_DEVICES"] == "");
    BOOST_TEST(contains(h.errors.at(0), "warning: worker 2 has no GPU left"));

    auto s = gpu_task(3, 4, "n1", "4", "0,1");
    BOOST_TEST(run_remote(s, "1", "3", {"gpu_bind=share"}) == 0);
    BOOST_TEST(s.env["CUDA_VISIBLE_DEVICES"] == "0");
}

BOOST_AUTO_TEST_CASE(gpu_bind_none_leaves_slurm_alone)
{
    auto h = gpu_task(0, 2, "n1", "2", "0,1");
    BOOST_REQUIRE(run_remote(h, "1", "1", {"gpu_bind=none"}) == 0);
    BOOST_TEST(h.env["CUDA_VISIBLE_DEVICES"] == "0,1");
}

BOOST_AUTO_TEST_SUITE_END()

// Runs the remote callbacks for one task of --ps=ps --workers=workers
// --ps-spares=spares; returns task_init's status.
int run_remote_with_spares(fake_host& h, const char* ps, const char* workers, const char* spares,
                           std::vector<std::string> args = {})
{
    spank_plugin p;
    BOOST_REQUIRE_EQUAL(p.init(args, h), 0);
    p.set_option(option::ps, ps);
    p.set_option(option::workers, workers);
    p.set_option(option::ps_spares, spares);
    BOOST_REQUIRE_EQUAL(p.init_post_opt(h), 0);
    return p.task_init(h);
}

// --ps-spares=K: K more ps tasks after the N, counted in PSTRAIN_NUM_PS and
// PSTRAIN_CLUSTER (pstrain's bootstrap connects them) and named by
// PSTRAIN_PS_SPARES; TensorFlow's TF_CONFIG leaves them out, and a spare
// gets none.
BOOST_AUTO_TEST_CASE(ps_spares_are_the_last_ps_tasks_and_stay_out_of_tf_config)
{
    // 5 tasks on n1 n1 n2 n2 n3: ps 0, worker 0, worker 1, worker 2, and the
    // spare ps 1 at the last rank, on another node than ps 0.
    const std::vector<std::pair<std::string, int>> expected{
        {"ps", 0}, {"worker", 0}, {"worker", 1}, {"worker", 2}, {"ps", 1}};
    for (int rank = 0; rank < 5; ++rank) {
        auto h = remote_task(rank, 5, "n[1-3]", "2(x2),1");
        BOOST_REQUIRE_EQUAL(run_remote_with_spares(h, "1", "3", "1"), 0);
        BOOST_TEST(h.env["PSTRAIN_ROLE"] == expected[static_cast<std::size_t>(rank)].first);
        BOOST_TEST(h.env["PSTRAIN_TASK_INDEX"] == std::to_string(expected[static_cast<std::size_t>(rank)].second));
        BOOST_TEST(h.env["PSTRAIN_NUM_PS"] == "2");
        BOOST_TEST(h.env["PSTRAIN_PS_SPARES"] == "1");
        BOOST_TEST(json::parse(h.env["PSTRAIN_CLUSTER"])["ps"].size() == 2u);
        if (rank == 4) {
            BOOST_TEST(!h.env.count("TF_CONFIG"));
        } else {
            auto tf = json::parse(h.env.at("TF_CONFIG"));
            BOOST_TEST(tf["cluster"]["ps"].size() == 1u);
            BOOST_TEST(tf["cluster"]["worker"].size() == 3u);
        }
    }
}

BOOST_AUTO_TEST_CASE(ps_spares_count_in_the_task_count_and_bad_values_are_one_line)
{
    fake_host l(context::local);
    l.items[item::total_tasks] = 3;
    spank_plugin p;
    BOOST_REQUIRE_EQUAL(p.init({}, l), 0);
    p.set_option(option::ps, "1");
    p.set_option(option::workers, "2");
    p.set_option(option::ps_spares, "1");
    BOOST_REQUIRE_EQUAL(p.init_post_opt(l), 0);
    BOOST_TEST(p.local_user_init(l) == -1);
    BOOST_TEST(l.errors.at(0) ==
               "pstrain: --ps=1 --workers=2 --ps-spares=1 needs 4 tasks, the step has 3: use -n 4 (or leave -n out)");
    for (const char* bad : {"", "x", "-1"}) {
        fake_host h(context::allocator);
        spank_plugin q;
        BOOST_REQUIRE_EQUAL(q.init({}, h), 0);
        q.set_option(option::ps, "1");
        q.set_option(option::workers, "2");
        q.set_option(option::ps_spares, bad);
        BOOST_TEST(q.init_post_opt(h) == -1);
        BOOST_TEST(h.errors.at(0) == fmt::format("pstrain: --ps-spares={} is not a valid number of spare "
                                                 "parameter-server tasks: give a whole number from 0 to 4096, e.g. "
                                                 "--ps-spares=1",
                                                 bad));
    }
    fake_host a(context::allocator);
    spank_plugin r;
    BOOST_REQUIRE_EQUAL(r.init({}, a), 0);
    r.set_option(option::ps_spares, "1");
    BOOST_TEST(r.init_post_opt(a) == -1);
    BOOST_TEST(a.errors.at(0) == "pstrain: --ps-spares=1 was given without --ps and --workers: give them too, e.g. "
                                 "--ps=2 --workers=2 --ps-spares=1");
}

// ps_placement=spread: the serving ps tasks are spread first, and a spare
// goes where the next one would, never crowding a serving one's node while
// another node has none.
BOOST_AUTO_TEST_CASE(spread_placement_puts_the_spare_after_the_serving_ps_tasks)
{
    // 5 tasks on 2 nodes, block: ranks 0 1 2 on n1, 3 4 on n2.
    for (int rank = 0; rank < 5; ++rank) {
        auto h = remote_task(rank, 5, "n[1-2]", "3,2");
        BOOST_REQUIRE_EQUAL(run_remote_with_spares(h, "2", "2", "1", {"ps_placement=spread"}), 0);
        // ps 0 on n1 (rank 0), ps 1 on n2 (rank 3), the spare ps 2 on n1 (rank 1).
        BOOST_TEST(layouts::hosts_of(h) == (std::vector<std::string>{"n1", "n2", "n1", "n1", "n2"}),
                   boost::test_tools::per_element());
        const std::vector<std::string> expected{"ps 0", "ps 2", "worker 0", "ps 1", "worker 1"};
        BOOST_TEST(h.env["PSTRAIN_ROLE"] + " " + h.env["PSTRAIN_TASK_INDEX"] ==
                   expected[static_cast<std::size_t>(rank)]);
    }
}
