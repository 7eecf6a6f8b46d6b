#include "library/ps/process_fence.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <utility>

namespace pstrain::ps {
namespace {

// /proc/PID/stat's 22nd field, the process's start time in clock ticks
// after boot; 0 when it cannot be read (no such process).
std::uint64_t start_ticks(const std::string& pid)
{
    std::ifstream in("/proc/" + pid + "/stat");
    std::string line;
    if (!std::getline(in, line)) return 0;
    // The command name, in parentheses, may hold spaces and parentheses.
    const auto close = line.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream fields(line.substr(close + 1));
    std::string field;
    for (int i = 3; i <= 22; ++i)
        if (!(fields >> field)) return 0;
    try {
        return std::stoull(field);
    } catch (const std::exception&) {
        return 0;
    }
}

std::uint64_t pid_namespace(const char* path)
{
    struct stat st {};
    return ::stat(path, &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

}  // namespace

process_identity this_process()
{
    process_identity id;
    id.pid = static_cast<std::uint32_t>(::getpid());
    id.pid_namespace = pid_namespace("/proc/self/ns/pid");
    id.start_ticks = start_ticks("self");
    return id;
}

std::optional<process_fence> process_fence::open(const process_identity& id, std::string& why)
{
    if (id.pid == 0 || id.pid_namespace == 0 || id.start_ticks == 0) {
        why = "it did not name its process";
        return std::nullopt;
    }
    const auto self = this_process();
    if (id.pid_namespace != self.pid_namespace) {
        why = "its process is in another pid namespace";
        return std::nullopt;
    }
    if (id.pid == self.pid) {
        why = "it runs in this process";
        return std::nullopt;
    }
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(id.pid), 0));
    if (fd < 0) {
        why = fmt::format("pidfd_open({}): {}", id.pid, std::strerror(errno));
        return std::nullopt;
    }
    // The pidfd holds the process that had the pid when it was opened: its
    // start time says whether that is still the one the welcome named.
    if (start_ticks(std::to_string(id.pid)) != id.start_ticks) {
        ::close(fd);
        why = fmt::format("pid {} is no longer its process", id.pid);
        return std::nullopt;
    }
    return process_fence(fd, id.pid);
}

process_fence::process_fence(process_fence&& o) noexcept : fd_(std::exchange(o.fd_, -1)), pid_(o.pid_) {}

process_fence& process_fence::operator=(process_fence&& o) noexcept
{
    if (this != &o) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = std::exchange(o.fd_, -1);
        pid_ = o.pid_;
    }
    return *this;
}

process_fence::~process_fence()
{
    if (fd_ >= 0) ::close(fd_);
}

process_fence::outcome process_fence::kill(std::chrono::milliseconds limit, std::string& why)
{
    pollfd p{fd_, POLLIN, 0};
    // Readable once the process has ended.
    if (::poll(&p, 1, 0) == 1) return outcome::gone;
    if (::syscall(SYS_pidfd_send_signal, fd_, SIGKILL, nullptr, 0) != 0) {
        if (errno == ESRCH) return outcome::gone;
        why = fmt::format("pidfd_send_signal(SIGKILL) to pid {}: {}", pid_, std::strerror(errno));
        return outcome::failed;
    }
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        const int r = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
        if (r == 1) return outcome::killed;
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) why = fmt::format("poll on the pidfd of pid {}: {}", pid_, std::strerror(errno));
        else why = fmt::format("pid {} was still there {} ms after SIGKILL", pid_, limit.count());
        return outcome::failed;
    }
}

}  // namespace pstrain::ps
