// Fencing a PS that maps a worker's memory.  A PS declared lost may still
// live on the worker's host: stopped by the kernel (swap, a stuck read,
// SIGSTOP) in the middle of an update that writes new values straight into
// the worker's mapped parameters.  Once a spare has taken its place, the
// rest of that old update, written when the process runs again, would land
// on the spare's newer values.  So a worker holds a handle on each PS
// process that maps its memory (a pidfd, from the PS's welcome on) and,
// before a spare takes that PS's place, kills it and waits until it is
// gone: fencing, as high-availability clusters do it to a node they have
// given up.
//
// A process is named by its pid, its pid namespace and its start time (so
// that neither a pid reused meanwhile nor a pid of another namespace, a
// container, is ever taken for it).  Used by the client's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace pstrain::ps {

struct process_identity {
    std::uint32_t pid = 0;            // 0: not named
    std::uint64_t pid_namespace = 0;  // the inode of /proc/self/ns/pid
    std::uint64_t start_ticks = 0;    // /proc/PID/stat's starttime
};

// This process's, as its welcome tells the workers it maps.
process_identity this_process();

class process_fence {
public:
    // A fence on the process `id` names; nullopt, with `why`, when it names
    // none, this process (an in-process PS), a process of another pid
    // namespace or one no longer there, or the kernel has no pidfd.
    static std::optional<process_fence> open(const process_identity& id, std::string& why);

    process_fence(process_fence&& o) noexcept;
    process_fence& operator=(process_fence&& o) noexcept;
    process_fence(const process_fence&) = delete;
    process_fence& operator=(const process_fence&) = delete;
    ~process_fence();

    enum class outcome { gone, killed, failed };
    // Kills the process (SIGKILL, which also ends a stopped one) and waits
    // up to `limit` until it is gone; `gone`: it had ended already; with
    // `failed`, `why` says what went wrong.
    outcome kill(std::chrono::milliseconds limit, std::string& why);

    std::uint32_t pid() const { return pid_; }

private:
    process_fence(int fd, std::uint32_t pid) : fd_(fd), pid_(pid) {}
    int fd_ = -1;
    std::uint32_t pid_ = 0;
};

}  // namespace pstrain::ps
