// The chief's progress in the Slurm job's comment, so that `squeue -o %k`
// and `scontrol show job` show how far a job is:
//   "step 1200/6000 loss 0.412 acc 0.871 12.3k samples/s ETA 4m00s"
// Set with `scontrol update JobId=<id> Comment=<status>`, run in the
// background (training never waits for it), at most once per interval and
// once at the end.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <string>

#include <sys/types.h>

namespace pstrain::trainer {

// The comment of a job whose chief failed: "failed at step 812: lost ps 0
// (n1): silent for 30 s (heartbeats every 5 s; address 10.251.0.11)", the
// error up to its first "; " (the advice after it stays in the log), on one
// line, at most 300 characters.
std::string failure_comment(std::uint64_t step, std::string_view error);

class job_comment {
public:
    // The job under Slurm (SLURM_JOB_ID), else none.
    static std::optional<std::string> job_id();
    explicit job_comment(std::string job_id, std::chrono::seconds interval = std::chrono::seconds(30))
        : job_id_(std::move(job_id)), interval_(interval)
    {}
    job_comment(const job_comment&) = delete;
    job_comment& operator=(const job_comment&) = delete;
    ~job_comment();

    // Sets the comment unless one was set less than an interval ago or the
    // last scontrol still runs; `final` always sets it and waits (at most a
    // few seconds) until it is set.
    void update(const std::string& status, bool final = false);

private:
    using clock = std::chrono::steady_clock;
    // Reaps the last scontrol; false while it still runs.
    bool reap(bool wait);

    std::string job_id_;
    std::chrono::seconds interval_;
    std::optional<clock::time_point> last_;
    pid_t child_ = -1;
    bool disabled_ = false;  // scontrol failed once: said so, tries no more
};

}  // namespace pstrain::trainer
