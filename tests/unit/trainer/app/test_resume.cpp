// What a job may resume, and where a resumed worker's data goes on.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE resume
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/app/resume.hpp"

#include <map>
#include <memory>
#include <string>

using namespace pstrain::trainer;

BOOST_AUTO_TEST_CASE(data_position_resumes_only_for_the_same_workers_seed_and_batch)
{
    train_options o;
    o.seed = 3;
    o.batch_size = 50;
    pstrain::checkpoint::manifest m;
    m.seed = 3;
    m.batch_size = 50;
    m.positions = {10, 12, 9};
    BOOST_TEST(resumed_position(m, o, 3, 1) == 12u);
    BOOST_TEST(resumed_position(m, o, 2, 1) == 0u);  // another number of workers: other shards
    o.batch_size = 100;
    BOOST_TEST(resumed_position(m, o, 3, 1) == 0u);
}

// --resume: which job's checkpoint this job may resume.
namespace {

using pstrain::checkpoint::job_identity;

std::function<const char*(const char*)> env_of(std::map<std::string, std::string> vars)
{
    auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
    return [held](const char* name) -> const char* {
        auto it = held->find(name);
        return it == held->end() ? nullptr : it->second.c_str();
    };
}

pstrain::checkpoint::manifest written_by(std::optional<job_identity> job, std::uint64_t step = 200)
{
    pstrain::checkpoint::manifest m;
    m.global_step = step;
    m.job = std::move(job);
    return m;
}

const job_identity job4_first{"c1", "4", "20261124T193000-a1b2c3d4", "2026-11-24T19:30:00Z"};

}  // namespace

BOOST_AUTO_TEST_CASE(the_job_comes_from_slurm_and_the_plugin)
{
    const auto me = current_job(env_of(
        {{"SLURM_CLUSTER_NAME", "c1"}, {"SLURM_JOB_ID", "4"}, {"PSTRAIN_SUBMISSION", "20261124T193000-a1b2c3d4"}}));
    BOOST_REQUIRE(me.has_value());
    BOOST_TEST(me->same_job(job4_first));
    BOOST_TEST(me->submit_time == "2026-11-24T19:30:00Z");
    // Outside a job: none; without the plugin's id: the job id alone, no time.
    BOOST_TEST(!current_job(env_of({{"PSTRAIN_SUBMISSION", "20261124T193000-a1b2c3d4"}})).has_value());
    const auto bare = current_job(env_of({{"SLURM_JOB_ID", "7"}}));
    BOOST_REQUIRE(bare.has_value());
    BOOST_TEST(bare->describe() == "job 7");
    BOOST_TEST(bare->submit_time.empty());
}

BOOST_AUTO_TEST_CASE(resume_any_takes_whatever_is_there)
{
    const job_identity other{"c1", "4", "20261125T080000-0badf00d", "2026-11-25T08:00:00Z"};
    BOOST_TEST(resume_refusal(written_by(job4_first), "/ckpt", resume_policy::any, other).empty());
    BOOST_TEST(resume_refusal(written_by(std::nullopt), "/ckpt", resume_policy::any, std::nullopt).empty());
}

BOOST_AUTO_TEST_CASE(resume_own_takes_the_same_job_after_a_requeue)
{
    // A requeued job: the same cluster, job id and submission (Slurm kept its environment).
    BOOST_TEST(resume_refusal(written_by(job4_first), "/ckpt", resume_policy::own, job4_first).empty());
}

BOOST_AUTO_TEST_CASE(resume_own_refuses_another_job_in_one_line_naming_it_and_the_fix)
{
    // The same job id after the controller started afresh: another submission.
    const job_identity again{"c1", "4", "20261125T080000-0badf00d", "2026-11-25T08:00:00Z"};
    BOOST_TEST(
        resume_refusal(written_by(job4_first), "/home/u/pstrain-checkpoints/c1-4", resume_policy::own, again) ==
        "/home/u/pstrain-checkpoints/c1-4 holds another job's checkpoint, ckpt-0000000200.json at global step 200 "
        "written by cluster c1, job 4, submission 20261124T193000-a1b2c3d4 (submitted 2026-11-24T19:30:00Z); "
        "--resume own resumes only this job's (cluster c1, job 4, submission 20261125T080000-0badf00d (submitted "
        "2026-11-25T08:00:00Z)): train in a fresh --checkpoint-dir, or, to continue that run on purpose, name this "
        "directory with --checkpoint-dir (or PSTRAIN_CHECKPOINT_DIR for train.sh) without --resume own");
    // Another cluster sharing the path, same job id and (by chance) submission: refused too.
    auto elsewhere = job4_first;
    elsewhere.cluster = "c2";
    BOOST_TEST(!resume_refusal(written_by(job4_first), "/ckpt", resume_policy::own, elsewhere).empty());
    // A checkpoint of no recorded job (outside Slurm, an older pstrain).
    const auto line = resume_refusal(written_by(std::nullopt), "/ckpt", resume_policy::own, again);
    BOOST_TEST(line.find("written by no recorded job (a run outside Slurm, or an older pstrain)") != std::string::npos,
               line);
    // --resume own outside a job: nothing can be its own.
    BOOST_TEST(
        resume_refusal(written_by(job4_first), "/ckpt", resume_policy::own, std::nullopt) ==
        "--resume own: this run is not in a Slurm job (SLURM_JOB_ID is unset), so no checkpoint in /ckpt is its own: "
        "run it under sbatch or srun, or pass --resume any to resume whatever is there");
}

BOOST_AUTO_TEST_CASE(a_checkpoint_at_train_steps_leaves_nothing_to_train)
{
    BOOST_TEST(nothing_to_train(written_by(job4_first), "/ckpt", 200) ==
               "/ckpt/ckpt-0000000200.json is at global step 200, which is --train-steps 200: nothing to train; raise "
               "--train-steps to train on from it, or give a fresh --checkpoint-dir to train anew");
    BOOST_TEST(nothing_to_train(written_by(job4_first, 500), "/ckpt", 300)
                   .find("at global step 500, past --train-steps 300") != std::string::npos);
}

// A session of --model linear on the CPU: no data to read.
namespace {

train_options linear_options()
{
    train_options o;
    o.model = "linear";
    o.family = model_family::linear;
    o.device = pstrain::compute::device_kind::cpu;
    o.threads = 1;
    o.optimizer = pstrain::ps::optimizer_kind::adam;
    o.seed = 7;
    o.batch_size = 20;
    o.checkpoint_dir = "/ckpt";
    return o;
}

std::string refusal_of(const pstrain::checkpoint::manifest& m, const session& s, const train_options& o)
{
    try {
        check_compatible(m, s, o);
    } catch (const pstrain::error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_sessions_manifest_names_its_model_optimizer_and_data_order)
{
    const auto o = linear_options();
    const auto s = open_session(o);
    const auto m = manifest_for(s, o, 40, "sync");
    BOOST_TEST(m.global_step == 40u);
    BOOST_TEST(m.mode == "sync");
    BOOST_TEST(m.model == "linear");
    BOOST_TEST(m.num_params == 2u);
    BOOST_TEST(m.optimizer == "adam");
    BOOST_TEST(m.state_slots == 2);
    BOOST_TEST(m.seed == 7u);
    BOOST_TEST(m.batch_size == 20);
    BOOST_TEST(refusal_of(m, s, o) == "");
}

BOOST_AUTO_TEST_CASE(a_checkpoint_of_another_model_or_optimizer_is_refused_naming_the_fix)
{
    auto o = linear_options();
    const auto s = open_session(o);
    auto other_model = manifest_for(s, o, 40, "sync");
    other_model.model = "784-100-10 mlp";
    other_model.num_params = 79510;
    BOOST_TEST(refusal_of(other_model, s, o) ==
               "the checkpoint at global step 40 in /ckpt holds the model '784-100-10 mlp' (79510 parameters) but this "
               "job builds 'linear' (2 parameters): use the same --model (and --hidden-units) and data, or another "
               "--checkpoint-dir");
    const auto adam = manifest_for(s, o, 40, "sync");
    o.optimizer = pstrain::ps::optimizer_kind::sgd;
    BOOST_TEST(
        refusal_of(adam, s, o) ==
        "the checkpoint at global step 40 in /ckpt was trained with --optimizer adam but this job uses sgd: pass "
        "--optimizer adam, or another --checkpoint-dir");
}

BOOST_AUTO_TEST_CASE(the_precision_is_recorded_and_may_change_on_resume)
{
    auto o = linear_options();
    const auto s = open_session(o);
    const auto fp32 = manifest_for(s, o, 40, "sync");
    BOOST_TEST(fp32.precision == "fp32");
    o.precision = pstrain::compute::precision::bf16;
    BOOST_TEST(manifest_for(s, o, 40, "sync").precision == "bf16");
    BOOST_TEST(refusal_of(fp32, s, o) == "", "the weights are float32 at either precision");
}
