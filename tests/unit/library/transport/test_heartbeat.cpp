#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE heartbeat
#include <boost/test/unit_test.hpp>

#include "library/transport/heartbeat.hpp"

using namespace pstrain::ucx;
using namespace std::chrono_literals;

namespace {
heartbeat_config every(std::chrono::milliseconds interval, int misses = 6)
{
    heartbeat_config c;
    c.interval = interval;
    c.misses = misses;
    return c;
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_peer_heard_from_is_never_silent)
{
    const auto t0 = hb_clock::now();
    silence_tracker s(2, every(1s), t0);
    for (int i = 1; i <= 100; ++i) {
        const auto now = t0 + i * 500ms;
        s.heard(0, now);
        s.heard(1, now);
        BOOST_TEST(s.check(now).empty());
    }
    BOOST_TEST(!s.silent(0));
    BOOST_TEST(!s.silent(1));
}

BOOST_AUTO_TEST_CASE(a_peer_is_watched_from_its_first_heartbeat)
{
    // A worker loading its data after connecting sends nothing yet: it is
    // not silent; once it has sent one heartbeat, it is watched.
    const auto t0 = hb_clock::now();
    silence_tracker s(1, every(1s, 6), t0);
    BOOST_TEST(s.check(t0 + 500ms).empty());
    for (int i = 1; i <= 200; ++i) BOOST_TEST(s.check(t0 + i * 500ms).empty());
    BOOST_TEST(!s.silent(0));
    const auto t1 = t0 + 100s;
    s.heard(0, t1);
    std::vector<std::size_t> found;
    int ticks = 0;
    while (found.empty() && ticks < 100) found = s.check(t1 + ++ticks * 500ms);
    BOOST_TEST(found.size() == 1u);
    BOOST_TEST(ticks == 12);  // 6 s after its heartbeat
}

BOOST_AUTO_TEST_CASE(a_peer_silent_for_the_limit_is_found_once)
{
    const auto t0 = hb_clock::now();
    silence_tracker s(3, every(1s, 6), t0);
    s.heard(1, t0);
    std::vector<std::size_t> found;
    hb_clock::time_point when{};
    for (int i = 1; i <= 100 && found.empty(); ++i) {
        const auto now = t0 + i * 100ms;
        s.heard(0, now);
        s.heard(2, now);
        found = s.check(now);
        when = now;
    }
    BOOST_TEST_REQUIRE(found.size() == 1u);
    BOOST_TEST(found[0] == 1u);
    BOOST_TEST(s.silent(1));
    BOOST_TEST(!s.silent(0));
    BOOST_TEST((when - t0 == 6s));
    BOOST_TEST(s.silent_for(1).count() == 6000);
    // Found once: later checks do not report it again.
    BOOST_TEST(s.check(when + 100ms).empty());
    BOOST_TEST(s.silent(1));
}

BOOST_AUTO_TEST_CASE(time_spent_not_listening_does_not_count)
{
    // The task computed (or wrote a checkpoint) for 20 s: its peers' heartbeats
    // waited in the queue meanwhile; they are not silent when it comes back.
    const auto t0 = hb_clock::now();
    silence_tracker s(1, every(1s, 6), t0);
    s.heard(0, t0);
    BOOST_TEST(s.check(t0 + 500ms).empty());
    BOOST_TEST(s.check(t0 + 20s).empty());
    BOOST_TEST(s.check(t0 + 20s + 500ms).empty());
    BOOST_TEST(!s.silent(0));
    // ... but silence after that does.
    std::vector<std::size_t> found;
    for (int i = 1; i <= 100 && found.empty(); ++i) found = s.check(t0 + 20s + i * 200ms);
    BOOST_TEST(found.size() == 1u);
}

BOOST_AUTO_TEST_CASE(beats_are_due_once_per_interval)
{
    const auto t0 = hb_clock::now();
    silence_tracker s(1, every(1s), t0);
    BOOST_TEST(s.beat_due(t0));
    BOOST_TEST(!s.beat_due(t0 + 999ms));
    BOOST_TEST(s.beat_due(t0 + 1000ms));
    BOOST_TEST(!s.beat_due(t0 + 1500ms));
}

BOOST_AUTO_TEST_CASE(interval_0_turns_them_off)
{
    const auto t0 = hb_clock::now();
    silence_tracker s(1, every(0ms), t0);
    s.heard(0, t0);
    BOOST_TEST(!s.beat_due(t0));
    BOOST_TEST(s.check(t0 + 1h).empty());
    BOOST_TEST(!s.silent(0));
}

BOOST_AUTO_TEST_CASE(the_reason_names_the_silence_the_interval_and_the_address)
{
    auto text = silence_reason(31400ms, every(5s), "10.251.0.11");
    BOOST_TEST(
        text ==
        "silent for 31 s (heartbeats every 5 s, address 10.251.0.11): its node is unreachable or down, or the task "
        "is stopped; raise --heartbeat-interval if tasks compute or write for more than 30 s without a word");
    BOOST_TEST(silence_reason(3000ms, every(500ms), "").find("every 0.5 s)") != std::string::npos);
}
