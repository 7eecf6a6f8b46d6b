#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE ucx_wait
#include <boost/test/unit_test.hpp>

#include "library/transport/ucx.hpp"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <unistd.h>

using namespace pstrain::ucx;
using std::chrono::microseconds;

BOOST_AUTO_TEST_CASE(the_spin_follows_short_waits_and_stops_when_they_last_longer_than_it)
{
    spin_policy p;
    BOOST_TEST(p.window().count() == 0);  // no waits yet: assumed long, a task sleeps at once
    for (int i = 0; i < 20; ++i) p.waited(microseconds(100));
    // About one and a half times the recent waits: a reply that comes in
    // about as long as the last ones is caught without a wake-up.
    BOOST_TEST(p.window().count() >= 140);
    BOOST_TEST(p.window().count() <= 160);
    for (int i = 0; i < 20; ++i) p.waited(microseconds(10));
    BOOST_TEST(p.window().count() == spin_policy::min_spin.count());
    for (int i = 0; i < 20; ++i) p.waited(microseconds(200));
    BOOST_TEST(p.window().count() == spin_policy::max_spin.count());
    // Waits of a millisecond (a sync worker waiting for the others): no
    // spin, which would take the core from the tasks it waits for.
    for (int i = 0; i < 20; ++i) p.waited(microseconds(1000));
    BOOST_TEST(p.window().count() == 0);
    for (int i = 0; i < 20; ++i) p.waited(microseconds(100));
    BOOST_TEST(p.window().count() > 0);  // short again: spins again
}

BOOST_AUTO_TEST_CASE(a_yield_that_lost_the_core_stops_the_spins_for_a_while)
{
    spin_policy p;
    for (int i = 0; i < 20; ++i) p.waited(microseconds(20));
    const auto t0 = spin_policy::clock::now();
    BOOST_TEST(p.window(t0).count() == spin_policy::min_spin.count());
    int asked = 0;
    const auto crowded = [&] {
        ++asked;
        return true;
    };
    const auto room = [] { return false; };
    // A yield that returns at once (a core of its own), or after the task
    // this one waits for ran a while on its core: the spin goes on, and the
    // node's run queue is not even asked for.
    BOOST_TEST(!p.yielded(microseconds(3), t0, crowded));
    BOOST_TEST(!p.yielded(spin_policy::lost_core - microseconds(1), t0, crowded));
    BOOST_TEST(asked == 0);
    BOOST_TEST(p.window(t0).count() > 0);
    // One that was away lost_core while no more tasks than cores are
    // runnable (this core went to the task this one waits for): it goes on
    // too.
    BOOST_TEST(!p.yielded(spin_policy::lost_core, t0, room));
    BOOST_TEST(p.window(t0).count() > 0);
    // Away lost_core on a node with more runnable tasks than cores: the
    // spin ends, and no wait spins for contended_pause.
    BOOST_TEST(p.yielded(spin_policy::lost_core, t0, crowded));
    BOOST_TEST(asked == 1);
    BOOST_TEST(p.contended() == 1u);
    BOOST_TEST(p.window(t0).count() == 0);
    BOOST_TEST(p.window(t0 + spin_policy::contended_pause - microseconds(1)).count() == 0);
    for (int i = 0; i < 20; ++i) p.waited(microseconds(20));  // short waits do not end the pause
    BOOST_TEST(p.window(t0 + std::chrono::milliseconds(500)).count() == 0);
    // After it the spin is tried again.
    BOOST_TEST(p.window(t0 + spin_policy::contended_pause).count() == spin_policy::min_spin.count());
}

BOOST_AUTO_TEST_CASE(an_engine_sees_a_crowded_node_when_more_tasks_than_cores_run)
{
    context ctx;
    engine e(ctx, progress_mode::event);
    const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
    std::atomic<bool> stop{false};
    std::vector<std::thread> busy;
    for (long i = 0; i < cpus + 1; ++i)
        busy.emplace_back([&] {
            while (!stop.load(std::memory_order_relaxed)) {}
        });
    bool seen = false;
    for (int i = 0; i < 200 && !seen; ++i) {
        seen = e.crowded();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    stop = true;
    for (auto& t : busy) t.join();
    BOOST_TEST(seen, cpus + 1 << " busy threads and this one on " << cpus << " CPUs");
}

BOOST_AUTO_TEST_CASE(an_engine_whose_waits_last_long_sleeps_without_spinning)
{
    context ctx;
    engine e(ctx, progress_mode::event);
    for (int i = 0; i < 5; ++i) {
        const auto start = std::chrono::steady_clock::now();
        BOOST_TEST(!e.wait_until([] { return false; }, start + std::chrono::milliseconds(3)));
        BOOST_TEST((std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(3)));
    }
    BOOST_TEST(e.spins() == 0u);
    BOOST_TEST(e.sleeps() >= 5u);
}

BOOST_AUTO_TEST_CASE(a_wait_whose_condition_holds_returns_at_once)
{
    context ctx;
    engine e(ctx, progress_mode::event);
    BOOST_TEST(e.wait_until([] { return true; }, std::chrono::steady_clock::now() + std::chrono::seconds(5)));
    BOOST_TEST(e.spins() == 0u);
    BOOST_TEST(e.sleeps() == 0u);
}
