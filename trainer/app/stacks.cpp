#include "trainer/app/stacks.hpp"

#include "config.h"

#ifdef HAVE_LIBBACKTRACE
#define BOOST_STACKTRACE_USE_BACKTRACE
#endif
#include <boost/stacktrace.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <semaphore.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace pstrain::trainer {
namespace {

// A real-time signal nothing else in pstrain, UCX or PMIx uses.
int dump_signal() { return SIGRTMIN + 4; }

constexpr std::size_t max_frames = 64;

// Where the signalled thread writes: one thread at a time.
struct capture {
    void* frames[max_frames];
    std::atomic<std::size_t> bytes{0};
    std::atomic<pid_t> target{0};
    sem_t done;
};
capture slot;

extern "C" void on_dump_signal(int)
{
    const int saved = errno;
    if (slot.target.load() == static_cast<pid_t>(::syscall(SYS_gettid))) {
        // Frames from the interrupted function on (skipping this handler
        // and the kernel's signal trampoline).
        const auto n = boost::stacktrace::safe_dump_to(2, slot.frames, sizeof slot.frames);
        slot.bytes.store(n * sizeof(void*));
        sem_post(&slot.done);
    }
    errno = saved;
}

std::string thread_name(pid_t tid)
{
    std::ifstream in(fmt::format("/proc/self/task/{}/comm", tid));
    std::string name;
    std::getline(in, name);
    return name;
}

std::vector<pid_t> thread_ids()
{
    std::vector<pid_t> ids;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
        const auto name = e.path().filename().string();
        if (!name.empty() && std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
            ids.push_back(static_cast<pid_t>(std::stol(name)));
    }
    std::sort(ids.begin(), ids.end());
    return ids;
}

void append_frames(const boost::stacktrace::stacktrace& st, std::string& out)
{
    std::size_t k = 0;
    for (const auto& f : st) {
        if (f.empty()) continue;
        std::string name = f.name();
        if (name.empty()) name = fmt::format("{}", f.address());
        if (name.size() > 200) name = name.substr(0, 197) + "...";
        const auto file = f.source_file();
        if (!file.empty()) out += fmt::format("  #{:<2} {} at {}:{}\n", k, name, file, f.source_line());
        else out += fmt::format("  #{:<2} {}\n", k, name);
        ++k;
    }
    if (k == 0) out += "  (no frames)\n";
}

}  // namespace

void prepare_stack_dumps()
{
    static std::once_flag once;
    std::call_once(once, [] {
        sem_init(&slot.done, 0, 0);
        struct sigaction sa {};
        sa.sa_handler = on_dump_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        sigaction(dump_signal(), &sa, nullptr);
        // The unwinder's first use sets itself up (allocates, takes locks):
        // done here, not in a signal handler.
        void* frames[4];
        (void)boost::stacktrace::safe_dump_to(0, frames, sizeof frames);
    });
}

std::string all_thread_stacks(std::chrono::milliseconds wait)
{
    prepare_stack_dumps();
    static std::mutex one_at_a_time;
    std::lock_guard lock(one_at_a_time);
    const pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
    const auto ids = thread_ids();
    std::string out = fmt::format("stacks of the {} threads of process {}:\n", ids.size(), ::getpid());
    for (const pid_t tid : ids) {
        const auto role = tid == ::getpid() ? ", the main thread" : tid == self ? ", the watchdog writing this" : "";
        out += fmt::format("thread {} ({}{}):\n", tid, thread_name(tid), role);
        if (tid == self) {
            append_frames(boost::stacktrace::stacktrace(), out);
            continue;
        }
        while (sem_trywait(&slot.done) == 0) {}
        slot.bytes.store(0);
        slot.target.store(tid);
        if (::syscall(SYS_tgkill, ::getpid(), tid, dump_signal()) != 0) {
            slot.target.store(0);
            out += "  (gone)\n";
            continue;
        }
        timespec deadline{};
        clock_gettime(CLOCK_REALTIME, &deadline);
        const auto ns = deadline.tv_nsec + std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
        deadline.tv_sec += static_cast<time_t>(ns / 1000000000);
        deadline.tv_nsec = static_cast<long>(ns % 1000000000);
        int rc;
        while ((rc = sem_timedwait(&slot.done, &deadline)) != 0 && errno == EINTR) {}
        slot.target.store(0);
        if (rc != 0) {
            out +=
                fmt::format("  (no answer within {} ms: the thread blocks signal {})\n", wait.count(), dump_signal());
            continue;
        }
        append_frames(boost::stacktrace::stacktrace::from_dump(slot.frames, slot.bytes.load()), out);
    }
    return out;
}

}  // namespace pstrain::trainer
