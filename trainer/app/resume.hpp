// Between a session and its checkpoints: the manifest a session writes,
// whether a checkpoint may be resumed by this job (its model and optimizer,
// --resume's job check, --train-steps), and where a resumed worker's data
// goes on.
#pragma once

#include "trainer/app/options.hpp"
#include "trainer/app/session.hpp"
#include "trainer/checkpoint/manifest.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace pstrain::trainer {

// A manifest for this session's model and options (shards, data position
// and step are the caller's).
checkpoint::manifest manifest_for(const session& s, const train_options& o, std::uint64_t step, const char* mode);

// Refuses (pstrain::error) a checkpoint of another model or optimizer; one
// trained at another --precision is resumed, with a line saying so.
void check_compatible(const checkpoint::manifest& m, const session& s, const train_options& o);

// The Slurm job this process belongs to, as its checkpoints record it:
// SLURM_CLUSTER_NAME, SLURM_JOB_ID and PSTRAIN_SUBMISSION (the SPANK
// plugin's, whose time is the submit time); none outside a job (no
// SLURM_JOB_ID).  `env` is getenv.
std::optional<checkpoint::job_identity> current_job(const std::function<const char*(const char*)>& env);

// Whether this job may resume checkpoint `m` of `dir` under `policy`: empty
// when it may (always with any; with own when the manifest's job is `me`),
// else the one line that refuses it, naming the other job and the fix.
std::string resume_refusal(const checkpoint::manifest& m, const std::string& dir, resume_policy policy,
                           const std::optional<checkpoint::job_identity>& me);

// The line of a restore that finds the run already at --train-steps
// (nothing to train), with the fix.
std::string nothing_to_train(const checkpoint::manifest& m, const std::string& dir, std::int64_t train_steps);

// The data position of worker `index` of `num_workers` worker slots (the
// job's workers, or its --max-workers room) when checkpoint `m` was taken:
// the batches it had drawn; 0, with a line saying the data order starts
// afresh, when this job's slots, seed or batch size differ from the
// checkpoint's.
std::uint64_t resumed_position(const checkpoint::manifest& m, const train_options& o, int num_workers, int index);

}  // namespace pstrain::trainer
