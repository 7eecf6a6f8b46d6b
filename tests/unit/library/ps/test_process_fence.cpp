#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE process_fence
#include <boost/test/unit_test.hpp>

#include "library/ps/process_fence.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <string>
#include <sys/mman.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace pstrain::ps;
using namespace std::chrono_literals;

namespace {

// What a child shares with the test: its identity, as its welcome would
// say it, and a counter it keeps writing, as a PS writes a worker's values.
struct shared_page {
    process_identity id;
    std::atomic<bool> ready{false};
    std::atomic<std::uint64_t> writes{0};
};

// A child that names itself and then writes until it is killed.
struct writer {
    shared_page* page = nullptr;
    pid_t pid = -1;

    writer()
    {
        void* m = ::mmap(nullptr, sizeof(shared_page), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        BOOST_REQUIRE(m != MAP_FAILED);
        page = new (m) shared_page;
        pid = ::fork();
        BOOST_REQUIRE(pid >= 0);
        if (pid == 0) {
            page->id = this_process();
            page->ready = true;
            for (;;) page->writes.fetch_add(1, std::memory_order_relaxed);
        }
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (!page->ready && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
        BOOST_REQUIRE(page->ready);
    }
    ~writer()
    {
        if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
        ::munmap(page, sizeof(shared_page));
    }
    bool alive() const { return ::kill(pid, 0) == 0 && ::waitpid(pid, nullptr, WNOHANG) == 0; }
};

// The writes stay where they are for a while: nothing writes any more.
bool writes_no_more(const shared_page& page)
{
    const auto before = page.writes.load();
    std::this_thread::sleep_for(50ms);
    return page.writes.load() == before;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_stopped_process_is_killed_and_writes_nothing_once_it_would_run_again)
{
    writer w;
    ::kill(w.pid, SIGSTOP);
    int status = 0;
    BOOST_REQUIRE(::waitpid(w.pid, &status, WUNTRACED) == w.pid && WIFSTOPPED(status));
    std::string why;
    auto fence = process_fence::open(w.page->id, why);
    BOOST_REQUIRE_MESSAGE(fence, why);
    BOOST_TEST(fence->pid() == static_cast<std::uint32_t>(w.pid));
    BOOST_TEST((fence->kill(5s, why) == process_fence::outcome::killed), why);
    // Gone before kill() returned: SIGCONT finds nothing to resume.
    ::kill(w.pid, SIGCONT);
    BOOST_TEST(writes_no_more(*w.page));
    BOOST_REQUIRE(::waitpid(w.pid, &status, 0) == w.pid);
    BOOST_TEST(WIFSIGNALED(status));
    BOOST_TEST(WTERMSIG(status) == SIGKILL);
    w.pid = -1;
}

BOOST_AUTO_TEST_CASE(a_running_process_writes_nothing_after_kill_returns)
{
    writer w;
    BOOST_REQUIRE(!writes_no_more(*w.page));  // it does write meanwhile
    std::string why;
    auto fence = process_fence::open(w.page->id, why);
    BOOST_REQUIRE_MESSAGE(fence, why);
    BOOST_TEST((fence->kill(5s, why) == process_fence::outcome::killed), why);
    BOOST_TEST(writes_no_more(*w.page));
}

BOOST_AUTO_TEST_CASE(a_process_that_ended_already_is_gone)
{
    writer w;
    std::string why;
    auto fence = process_fence::open(w.page->id, why);
    BOOST_REQUIRE_MESSAGE(fence, why);
    ::kill(w.pid, SIGKILL);
    int status = 0;
    BOOST_REQUIRE(::waitpid(w.pid, &status, 0) == w.pid);
    w.pid = -1;
    BOOST_TEST((fence->kill(5s, why) == process_fence::outcome::gone));
}

BOOST_AUTO_TEST_CASE(a_pid_that_another_process_has_now_is_left_alone)
{
    writer w;
    auto id = w.page->id;
    id.start_ticks += 1;  // the welcome's process started at another time
    std::string why;
    BOOST_TEST(!process_fence::open(id, why));
    BOOST_TEST(why == "pid " + std::to_string(w.pid) + " is no longer its process");
    BOOST_TEST(w.alive());
}

BOOST_AUTO_TEST_CASE(this_process_another_namespace_and_no_name_are_not_fenced)
{
    std::string why;
    BOOST_TEST(!process_fence::open(this_process(), why));
    BOOST_TEST(why == "it runs in this process");
    writer w;
    auto id = w.page->id;
    id.pid_namespace += 1;
    BOOST_TEST(!process_fence::open(id, why));
    BOOST_TEST(why == "its process is in another pid namespace");
    BOOST_TEST(w.alive());
    BOOST_TEST(!process_fence::open(process_identity{}, why));
    BOOST_TEST(why == "it did not name its process");
}

BOOST_AUTO_TEST_CASE(this_process_is_named_by_its_pid_namespace_and_start)
{
    const auto id = this_process();
    BOOST_TEST(id.pid == static_cast<std::uint32_t>(::getpid()));
    BOOST_TEST(id.pid_namespace != 0u);
    BOOST_TEST(id.start_ticks != 0u);
    const auto again = this_process();
    BOOST_TEST(again.start_ticks == id.start_ticks);
}
