// How a task learns its role and its peers (bootstrap::detect_job): from
// PMIx and the SPANK plugin's PSTRAIN_* variables, from the classic flags,
// or from TF_CONFIG, in that order; and each wrong input's one line, which
// names what is wrong and the fix.  A static spec's key comes from
// PSTRAIN_AUTH_KEY or PSTRAIN_AUTH_KEY_FILE.  Under PMIx, every rank's
// place comes from what it published, checked against the plugin's spec
// (bootstrap::place_ranks, given PMIx's values without a PMIx server).
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE bootstrap_detect
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "library/bootstrap/job.hpp"

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace pstrain;
using bootstrap::classic_flags;
using bootstrap::detect_job;
using bootstrap::mode;

namespace {

// Every variable the bootstrap reads, unset for the case and put back after.
struct clean_environment {
    static constexpr const char* names[] = {
        "PSTRAIN_ROLE",       "PMIX_RANK",       "PMIX_NAMESPACE", "PSTRAIN_NUM_PS",   "PSTRAIN_NUM_WORKERS",
        "PSTRAIN_TASK_INDEX", "PSTRAIN_CLUSTER", "TF_CONFIG",      "PSTRAIN_AUTH_KEY", "PSTRAIN_AUTH_KEY_FILE"};
    std::map<std::string, std::optional<std::string>> saved;

    clean_environment()
    {
        for (const char* n : names) {
            const char* v = std::getenv(n);
            saved[n] = v ? std::optional<std::string>(v) : std::nullopt;
            ::unsetenv(n);
        }
    }
    ~clean_environment()
    {
        for (const auto& [n, v] : saved) {
            if (v) ::setenv(n.c_str(), v->c_str(), 1);
            else ::unsetenv(n.c_str());
        }
    }
    static void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }
};

// What the SPANK plugin sets for worker 1 of --ps=1 --workers=2 under srun --mpi=pmix.
void plugin_worker_1()
{
    clean_environment::set("PMIX_RANK", "2");
    clean_environment::set("PSTRAIN_ROLE", "worker");
    clean_environment::set("PSTRAIN_NUM_PS", "1");
    clean_environment::set("PSTRAIN_NUM_WORKERS", "2");
    clean_environment::set("PSTRAIN_TASK_INDEX", "1");
    clean_environment::set("PSTRAIN_CLUSTER", R"({"ps":["n1:30000"],"worker":["n1:30001","n2:30000"]})");
}

const classic_flags no_flags{};

classic_flags flags(std::string ps, std::string workers, std::string job_name, int index)
{
    return {std::move(ps), std::move(workers), std::move(job_name), index};
}

// The one line detect_job refuses with ("" when it does not).
std::string refusal(const classic_flags& f = no_flags)
{
    try {
        detect_job(f);
    } catch (const error& e) {
        const std::string line = e.what();
        BOOST_TEST(line.find('\n') == std::string::npos, line);
        return line;
    }
    return "";
}

std::string refusal_of_tf_config(const std::string& tf_config)
{
    clean_environment::set("TF_CONFIG", tf_config);
    return refusal();
}

const std::string valid_tf_config =
    R"({"cluster":{"ps":["n1:2222"],"worker":["n2:2222","n3:2222"]},"task":{"type":"worker","index":1}})";

const std::string sixty_four_hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

}  // namespace

BOOST_FIXTURE_TEST_SUITE(detect, clean_environment)

BOOST_AUTO_TEST_CASE(nothing_that_gives_a_role_is_no_job)
{
    BOOST_TEST(!detect_job(no_flags).has_value());
    // The plugin's variables without PMIx (srun --mpi=none) give no role by themselves.
    plugin_worker_1();
    ::unsetenv("PMIX_RANK");
    BOOST_TEST(!detect_job(no_flags).has_value());
}

// ------------------------------------------------------------------ PMIx

BOOST_AUTO_TEST_CASE(pmix_and_the_plugin_give_the_role_the_counts_and_the_spec)
{
    plugin_worker_1();
    const auto j = detect_job(no_flags);
    BOOST_REQUIRE(j.has_value());
    BOOST_TEST((j->how == mode::pmix));
    BOOST_TEST(j->source == "PMIx and the SPANK plugin");
    BOOST_TEST((j->me == task_id{role::worker, 1}));
    BOOST_TEST(j->num_ps == 1);
    BOOST_TEST(j->num_workers == 2);
    BOOST_TEST(j->name() == "worker 1");
    BOOST_TEST(!j->is_chief());
    // PMIx makes the key when connecting: none from the environment.
    BOOST_TEST(!j->key.has_value());
    BOOST_TEST(bootstrap::peer_names(*j) == std::vector<std::string>{"ps 0 (n1)"});
    BOOST_TEST(j->peer_name(role::worker, 0) == "worker 0 (n1, the chief)");
}

BOOST_AUTO_TEST_CASE(a_ps_under_pmix_names_every_worker_as_its_peer)
{
    plugin_worker_1();
    set("PMIX_RANK", "0");
    set("PMIX_NAMESPACE", "slurm.pmix.17.0");
    set("PSTRAIN_ROLE", "ps");
    set("PSTRAIN_TASK_INDEX", "0");
    const auto j = detect_job(no_flags);
    BOOST_REQUIRE(j.has_value());
    BOOST_TEST((j->me == task_id{role::ps, 0}));
    BOOST_TEST(bootstrap::peer_names(*j) == (std::vector<std::string>{"worker 0 (n1, the chief)", "worker 1 (n2)"}));
}

BOOST_AUTO_TEST_CASE(the_classic_flags_win_over_the_plugin_under_pmix)
{
    plugin_worker_1();
    const auto j = detect_job(flags("a:1", "b:1", "worker", 0));
    BOOST_REQUIRE(j.has_value());
    BOOST_TEST((j->how == mode::static_spec));
    BOOST_TEST(j->source == "--ps-hosts/--worker-hosts");
}

BOOST_AUTO_TEST_CASE(a_separate_chief_or_evaluator_under_the_plugin_is_refused_naming_the_flags_to_drop)
{
    plugin_worker_1();
    set("PSTRAIN_ROLE", "chief");
    BOOST_TEST(refusal() ==
               "this task is the job's chief (--chief/--evaluator): pstrain's trainer has ps and worker tasks only, "
               "worker 0 being its chief; a separate chief and an evaluator are for TensorFlow programs run with "
               "pstrain-run: drop --chief and --evaluator for pstrain");
    set("PSTRAIN_ROLE", "evaluator");
    BOOST_TEST(refusal().find("this task is the job's evaluator (--chief/--evaluator)") == 0u);
}

BOOST_AUTO_TEST_CASE(wrong_plugin_variables_each_name_the_variable)
{
    plugin_worker_1();
    set("PSTRAIN_ROLE", "master");
    BOOST_TEST(refusal() == "PSTRAIN_ROLE=master is not ps or worker");

    plugin_worker_1();
    set("PSTRAIN_TASK_INDEX", "2");  // worker 2 of 2
    BOOST_TEST(refusal() == "PSTRAIN_TASK_INDEX=2 is not valid: run under srun with --ps=N --workers=M");

    plugin_worker_1();
    set("PSTRAIN_NUM_PS", "0");
    BOOST_TEST(refusal() == "PSTRAIN_NUM_PS=0 is not valid: run under srun with --ps=N --workers=M");

    plugin_worker_1();
    ::unsetenv("PSTRAIN_NUM_WORKERS");
    BOOST_TEST(refusal() == "PSTRAIN_NUM_WORKERS=(unset) is not valid: run under srun with --ps=N --workers=M");

    plugin_worker_1();
    ::unsetenv("PSTRAIN_CLUSTER");
    BOOST_TEST(refusal() == "PSTRAIN_CLUSTER is not set: is spank_pstrain.so in plugstack.conf?");

    plugin_worker_1();
    set("PSTRAIN_CLUSTER", R"({"ps":["n1"],"worker":["n1:1","n2:1"]})");
    BOOST_TEST(refusal() == "PSTRAIN_CLUSTER: address 'n1' is not host:port");
}

// ------------------------------------------------------- the classic flags

BOOST_AUTO_TEST_CASE(the_classic_flags_give_the_role_and_the_spec_in_their_order)
{
    const auto j = detect_job(flags("n1:2222,n2:2222", "n3:2222,n4:2222,n5:2222", "ps", 1));
    BOOST_REQUIRE(j.has_value());
    BOOST_TEST((j->how == mode::static_spec));
    BOOST_TEST((j->me == task_id{role::ps, 1}));
    BOOST_TEST(j->num_ps == 2);
    BOOST_TEST(j->num_workers == 3);
    BOOST_TEST(j->spec.ps == (std::vector<std::string>{"n1:2222", "n2:2222"}));
    BOOST_TEST(j->spec.worker == (std::vector<std::string>{"n3:2222", "n4:2222", "n5:2222"}));
    BOOST_TEST(bootstrap::peer_names(*j) ==
               (std::vector<std::string>{"worker 0 (n3, the chief)", "worker 1 (n4)", "worker 2 (n5)"}));
    // No PSTRAIN_AUTH_KEY: no key (connect warns that authentication is off).
    BOOST_TEST(!j->key.has_value());
}

BOOST_AUTO_TEST_CASE(the_classic_flags_win_over_tf_config)
{
    set("TF_CONFIG", valid_tf_config);
    const auto j = detect_job(flags("a:1", "b:1", "worker", 0));
    BOOST_REQUIRE(j.has_value());
    BOOST_TEST(j->source == "--ps-hosts/--worker-hosts");
    BOOST_TEST(j->spec.ps == std::vector<std::string>{"a:1"});
}

BOOST_AUTO_TEST_CASE(wrong_classic_flags_each_name_the_flag_and_the_fix)
{
    const std::string together =
        "the classic flags go together: give --ps-hosts, --worker-hosts, --job-name and --task-index";
    BOOST_TEST(refusal(flags("a:1", "", "", -1)) == together);
    BOOST_TEST(refusal(flags("a:1", "b:1", "worker", -1)) == together);
    BOOST_TEST(refusal(flags("", "", "", 0)) == together);
    BOOST_TEST(refusal(flags("a:1,,c:1", "b:1", "ps", 0)) ==
               "--ps-hosts a:1,,c:1: address '' is not host:port: give a comma list of host:port");
    BOOST_TEST(refusal(flags("a:1", "b:70000", "worker", 0)) ==
               "--worker-hosts b:70000: address 'b:70000' has no valid port (1-65535): give a comma list of host:port");
    BOOST_TEST(refusal(flags("a:1", "b:1", "chief", 0)) == "--job-name chief: use ps or worker");
    BOOST_TEST(refusal(flags("a:1", "b:1,c:1", "worker", 2)) == "--task-index 2 is outside the 2 worker hosts given");
}

// ------------------------------------------------------------- TF_CONFIG

BOOST_AUTO_TEST_CASE(tf_config_gives_the_role_and_the_spec)
{
    set("TF_CONFIG", valid_tf_config);
    const auto j = detect_job(no_flags);
    BOOST_REQUIRE(j.has_value());
    BOOST_TEST((j->how == mode::static_spec));
    BOOST_TEST(j->source == "TF_CONFIG");
    BOOST_TEST((j->me == task_id{role::worker, 1}));
    BOOST_TEST(j->num_ps == 1);
    BOOST_TEST(j->num_workers == 2);
    BOOST_TEST(j->name() == "worker 1");
    BOOST_TEST(bootstrap::peer_names(*j) == std::vector<std::string>{"ps 0 (n1)"});
}

BOOST_AUTO_TEST_CASE(each_bad_tf_config_gives_one_line_naming_the_problem)
{
    BOOST_TEST(refusal_of_tf_config("{cluster") == "TF_CONFIG is not a JSON object: check its value");
    BOOST_TEST(refusal_of_tf_config(R"(["ps"])") == "TF_CONFIG is not a JSON object: check its value");
    BOOST_TEST(refusal_of_tf_config(R"({"task":{"type":"ps","index":0}})") ==
               R"(TF_CONFIG has no "cluster" object: set it as {"cluster":{...},"task":{...}})");
    BOOST_TEST(refusal_of_tf_config(R"({"cluster":{"worker":["b:1"]},"task":{"type":"worker","index":0}})") ==
               R"(TF_CONFIG: "ps" must be a non-empty list of "host:port" strings)");
    BOOST_TEST(refusal_of_tf_config(R"({"cluster":{"ps":["a:1"],"worker":[7]},"task":{"type":"ps","index":0}})") ==
               R"(TF_CONFIG: "worker" holds a non-string entry)");
    BOOST_TEST(refusal_of_tf_config(R"({"cluster":{"ps":["a"],"worker":["b:1"]},"task":{"type":"ps","index":0}})") ==
               "TF_CONFIG: address 'a' is not host:port");
    const std::string no_task = R"(TF_CONFIG has no valid "task": set it as {"type":"ps"|"worker","index":N})";
    BOOST_TEST(refusal_of_tf_config(R"({"cluster":{"ps":["a:1"],"worker":["b:1"]}})") == no_task);
    BOOST_TEST(refusal_of_tf_config(
                   R"({"cluster":{"ps":["a:1"],"worker":["b:1"]},"task":{"type":"ps","index":"0"}})") == no_task);
    BOOST_TEST(
        refusal_of_tf_config(R"({"cluster":{"ps":["a:1"],"worker":["b:1"]},"task":{"type":"master","index":0}})") ==
        "TF_CONFIG task type 'master' is not chief, evaluator, ps or worker");
    BOOST_TEST(
        refusal_of_tf_config(R"({"cluster":{"ps":["a:1"],"worker":["b:1"]},"task":{"type":"worker","index":1}})") ==
        "TF_CONFIG task index 1 is outside the worker list (1 entries)");
    BOOST_TEST(
        refusal_of_tf_config(R"({"cluster":{"ps":["a:1"],"worker":["b:1"]},"task":{"type":"evaluator","index":1}})") ==
        "TF_CONFIG task index 1 for the evaluator: there is one, index 0");
}

BOOST_AUTO_TEST_CASE(a_tf_config_for_a_separate_chief_or_evaluator_is_refused_naming_tf_config)
{
    const auto chief = refusal_of_tf_config(
        R"({"cluster":{"chief":["c:1"],"ps":["a:1"],"worker":["b:1"]},"task":{"type":"chief","index":0}})");
    BOOST_TEST(chief ==
               "this task is the job's chief (TF_CONFIG): pstrain's trainer has ps and worker tasks only, worker 0 "
               "being its chief; a separate chief and an evaluator are for TensorFlow programs run with pstrain-run: "
               "drop --chief and --evaluator for pstrain");
    const auto evaluator =
        refusal_of_tf_config(R"({"cluster":{"ps":["a:1"],"worker":["b:1"]},"task":{"type":"evaluator","index":0}})");
    BOOST_TEST(evaluator.find("this task is the job's evaluator (TF_CONFIG)") == 0u, evaluator);
}

// ------------------------------------------------- a static spec's key

BOOST_AUTO_TEST_CASE(a_static_spec_takes_its_key_from_pstrain_auth_key)
{
    set("TF_CONFIG", valid_tf_config);
    set("PSTRAIN_AUTH_KEY", sixty_four_hex);
    const auto j = detect_job(no_flags);
    BOOST_REQUIRE(j.has_value());
    BOOST_REQUIRE(j->key.has_value());
    BOOST_TEST((*j->key == *ucx::parse_key(sixty_four_hex)));
    BOOST_TEST((*j->key)[1] == 0x11);

    set("PSTRAIN_AUTH_KEY", "0011");
    BOOST_TEST(refusal() ==
               "PSTRAIN_AUTH_KEY must hold 64 hex digits (32 bytes), the same in every task: make one with "
               "`openssl rand -hex 32`");
}

BOOST_AUTO_TEST_CASE(a_key_file_must_exist_hold_a_key_and_be_its_owners_alone)
{
    set("TF_CONFIG", valid_tf_config);
    char path[] = "/tmp/pstrain-test-key-XXXXXX";
    const int fd = ::mkstemp(path);  // mode 0600
    BOOST_REQUIRE(fd >= 0);
    ::close(fd);
    std::ofstream(path) << sixty_four_hex << "\nnot read\n";
    set("PSTRAIN_AUTH_KEY_FILE", path);
    const auto j = detect_job(no_flags);
    BOOST_REQUIRE(j.has_value());
    BOOST_REQUIRE(j->key.has_value());
    BOOST_TEST((*j->key == *ucx::parse_key(sixty_four_hex)));

    ::chmod(path, 0640);
    BOOST_TEST(refusal() ==
               fmt::format("PSTRAIN_AUTH_KEY_FILE={} can be read by others (mode 640): chmod 600 it", path));

    ::chmod(path, 0600);
    std::ofstream(path) << "not hex\n";
    BOOST_TEST(refusal() ==
               "PSTRAIN_AUTH_KEY_FILE must hold 64 hex digits (32 bytes), the same in every task: make one "
               "with `openssl rand -hex 32`");

    ::unlink(path);
    BOOST_TEST(refusal() == fmt::format("PSTRAIN_AUTH_KEY_FILE={}: No such file or directory: name a file holding the "
                                        "job's key",
                                        path));
}

BOOST_AUTO_TEST_SUITE_END()

// ------------------------------------------------------ PMIx's ranks

namespace {

// The plugin's layout of --ps=1 --workers=2 on n1 and n2: rank 0 ps 0 (n1),
// rank 1 worker 0 (n1), rank 2 worker 1 (n2).
bootstrap::job pmix_job()
{
    bootstrap::job j;
    j.how = mode::pmix;
    j.me = {role::ps, 0};
    j.num_ps = 1;
    j.num_workers = 2;
    j.spec = parse_cluster_spec(R"({"ps":["n1:30000"],"worker":["n1:30001","n2:30000"]})");
    return j;
}

const std::vector<std::uint8_t> address_of_ps0{0xa0, 0xa1}, address_of_w0{0xb0}, address_of_w1{0xc0, 0xc1, 0xc2};

bootstrap::pmix_rank rank(task_id t, const std::vector<std::uint8_t>& address, std::optional<std::string> host)
{
    return {bootstrap::published_peer(t, address), std::move(host)};
}

std::vector<bootstrap::pmix_rank> three_ranks()
{
    return {rank({role::ps, 0}, address_of_ps0, "n1"), rank({role::worker, 0}, address_of_w0, "n1"),
            rank({role::worker, 1}, address_of_w1, "n2")};
}

std::string refusal_of_ranks(const std::vector<bootstrap::pmix_rank>& ranks)
{
    try {
        bootstrap::place_ranks(pmix_job(), ranks);
    } catch (const error& e) {
        return e.what();
    }
    return "";
}

std::vector<std::uint8_t> bytes(std::span<const std::uint8_t> s) { return {s.begin(), s.end()}; }

}  // namespace

BOOST_AUTO_TEST_CASE(each_rank_is_the_task_it_published_with_its_address_and_name)
{
    const auto ranks = three_ranks();
    const auto placed = bootstrap::place_ranks(pmix_job(), ranks);
    BOOST_TEST_REQUIRE(placed.tasks.size() == 3u);
    BOOST_TEST((placed.tasks[0] == task_id{role::ps, 0}));
    BOOST_TEST((placed.tasks[1] == task_id{role::worker, 0}));
    BOOST_TEST((placed.tasks[2] == task_id{role::worker, 1}));
    BOOST_TEST(placed.names == (std::vector<std::string>{"ps 0 (n1)", "worker 0 (n1, the chief)", "worker 1 (n2)"}));
    BOOST_TEST(placed.chief == 1u);
    BOOST_TEST(bytes(placed.addresses[0]) == address_of_ps0);
    BOOST_TEST(bytes(placed.addresses[1]) == address_of_w0);
    BOOST_TEST(bytes(placed.addresses[2]) == address_of_w1);
}

BOOST_AUTO_TEST_CASE(the_chief_is_found_wherever_its_rank_is)
{
    // Ranks in another order than the plugin's (worker 0 last).
    const std::vector<bootstrap::pmix_rank> ranks{rank({role::worker, 1}, address_of_w1, "n2"),
                                                  rank({role::ps, 0}, address_of_ps0, "n1"),
                                                  rank({role::worker, 0}, address_of_w0, std::nullopt)};
    const auto placed = bootstrap::place_ranks(pmix_job(), ranks);
    BOOST_TEST(placed.chief == 2u);
    // A rank whose host PMIx does not say is taken as the spec places it.
    BOOST_TEST(placed.names[2] == "worker 0 (n1, the chief)");
}

BOOST_AUTO_TEST_CASE(a_rank_where_the_spec_does_not_put_it_is_refused_naming_both_hosts)
{
    auto ranks = three_ranks();
    ranks[2].host = "n7";
    BOOST_TEST(
        refusal_of_ranks(ranks) ==
        "rank 2 (worker 1) runs on n7 but PSTRAIN_CLUSTER puts it on n2: the plugin's layout is wrong; report it "
        "with the srun line");
}

BOOST_AUTO_TEST_CASE(a_rank_claiming_a_task_the_spec_lacks_is_refused)
{
    auto ranks = three_ranks();
    ranks[2] = rank({role::worker, 2}, address_of_w1, "n2");
    BOOST_TEST(refusal_of_ranks(ranks) == "rank 2 claims worker 2 which the cluster spec does not have");
    ranks[2] = rank({role::ps, 1}, address_of_w1, "n2");
    BOOST_TEST(refusal_of_ranks(ranks) == "rank 2 claims ps 1 which the cluster spec does not have");
}

BOOST_AUTO_TEST_CASE(a_rank_that_published_no_address_is_not_a_peer)
{
    BOOST_TEST(!bootstrap::holds_peer(bootstrap::published_peer({role::worker, 0}, {})));
    BOOST_TEST(bootstrap::holds_peer(bootstrap::published_peer({role::worker, 0}, address_of_w0)));
    auto ranks = three_ranks();
    ranks[1].published = bootstrap::published_peer({role::worker, 0}, {});
    BOOST_TEST(refusal_of_ranks(ranks) == "rank 1 published no UCX address");
}
