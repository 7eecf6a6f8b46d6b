#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE worker_link
#include <boost/test/unit_test.hpp>

#include "pstrain/loopback.hpp"
#include "library/ps/worker_link.hpp"

#include <chrono>
#include <deque>
#include <vector>

using namespace pstrain::ps;

namespace {

// A PS's links to two workers over a loopback network; the test plays the workers.
struct two_workers {
    two_workers()
        : net(1, 2), activity({"worker 0", "worker 1"}), profile(server_phase_names()),
          links(net.ps(0), activity, profile)
    {
        for (std::size_t i = 0; i < links.size(); ++i) links[i].slot = float_buffer(16, 0);
    }
    // Worker w sends `f` (and `payload`) to the PS.
    void send(int w, const wire::frame& f, const std::vector<float>& payload = {})
    {
        frames.push_back(f);
        if (!payload.empty())
            sends.push_back(net.worker(w).send(0, channel::payload, payload.data(), payload.size() * 4));
        sends.push_back(net.worker(w).send(0, channel::control, &frames.back(), sizeof f));
    }
    // The next frame the PS sends worker w.
    wire::frame reply_to(int w)
    {
        wire::frame f;
        auto r = net.worker(w).recv(0, channel::control, &f, sizeof f);
        net.worker(w).wait_until([&] { return r.complete(); }, clock::now() + std::chrono::seconds(5));
        BOOST_TEST_REQUIRE(r.complete());
        return f;
    }
    loopback_network net;
    activity_recorder activity;
    server_clock profile;
    worker_links links;
    std::deque<wire::frame> frames;  // sends read them until complete
    std::vector<transfer> sends;
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_posted_link_is_ready_once_its_frame_and_payload_are_here, two_workers)
{
    links.post(1);
    send(1, wire::encode(wire::push{0, 0, 2, 0, 0}, 8), {1.5f, 2.5f});
    BOOST_TEST(links.wait_for(1, "a push", [&] { return links[1].ready(); }));
    BOOST_TEST(links[1].in.kind == static_cast<std::uint16_t>(wire::kind::push));
    BOOST_TEST((std::vector<float>(links[1].slot.begin(), links[1].slot.begin() + 2) == std::vector<float>{1.5f, 2.5f}),
               boost::test_tools::per_element());
    links.received(links[1].in);
    links.reply(1, wire::encode(wire::welcome{}));
    BOOST_TEST(links.bytes_in() == 64u + 8u);
    BOOST_TEST(links.bytes_out() == 64u);
}

BOOST_FIXTURE_TEST_CASE(a_wait_for_a_lost_worker_ends_and_says_so, two_workers)
{
    links.post(0);
    net.kill_worker(0);
    BOOST_TEST(!links.wait_for(0, "its next message", [&] { return false; }));
}

BOOST_FIXTURE_TEST_CASE(a_refusal_reaches_the_worker_and_its_next_message_is_awaited, two_workers)
{
    links.post(1);
    send(1, wire::encode(wire::pull{0, 99, 0}));
    BOOST_TEST_REQUIRE(links.wait_for(1, "a pull", [&] { return links[1].ready(); }));
    links[1].posted = false;
    links.refuse(1, wire::refusal_of(wire::refusal_code::bad_range, 0, 99));
    const auto f = reply_to(1);
    BOOST_TEST_REQUIRE(f.kind == static_cast<std::uint16_t>(wire::kind::refusal));
    BOOST_TEST(wire::body<wire::refusal>(f).detail_end == 99u);
    BOOST_TEST(links[1].posted);  // the reply posted its next receive
}

BOOST_FIXTURE_TEST_CASE(values_sent_as_a_payload_arrive_with_their_frame_and_done_tells_the_worker_to_leave,
                        two_workers)
{
    const std::vector<float> values{4, 5, 6};
    values_reply v;
    v.part = {1, 4};
    v.status = wire::values_status::done;
    v.step = 7;
    v.values = values;
    v.buffer = values.data();
    std::vector<float> got(3);
    auto payload = net.worker(0).recv(0, channel::payload, got.data(), 12);
    links.reply_values(0, v);
    const auto f = reply_to(0);
    net.worker(0).wait_until([&] { return payload.complete(); }, clock::now() + std::chrono::seconds(5));
    BOOST_TEST_REQUIRE(f.kind == static_cast<std::uint16_t>(wire::kind::values));
    const auto m = wire::body<wire::values>(f);
    BOOST_TEST(m.step == 7u);
    BOOST_TEST(m.status == static_cast<std::uint32_t>(wire::values_status::done));
    BOOST_TEST(f.payload_bytes == 12u);
    BOOST_TEST(got == values, boost::test_tools::per_element());
    BOOST_TEST(links[0].told_done);
    BOOST_TEST(!links.everyone_told());
    links[1].lost = true;
    BOOST_TEST(links.everyone_told());
    BOOST_TEST(links.live() == 1);
}

// A PS under load always has some worker's message waiting: the search for
// the next one goes round, so a worker with a high index is served, and its
// loss seen, as soon as one with a low index (64 async workers on two cores
// would otherwise name a killed worker 63 only after training ended).
BOOST_FIXTURE_TEST_CASE(wait_any_goes_round_the_workers_so_none_waits_behind_a_busy_one, two_workers)
{
    links.post(0);
    links.post(1);
    send(0, wire::encode(wire::pull{0, 8, 0}));
    send(1, wire::encode(wire::pull{0, 8, 0}));
    BOOST_TEST_REQUIRE(links.wait_for(1, "a pull", [&] { return links[0].ready() && links[1].ready(); }));
    const auto far = clock::now() + std::chrono::seconds(5);
    // Both stay ready (neither is taken): each call returns the other one.
    BOOST_TEST(links.wait_any(far).value_or(9) == 0u);
    BOOST_TEST(links.wait_any(far).value_or(9) == 1u);
    BOOST_TEST(links.wait_any(far).value_or(9) == 0u);
    net.kill_worker(1);
    BOOST_TEST(links.wait_any(far).value_or(9) == 1u);
}
