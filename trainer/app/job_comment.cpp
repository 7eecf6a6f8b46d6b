#include "trainer/app/job_comment.hpp"

#include "common/log.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

#include <fmt/format.h>

namespace pstrain::trainer {

std::string failure_comment(std::uint64_t step, std::string_view error)
{
    auto what = error.substr(0, error.find("; "));
    std::string out = fmt::format("failed at step {}: {}", step, what);
    for (auto& c : out)
        if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    if (out.size() > 300) out = out.substr(0, 297) + "...";
    return out;
}

std::optional<std::string> job_comment::job_id()
{
    const char* id = std::getenv("SLURM_JOB_ID");
    if (!id || !*id) return std::nullopt;
    return id;
}

job_comment::~job_comment() { reap(true); }

bool job_comment::reap(bool wait)
{
    if (child_ <= 0) return true;
    const auto give_up = clock::now() + std::chrono::seconds(5);
    for (;;) {
        int status = 0;
        const pid_t r = ::waitpid(child_, &status, WNOHANG);
        if (r == child_) {
            child_ = -1;
            if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && !disabled_) {
                disabled_ = true;
                log::warn("scontrol could not set the job's comment (exit status {}): squeue will not show this job's "
                          "progress; --job-comment off stops trying",
                          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
            }
            return true;
        }
        if (r < 0) {  // not our child any more (reaped elsewhere)
            child_ = -1;
            return true;
        }
        if (!wait || clock::now() >= give_up) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

void job_comment::update(const std::string& status, bool final)
{
    if (disabled_) return;
    const auto now = clock::now();
    if (!final && last_ && now - *last_ < interval_) return;
    if (!reap(final)) return;  // the last one still runs: this status waits for the next turn
    last_ = now;
    std::string id = "JobId=" + job_id_, comment = "Comment=" + status;
    std::vector<char*> argv{const_cast<char*>("scontrol"), const_cast<char*>("update"), id.data(), comment.data(),
                            nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    const int err = ::posix_spawnp(&pid, "scontrol", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (err != 0) {
        if (!disabled_) {
            disabled_ = true;
            log::warn("cannot run scontrol to set the job's comment: {}: squeue will not show this job's progress; "
                      "--job-comment off stops trying",
                      std::strerror(err));
        }
        return;
    }
    child_ = pid;
    if (final) reap(true);
}

}  // namespace pstrain::trainer
