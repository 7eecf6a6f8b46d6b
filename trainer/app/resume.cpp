#include "trainer/app/resume.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "pstrain/optimizer.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pstrain::trainer {

checkpoint::manifest manifest_for(const session& s, const train_options& o, std::uint64_t step, const char* mode)
{
    checkpoint::manifest m;
    m.global_step = step;
    m.mode = mode;
    m.model = s.shape().describe();
    m.num_params = s.shape().num_params();
    for (const auto& t : s.shape().tensors()) m.tensors.push_back({{"name", t.name}, {"shape", t.shape}});
    m.optimizer = ps::optimizer_name(o.optimizer);
    m.state_slots = ps::state_slots(o.optimizer);
    m.seed = o.seed;
    m.batch_size = o.batch_size;
    m.precision = compute::precision_name(o.precision);
    return m;
}

void check_compatible(const checkpoint::manifest& m, const session& s, const train_options& o)
{
    const auto name = fmt::format("the checkpoint at global step {} in {}", m.global_step, o.checkpoint_dir);
    if (m.model != s.shape().describe() || m.num_params != s.shape().num_params())
        throw error(
            fmt::format("{} holds the model '{}' ({} parameters) but this job builds '{}' ({} parameters): use the "
                        "same --model (and --hidden-units) and data, or another --checkpoint-dir",
                        name, m.model, m.num_params, s.shape().describe(), s.shape().num_params()));
    if (const auto mine = ps::optimizer_name(o.optimizer); m.optimizer != mine)
        throw error(
            fmt::format("{} was trained with --optimizer {} but this job uses {}: pass --optimizer {}, or another "
                        "--checkpoint-dir",
                        name, m.optimizer, mine, m.optimizer));
    // The weights are float32 at either precision: a change is allowed, and said.
    if (const auto mine = compute::precision_name(o.precision); m.precision != mine)
        log::info("{} was trained at --precision {}; this job goes on at --precision {} from its float32 weights", name,
                  m.precision, mine);
}

std::optional<checkpoint::job_identity> current_job(const std::function<const char*(const char*)>& env)
{
    const auto get = [&](const char* name) {
        const char* v = env(name);
        return std::string(v ? v : "");
    };
    checkpoint::job_identity me{get("SLURM_CLUSTER_NAME"), get("SLURM_JOB_ID"), get("PSTRAIN_SUBMISSION"), ""};
    if (me.job_id.empty()) return std::nullopt;
    // "20261124T193000-a1b2c3d4": submitted 2026-11-24T19:30:00Z.
    const auto& id = me.submission;
    const bool dated =
        id.size() > 16 && id[8] == 'T' && id[15] == '-' &&
        std::all_of(id.begin(), id.begin() + 15, [](char c) { return c == 'T' || (c >= '0' && c <= '9'); });
    if (dated)
        me.submit_time = fmt::format("{}-{}-{}T{}:{}:{}Z", id.substr(0, 4), id.substr(4, 2), id.substr(6, 2),
                                     id.substr(9, 2), id.substr(11, 2), id.substr(13, 2));
    return me;
}

std::string resume_refusal(const checkpoint::manifest& m, const std::string& dir, resume_policy policy,
                           const std::optional<checkpoint::job_identity>& me)
{
    if (policy == resume_policy::any) return "";
    if (!me)
        return fmt::format(
            "--resume own: this run is not in a Slurm job (SLURM_JOB_ID is unset), so no checkpoint in {} "
            "is its own: run it under sbatch or srun, or pass --resume any to resume whatever is there",
            dir);
    if (m.job && m.job->same_job(*me)) return "";
    const auto writer =
        m.job ? m.job->describe() : std::string("no recorded job (a run outside Slurm, or an older pstrain)");
    return fmt::format(
        "{} holds another job's checkpoint, {} at global step {} written by {}; --resume own resumes only this "
        "job's ({}): train in a fresh --checkpoint-dir, or, to continue that run on purpose, name this "
        "directory with --checkpoint-dir (or PSTRAIN_CHECKPOINT_DIR for train.sh) without --resume own",
        dir, checkpoint::manifest_name(m.global_step), m.global_step, writer, me->describe());
}

std::string nothing_to_train(const checkpoint::manifest& m, const std::string& dir, std::int64_t train_steps)
{
    const auto step = static_cast<std::int64_t>(m.global_step);
    return fmt::format(
        "{}/{} is at global step {}, {} --train-steps {}: nothing to train; raise --train-steps to train on "
        "from it, or give a fresh --checkpoint-dir to train anew",
        dir, checkpoint::manifest_name(m.global_step), step, step == train_steps ? "which is" : "past", train_steps);
}

std::uint64_t resumed_position(const checkpoint::manifest& m, const train_options& o, int num_workers, int index)
{
    // One position per worker slot (--max-workers: the room, not the
    // workers the job started with): another count of slots, like another
    // number of workers, splits the data otherwise.
    if (m.positions.size() != static_cast<std::size_t>(num_workers) || m.seed != o.seed ||
        m.batch_size != o.batch_size) {
        log::info("data order starts afresh: the checkpoint was taken with {} worker slots, --seed {}, --batch-size "
                  "{}",
                  m.positions.size(), m.seed, m.batch_size);
        return 0;
    }
    return m.positions[static_cast<std::size_t>(index)];
}

}  // namespace pstrain::trainer
