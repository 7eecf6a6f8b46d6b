#include "library/ps/job_shape.hpp"

#include <fmt/format.h>

namespace pstrain::ps {

namespace {

using maybe_refusal = std::optional<job_refusal>;

const char* plural(int n) { return n == 1 ? "" : "s"; }

// pstrain serve's ps tasks serve a program's workers, which know neither
// spares nor --join.
maybe_refusal serving_has_no_spares(const job_shape& j)
{
    if (!j.serving || j.ps_spares == 0) return std::nullopt;
    return job_refusal{fmt::format("--ps-spares {}: spare ps tasks serve pstrain's own workers only in this version, "
                                   "not a program's through pstrain serve: submit the job without spares",
                                   j.ps_spares),
                       "spare PS tasks serve pstrain's own workers only, not a program's",
                       {}};
}

maybe_refusal serving_has_no_room(const job_shape& j)
{
    if (!j.serving || j.max_workers == 0) return std::nullopt;
    return job_refusal{fmt::format("--max-workers {}: workers join a running job through pstrain's own --join in this "
                                   "version, which a program's workers do not have: leave it out",
                                   j.max_workers),
                       "a program's workers do not join a running job: it has no room for more",
                       {}};
}

// A staleness bound holds async workers back; sync is lock-step already.
maybe_refusal staleness_is_async(const training_settings& s)
{
    if (!s.sync || s.max_staleness < 0) return std::nullopt;
    return job_refusal{
        "--max-staleness bounds async training and --sync-replicas trains in lock-step already: give "
        "one of them",
        fmt::format("a staleness bound ({}) is for async training, and this job is sync", s.max_staleness),
        "leave it out, or train async"};
}

maybe_refusal room_is_elastic(const training_settings& s, const job_shape& j)
{
    if (j.max_workers == 0 || s.elastic) return std::nullopt;
    return job_refusal{fmt::format("--max-workers {}: room for workers that join later is for --elastic jobs: give "
                                   "--elastic to every task too",
                                   j.max_workers),
                       "room for workers that join later is for elastic jobs: set server_config::training.elastic",
                       {}};
}

maybe_refusal standalone_has_no_room(const job_shape& j)
{
    if (j.max_workers == 0 || !j.standalone) return std::nullopt;
    return job_refusal{fmt::format("--max-workers {}: --standalone has one worker and no room for others: leave one "
                                   "of them out",
                                   j.max_workers),
                       "a standalone job has one worker and no room for others",
                       {}};
}

maybe_refusal spares_restore_checkpoints(const job_shape& j)
{
    if (j.ps_spares == 0 || j.checkpoints) return std::nullopt;
    return job_refusal{fmt::format("--ps-spares {}: a spare restores a lost PS's shard from the newest checkpoint: "
                                   "give --checkpoint-dir on a path every node shares",
                                   j.ps_spares),
                       "a spare PS restores a lost PS's shard from the newest checkpoint, and this job has no "
                       "checkpoint directory",
                       {}};
}

// A worker that joins later does not yet learn which spare stands in.
maybe_refusal spares_are_not_elastic(const training_settings& s, const job_shape& j)
{
    if (j.ps_spares == 0 || !s.elastic) return std::nullopt;
    return job_refusal{fmt::format("--ps-spares {} with --elastic: a worker that joins later does not yet learn which "
                                   "spare stands in for a lost PS: give one of them",
                                   j.ps_spares),
                       "spare PS tasks are not for elastic jobs: a worker that joins later does not yet learn which "
                       "spare stands in for a lost PS",
                       {}};
}

maybe_refusal standalone_has_no_spares(const job_shape& j)
{
    if (j.ps_spares == 0 || !j.standalone) return std::nullopt;
    return job_refusal{
        fmt::format("--ps-spares {}: --standalone has no ps task to lose: leave one of them out", j.ps_spares),
        "a standalone job has no ps task to lose",
        {}};
}

// The rules of the counts, once they are known.

maybe_refusal room_holds_the_workers(const job_shape& j)
{
    if (j.num_workers == 0 || j.max_workers == 0 || j.max_workers >= j.num_workers) return std::nullopt;
    return job_refusal{
        fmt::format("--max-workers {} is fewer than the job's {} workers: give {} or more, or leave it "
                    "out",
                    j.max_workers, j.num_workers, j.num_workers),
        fmt::format("{} workers start with the job, and the transport has room for {}", j.num_workers, j.max_workers),
        {}};
}

maybe_refusal replicas_within_the_room(const training_settings& s, const job_shape& j)
{
    if (j.num_workers == 0 || s.replicas_to_aggregate <= j.room()) return std::nullopt;
    return job_refusal{fmt::format("--replicas-to-aggregate {} is more than the {} workers: use at most {}",
                                   s.replicas_to_aggregate, j.room(), j.room()),
                       fmt::format("{} training cannot aggregate {} gradients per step from {} workers",
                                   s.sync ? "sync" : "async", s.replicas_to_aggregate, j.room()),
                       fmt::format("aggregate at most {}", j.room())};
}

maybe_refusal spares_leave_a_ps(const job_shape& j)
{
    if (j.num_ps == 0 || j.ps_spares < j.num_ps) return std::nullopt;
    const int more = j.ps_spares - j.num_ps + 1;
    return job_refusal{fmt::format("--ps-spares {} leaves no ps task to serve: this job has {} ps task{}, and the "
                                   "spares are the last ones: run {} more ps task{} (sbatch --ps-spares adds them)",
                                   j.ps_spares, j.num_ps, plural(j.num_ps), more, plural(more)),
                       fmt::format("{} spare PS task{} leave none of the job's {} to serve", j.ps_spares,
                                   plural(j.ps_spares), j.num_ps),
                       {}};
}

}  // namespace

std::optional<job_refusal> check_job(const training_settings& s, const job_shape& shape)
{
    for (auto r : {serving_has_no_spares(shape), serving_has_no_room(shape), staleness_is_async(s),
                   room_is_elastic(s, shape), standalone_has_no_room(shape), spares_restore_checkpoints(shape),
                   spares_are_not_elastic(s, shape), standalone_has_no_spares(shape), room_holds_the_workers(shape),
                   replicas_within_the_room(s, shape), spares_leave_a_ps(shape)})
        if (r) return r;
    return std::nullopt;
}

}  // namespace pstrain::ps
