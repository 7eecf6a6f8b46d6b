#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE ucx_wait
#include <boost/test/unit_test.hpp>

#include "library/transport/ucx.hpp"

#include <chrono>

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
    // A yield that returns at once (a core of its own): the spin goes on.
    BOOST_TEST(!p.yielded(microseconds(3), t0));
    BOOST_TEST(p.window(t0).count() > 0);
    // One that was away 60 us (another task ran on this core): the spin
    // ends, and no wait spins for contended_pause.
    BOOST_TEST(p.yielded(microseconds(60), t0));
    BOOST_TEST(p.contended() == 1u);
    BOOST_TEST(p.window(t0).count() == 0);
    BOOST_TEST(p.window(t0 + spin_policy::contended_pause - microseconds(1)).count() == 0);
    for (int i = 0; i < 20; ++i) p.waited(microseconds(20));  // short waits do not end the pause
    BOOST_TEST(p.window(t0 + std::chrono::milliseconds(500)).count() == 0);
    // After it the spin is tried again.
    BOOST_TEST(p.window(t0 + spin_policy::contended_pause).count() == spin_policy::min_spin.count());
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
