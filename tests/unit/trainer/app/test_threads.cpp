// How many compute threads a task runs, from the flag, OMP_NUM_THREADS and
// what Slurm says it was given.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE threads
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/app/threads.hpp"

#include <map>
#include <string>

using namespace pstrain::trainer;

namespace {

environment env_of(const std::map<std::string, std::string>& vars)
{
    return [vars](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
    };
}

// srun -N2 --ps=1 --workers=2 on nodes n1, n2: 2 tasks on n1, 1 on n2.
std::map<std::string, std::string> step_on(const std::string& node, const std::string& cpus_on_node)
{
    return {{"SLURMD_NODENAME", node},
            {"SLURM_STEP_NODELIST", "n[1-2]"},
            {"SLURM_STEP_TASKS_PER_NODE", "2,1"},
            {"SLURM_CPUS_ON_NODE", cpus_on_node}};
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_flag_wins_then_omp_num_threads)
{
    auto vars = step_on("n1", "8");
    vars["OMP_NUM_THREADS"] = "3";
    vars["SLURM_CPUS_PER_TASK"] = "2";
    auto f = fit_threads(5, env_of(vars), 16);
    BOOST_TEST(f.threads == 5);
    BOOST_TEST(f.source == "--threads");
    f = fit_threads(0, env_of(vars), 16);
    BOOST_TEST(f.threads == 3);
    BOOST_TEST(f.source == "OMP_NUM_THREADS=3");
}

BOOST_AUTO_TEST_CASE(cpus_per_task_capped_by_the_affinity_mask)
{
    auto vars = step_on("n1", "8");
    vars["SLURM_CPUS_PER_TASK"] = "4";
    BOOST_TEST(fit_threads(0, env_of(vars), 16).threads == 4);
    BOOST_TEST(fit_threads(0, env_of(vars), 16).source == "SLURM_CPUS_PER_TASK=4");
    BOOST_TEST(fit_threads(0, env_of(vars), 2).threads == 2);
}

BOOST_AUTO_TEST_CASE(the_nodes_cpus_are_shared_by_its_tasks_ps_included)
{
    // n1 runs the PS and worker 0 on 8 CPUs: 4 each; n2 runs worker 1 alone.
    auto f = fit_threads(0, env_of(step_on("n1", "8")), 64);
    BOOST_TEST(f.threads == 4);
    BOOST_TEST(f.source == "SLURM_CPUS_ON_NODE=8 shared by 2 tasks on this node");
    BOOST_TEST(fit_threads(0, env_of(step_on("n2", "8")), 64).threads == 8);
    // Fewer CPUs than tasks: one thread each, never zero.
    BOOST_TEST(fit_threads(0, env_of(step_on("n1", "1")), 64).threads == 1);
    // More than the mask allows: the mask.
    BOOST_TEST(fit_threads(0, env_of(step_on("n2", "8")), 2).threads == 2);
    // The job's lists when the step's are missing.
    auto job = std::map<std::string, std::string>{{"SLURMD_NODENAME", "n3"},
                                                  {"SLURM_JOB_NODELIST", "n[1-3]"},
                                                  {"SLURM_TASKS_PER_NODE", "1(x2),3"},
                                                  {"SLURM_CPUS_ON_NODE", "6"}};
    BOOST_TEST(fit_threads(0, env_of(job), 64).threads == 2);
}

BOOST_AUTO_TEST_CASE(outside_slurm_or_with_slurms_variables_garbled_the_affinity_mask)
{
    auto f = fit_threads(0, env_of({}), 6);
    BOOST_TEST(f.threads == 6);
    BOOST_TEST(f.source == "the affinity mask's 6 CPUs");
    auto garbled = step_on("n1", "eight");
    BOOST_TEST(fit_threads(0, env_of(garbled), 3).threads == 3);
    garbled = step_on("n9", "8");  // not in the node list
    BOOST_TEST(fit_threads(0, env_of(garbled), 3).threads == 3);
    garbled = step_on("n1", "8");
    garbled["SLURM_STEP_NODELIST"] = "n[1-";
    BOOST_TEST(fit_threads(0, env_of(garbled), 3).threads == 3);
    BOOST_TEST(fit_threads(0, env_of({}), 0).threads == 1);
    BOOST_TEST(affinity_cpus() >= 1);
}

BOOST_AUTO_TEST_CASE(omp_num_threads_as_openmp_reads_it)
{
    // A list per nesting level takes its first; spaces around are fine.
    BOOST_TEST(fit_threads(0, env_of({{"OMP_NUM_THREADS", "8,1"}}), 4).threads == 8);
    BOOST_TEST(fit_threads(0, env_of({{"OMP_NUM_THREADS", " 4 "}}), 4).threads == 4);
}

BOOST_AUTO_TEST_CASE(a_malformed_omp_num_threads_is_one_error_naming_it_and_the_fix)
{
    for (const char* bad : {"0", "two", "-1", ",4", "4x"}) {
        try {
            fit_threads(0, env_of({{"OMP_NUM_THREADS", bad}}), 4);
            BOOST_ERROR("OMP_NUM_THREADS=" << bad << " was accepted");
        } catch (const pstrain::error& e) {
            const std::string what = e.what();
            BOOST_TEST(what.rfind(std::string("OMP_NUM_THREADS=") + bad + " is not a positive number: set it", 0) == 0u,
                       what);
        }
    }
}
