// The stall watchdog: the decision on an injected clock, the line it
// prints, the thread with a short timeout and an injected stall action,
// and every thread's stack.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE watchdog
#include <boost/test/unit_test.hpp>

#include "config.h"
#include "trainer/app/stacks.hpp"
#include "trainer/app/watchdog.hpp"
#include "tests/unit/stderr_capture.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include <unistd.h>

using namespace pstrain::trainer;
using namespace std::chrono_literals;

namespace {

const watch_clock::time_point t0{};

// Records the stall instead of exiting.
struct recorded {
    std::mutex m;
    std::condition_variable cv;
    std::string line;
    bool fired = false;
    watch_clock::time_point at;

    std::function<void(const std::string&)> action()
    {
        return [this](const std::string& l) {
            std::lock_guard lock(m);
            line = l;
            fired = true;
            at = watch_clock::now();
            cv.notify_all();
        };
    }
    bool wait(std::chrono::milliseconds limit)
    {
        std::unique_lock lock(m);
        return cv.wait_for(lock, limit, [&] { return fired; });
    }
};

// The watchdog's looks at its source, counted where they happen (the
// source is read on every look): a test waits until the watchdog has
// looked over a span longer than its timeout instead of sleeping and
// hoping it did.  A stall ends the looks, and the wait.
struct looks {
    std::mutex m;
    std::condition_variable cv;
    std::optional<watch_clock::time_point> first;
    watch_clock::time_point last, last_progress;
    bool stalled = false;

    // In the source: one look (that saw progress when `progressed`).
    void seen(bool progressed = false)
    {
        std::lock_guard lock(m);
        last = watch_clock::now();
        if (!first) first = last;
        if (progressed) last_progress = last;
        cv.notify_all();
    }
    void stall()
    {
        std::lock_guard lock(m);
        stalled = true;
        cv.notify_all();
    }
    // Waits until the looks from now on span `span`; false after a stall or `limit`.
    bool span(std::chrono::milliseconds span, std::chrono::milliseconds limit)
    {
        std::unique_lock lock(m);
        first.reset();
        return cv.wait_for(lock, limit, [&] { return stalled || (first && last - *first >= span); }) && !stalled;
    }
    watch_clock::time_point progressed_at()
    {
        std::lock_guard lock(m);
        return last_progress;
    }
};

watchdog_config config(std::chrono::milliseconds timeout, recorded& r)
{
    watchdog_config c;
    c.timeout = timeout;
    c.task = "worker 1 (n2)";
    c.on_stall = r.action();
    c.poll = 10ms;
    return c;
}

// The same, its looks counted by the source: a stall also ends `seen`'s wait.
watchdog_config config(std::chrono::milliseconds timeout, recorded& r, looks& seen)
{
    auto c = config(timeout, r);
    c.on_stall = [record = r.action(), &seen](const std::string& line) {
        record(line);
        seen.stall();
    };
    return c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(no_progress_for_the_timeout_is_a_stall_and_progress_restarts_the_count)
{
    stall_detector d(300s, t0);
    BOOST_TEST(!d.observe({0, false}, t0 + 299s));
    const auto stalled = d.observe({0, false}, t0 + 300s);
    BOOST_REQUIRE(stalled.has_value());
    BOOST_TEST(stalled->count() == 300000);

    stall_detector e(300s, t0);
    BOOST_TEST(!e.observe({0, false}, t0 + 200s));
    BOOST_TEST(!e.observe({1, false}, t0 + 250s));  // a step
    BOOST_TEST(!e.observe({1, false}, t0 + 549s));
    BOOST_TEST(e.observe({1, false}, t0 + 550s).has_value());
}

BOOST_AUTO_TEST_CASE(a_wait_with_grace_is_a_stall_only_after_the_timeout_and_the_grace)
{
    stall_detector d(10s, t0);
    watch_sample waiting{0, false, 3s};
    BOOST_TEST(!d.observe(waiting, t0 + 1s));
    for (int s = 2; s <= 12; ++s) BOOST_TEST(!d.observe(waiting, t0 + std::chrono::seconds(s)));
    BOOST_TEST(d.observe(waiting, t0 + 13s).has_value());
}

BOOST_AUTO_TEST_CASE(a_busy_stretch_is_not_a_stall_and_the_count_restarts_after_it)
{
    stall_detector d(10s, t0);
    BOOST_TEST(!d.observe({5, true}, t0 + 100s));  // evaluating, a long time
    BOOST_TEST(!d.observe({5, true}, t0 + 1000s));
    BOOST_TEST(!d.observe({5, false}, t0 + 1009s));  // done: the whole timeout again
    BOOST_TEST(d.observe({5, false}, t0 + 1010s).has_value());
}

BOOST_AUTO_TEST_CASE(a_gap_between_looks_means_the_process_was_stopped_and_restarts_the_count)
{
    stall_detector d(10s, t0, 3s);
    BOOST_TEST(!d.observe({0, false}, t0 + 1s));
    BOOST_TEST(!d.observe({0, false}, t0 + 61s));  // SIGSTOP for a minute, then SIGCONT
    BOOST_TEST(!d.observe({0, false}, t0 + 62s));
    BOOST_TEST(!d.observe({0, false}, t0 + 64s));
    BOOST_TEST(!d.observe({0, false}, t0 + 66s));
    BOOST_TEST(!d.observe({0, false}, t0 + 68s));
    BOOST_TEST(!d.observe({0, false}, t0 + 70s));
    BOOST_TEST(d.observe({0, false}, t0 + 71s).has_value());
}

BOOST_AUTO_TEST_CASE(the_line_names_the_task_the_peer_the_request_the_status_and_the_flag)
{
    pstrain::ps::activity a;
    a.waiting = true;
    a.peers = {0};
    a.peer_names = {"ps 0 (n1)"};
    a.request = "the reply to push (global step 42)";
    BOOST_TEST(stall_line("worker 1 (n2)", 300s, a) ==
               "worker 1 (n2) made no progress for 300 s, waiting for ps 0 (n1): the reply to push (global step 42); "
               "exiting with status 124, its threads' stacks follow (if ps 0 (n1) is only slow, not hung or stopped, "
               "raise --stall-timeout from 300)");
    a.peer_names = {"worker 0 (n2, the chief)", "worker 1 (n3)"};
    a.request = "the gradients of a sync step (global step 7)";
    const auto two = stall_line("ps 0 (n1)", 10s, a);
    BOOST_TEST(two.find("ps 0 (n1) made no progress for 10 s, waiting for worker 0 (n2, the chief), worker 1 (n3): the "
                        "gradients of a sync step (global step 7)") == 0u,
               two);
    const auto idle = stall_line("worker 0 (n2, the chief)", 60s, pstrain::ps::activity{});
    BOOST_TEST(idle.find("made no progress for 60 s, not waiting for a peer; exiting with status 124") !=
                   std::string::npos,
               idle);
    BOOST_TEST(idle.find("if this task is only slow") != std::string::npos, idle);
}

BOOST_AUTO_TEST_CASE(the_watchdog_fires_once_within_a_bounded_time_naming_what_its_source_waits_for)
{
    progress_meter meter;
    recorded r;
    const auto start = watch_clock::now();
    watchdog w(meter, config(300ms, r));
    pstrain::ps::activity a;
    a.waiting = true;
    a.peer_names = {"ps 0 (n1)"};
    a.request = "the reply to push (global step 3)";
    watchdog::source s(&w, [&] { return a; });
    BOOST_REQUIRE(r.wait(5s));
    const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(r.at - start);
    BOOST_TEST(after.count() >= 300);
    BOOST_TEST(after.count() < 3000);  // a poll every 10 ms; slack for a loaded machine
    BOOST_TEST(r.line.find("worker 1 (n2) made no progress for 0.3 s, waiting for ps 0 (n1): the reply to push") == 0u,
               r.line);
    BOOST_TEST(w.fired());
}

BOOST_AUTO_TEST_CASE(steady_progress_and_busy_stretches_keep_the_watchdog_quiet_until_they_end)
{
    progress_meter meter;
    recorded r;
    looks seen;
    watchdog w(meter, config(100ms, r, seen));
    // A step between every two of the watchdog's looks: never a stall, however late a look comes.
    std::atomic<bool> stepping{true};
    watchdog::source s(&w, [&] {
        if (stepping) meter.tick();
        seen.seen();
        return pstrain::ps::activity{};
    });
    BOOST_REQUIRE(seen.span(3 * 100ms, 30s));
    BOOST_TEST(!w.fired());
    stepping = false;
    {
        progress_meter::busy b(meter, "evaluating");
        BOOST_TEST(meter.busy_with() == std::string("evaluating"));
        BOOST_REQUIRE(seen.span(3 * 100ms, 30s));
        BOOST_TEST(!w.fired());
    }
    BOOST_TEST(meter.busy_with() == nullptr);
    // Neither stepping nor busy: a stall, named as the task's own.
    BOOST_REQUIRE(r.wait(30s));
    BOOST_TEST(r.line.find("worker 1 (n2) made no progress for 0.1 s, not waiting for a peer") == 0u, r.line);
}

// A spare PS waits for a lost PS, however long: while its server says it
// is idle that is no stall; once it serves, quiet is one again.
BOOST_AUTO_TEST_CASE(an_idle_spare_is_no_stall_and_a_serving_one_is_watched)
{
    progress_meter meter;
    recorded r;
    looks seen;
    watchdog w(meter, config(100ms, r, seen));
    std::atomic<bool> idle{true};
    watchdog::source s(&w, [&] {
        seen.seen();
        pstrain::ps::activity a;
        a.waiting = true;
        a.idle = idle;
        return a;
    });
    BOOST_REQUIRE(seen.span(5 * 100ms, 30s));
    BOOST_TEST(!w.fired());
    idle = false;
    BOOST_REQUIRE(r.wait(30s));
    BOOST_TEST(w.fired());
}

BOOST_AUTO_TEST_CASE(progress_of_the_library_counts_as_progress)
{
    progress_meter meter;
    recorded r;
    looks seen;
    watchdog w(meter, config(100ms, r, seen));
    // A reply between every two looks while `replying`; the watchdog's thread alone reads `replies`.
    std::atomic<bool> replying{true};
    std::uint64_t replies = 0;
    watchdog::source s(&w, [&] {
        const bool replied = replying;
        if (replied) ++replies;
        seen.seen(replied);
        pstrain::ps::activity a;
        a.progress = replies;
        a.waiting = true;
        return a;
    });
    BOOST_REQUIRE(seen.span(3 * 100ms, 30s));
    BOOST_TEST(!w.fired());
    replying = false;
    // Then it stops: a stall, a whole timeout after the last reply it saw.
    BOOST_REQUIRE(r.wait(30s));
    const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(r.at - seen.progressed_at());
    BOOST_TEST(quiet.count() >= 100);
}

using pstrain::testing::stderr_of;

BOOST_AUTO_TEST_CASE(a_busy_stretch_longer_than_half_the_timeout_warns_that_peers_count_it_as_a_stall)
{
    progress_meter meter;
    const auto quiet = stderr_of([&] {
        progress_meter::busy b(meter, "evaluating");  // no threshold set: never warns
        std::this_thread::sleep_for(30ms);
    });
    BOOST_TEST(quiet.empty(), quiet);
    meter.warn_busy_after(20ms, 7);
    const auto fast = stderr_of([&] { progress_meter::busy b(meter, "evaluating"); });
    BOOST_TEST(fast.empty(), fast);
    const auto slow = stderr_of([&] {
        progress_meter::busy b(meter, "writing its checkpoint shard");
        std::this_thread::sleep_for(60ms);
    });
    BOOST_TEST(slow.find("warning: writing its checkpoint shard took 0.") != std::string::npos, slow);
    BOOST_TEST(
        slow.find(" s, more than half of --stall-timeout 7: tasks that wait for this one meanwhile count that as a "
                  "stall; raise --stall-timeout") != std::string::npos,
        slow);
}

namespace stack_test {

std::mutex m;
std::condition_variable cv;
bool release = false, parked = false;

__attribute__((noinline)) void parked_in_a_named_function()
{
    std::unique_lock lock(m);
    parked = true;
    cv.notify_all();
    cv.wait(lock, [] { return release; });
}

}  // namespace stack_test

BOOST_AUTO_TEST_CASE(every_thread_writes_its_own_stack_with_demangled_function_names)
{
    std::thread t([] { stack_test::parked_in_a_named_function(); });
    {
        std::unique_lock lock(stack_test::m);
        stack_test::cv.wait(lock, [] { return stack_test::parked; });
    }
    const auto out = all_thread_stacks();
    {
        std::lock_guard lock(stack_test::m);
        stack_test::release = true;
    }
    stack_test::cv.notify_all();
    t.join();
    BOOST_TEST_MESSAGE(out);
    BOOST_TEST(out.find("stacks of the ") == 0u, out);
    BOOST_TEST(out.find("the main thread") != std::string::npos, out);
    BOOST_TEST(out.find("no answer") == std::string::npos, out);
#ifdef HAVE_LIBBACKTRACE
    BOOST_TEST(out.find("stack_test::parked_in_a_named_function()") != std::string::npos, out);
    // Its own frames too (this test runs in the main thread).
    BOOST_TEST(out.find("every_thread_writes_its_own_stack_with_demangled_function_names") != std::string::npos, out);
#else
    // Without GCC's libbacktrace (a clang build) Boost.Stacktrace names only
    // exported functions: each thread still writes its frames, and the
    // parked thread's wait in libc is named.
    std::size_t threads = 0, first_frames = 0;
    for (std::size_t at = out.find("\nthread "); at != std::string::npos; at = out.find("\nthread ", at + 1)) ++threads;
    for (std::size_t at = out.find("\n  #0 "); at != std::string::npos; at = out.find("\n  #0 ", at + 1))
        ++first_frames;
    BOOST_TEST(threads >= 2u, out);
    BOOST_TEST(first_frames == threads, out);
    BOOST_TEST(out.find("pthread_cond_wait") != std::string::npos, out);
#endif
}
