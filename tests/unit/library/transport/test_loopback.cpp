// The in-process loopback transport: what the PS tests (and --standalone)
// rely on.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE loopback
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "pstrain/loopback.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

using namespace pstrain::ps;
using namespace std::chrono_literals;

namespace {

bool settled(transport& t, transfer& r, std::chrono::milliseconds within = 2s)
{
    return t.wait_until([&] { return r.complete(); }, clock::now() + within);
}

}  // namespace

BOOST_AUTO_TEST_CASE(peers_are_the_other_role_and_named_by_it)
{
    loopback_network net(2, 3);
    BOOST_TEST(net.ps(0).num_peers() == 3u);
    BOOST_TEST(net.worker(2).num_peers() == 2u);
    BOOST_TEST(net.ps(1).peer_name(2) == "worker 2");
    BOOST_TEST(net.worker(0).peer_name(1) == "ps 1");
    BOOST_CHECK_THROW(net.worker(0).send(2, channel::control, "x", 1), pstrain::error);
    BOOST_CHECK_THROW(loopback_network(0, 1), pstrain::error);
}

BOOST_AUTO_TEST_CASE(messages_arrive_in_order_on_each_channel_and_the_channels_are_apart)
{
    loopback_network net(1, 2);
    auto &w = net.worker(1), &ps = net.ps(0);
    for (std::uint32_t i = 0; i < 5; ++i) {
        std::uint32_t control = i, payload = 100 + i;
        w.send(0, channel::control, &control, sizeof control);
        w.send(0, channel::payload, &payload, sizeof payload);
    }
    const std::uint32_t other = 999;
    net.worker(0).send(0, channel::control, &other, sizeof other);  // another sender
    for (std::uint32_t i = 0; i < 5; ++i) {
        std::uint32_t got = 0;
        auto r = ps.recv(1, channel::payload, &got, sizeof got);
        BOOST_TEST_REQUIRE(r.complete());
        BOOST_TEST(got == 100 + i);
    }
    for (std::uint32_t i = 0; i < 5; ++i) {
        std::uint32_t got = 0;
        auto r = ps.recv(1, channel::control, &got, sizeof got);
        BOOST_TEST_REQUIRE(r.complete());
        BOOST_TEST(r.ok());
        BOOST_TEST(r.length() == sizeof got);
        BOOST_TEST(got == i);
    }
    std::uint32_t got = 0;
    auto r = ps.recv(0, channel::control, &got, sizeof got);
    BOOST_TEST(got == 999u);
}

BOOST_AUTO_TEST_CASE(receives_posted_first_are_matched_in_posting_order)
{
    loopback_network net(1, 1);
    auto &w = net.worker(0), &ps = net.ps(0);
    std::uint64_t a = 0, b = 0;
    auto ra = ps.recv(0, channel::control, &a, sizeof a);
    auto rb = ps.recv(0, channel::control, &b, sizeof b);
    BOOST_TEST(!ra.complete());
    BOOST_TEST(!rb.complete());
    const std::uint64_t first = 0x1111, second = 0x2222;
    auto s = w.send(0, channel::control, &first, sizeof first);
    BOOST_TEST(s.complete());
    BOOST_TEST(s.ok());
    BOOST_TEST(ra.complete());
    BOOST_TEST(!rb.complete());
    w.send(0, channel::control, &second, sizeof second);
    BOOST_TEST_REQUIRE(rb.complete());
    BOOST_TEST(a == first);
    BOOST_TEST(b == second);
}

BOOST_AUTO_TEST_CASE(thousands_of_messages_from_another_thread_arrive_in_order)
{
    loopback_network net(1, 1);
    std::thread sender([&] {
        for (std::uint32_t i = 0; i < 5000; ++i) net.worker(0).send(0, channel::control, &i, sizeof i);
    });
    std::uint32_t wrong = 0;
    for (std::uint32_t i = 0; i < 5000; ++i) {
        std::uint32_t got = ~0u;
        auto r = net.ps(0).recv(0, channel::control, &got, sizeof got);
        if (!settled(net.ps(0), r) || !r.ok() || got != i) ++wrong;
    }
    sender.join();
    BOOST_TEST(wrong == 0u);
}

BOOST_AUTO_TEST_CASE(a_message_longer_than_the_buffer_fails_the_receive)
{
    loopback_network net(1, 1);
    auto &w = net.worker(0), &ps = net.ps(0);
    const char eight[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    char small[4] = {0, 0, 0, 0};
    // Posted after the message came.
    w.send(0, channel::payload, eight, sizeof eight);
    auto after = ps.recv(0, channel::payload, small, sizeof small);
    BOOST_TEST_REQUIRE(after.complete());
    BOOST_TEST(!after.ok());
    BOOST_TEST(after.failure().find("8 bytes") != std::string::npos, after.failure());
    BOOST_TEST(small[0] == 0);  // nothing was written
    // Posted before it.
    auto before = ps.recv(0, channel::payload, small, sizeof small);
    BOOST_TEST(!before.complete());
    w.send(0, channel::payload, eight, sizeof eight);
    BOOST_TEST_REQUIRE(before.complete());
    BOOST_TEST(!before.ok());
    // The long message is gone; the next one arrives whole.
    w.send(0, channel::payload, eight, 3);
    auto next = ps.recv(0, channel::payload, small, sizeof small);
    BOOST_TEST_REQUIRE(next.complete());
    BOOST_TEST(next.ok());
    BOOST_TEST(next.length() == 3u);
    BOOST_TEST(small[2] == 3);
}

BOOST_AUTO_TEST_CASE(a_cancelled_receive_fails_and_takes_no_message)
{
    loopback_network net(1, 1);
    auto &w = net.worker(0), &ps = net.ps(0);
    int x = 0, y = 0;
    auto r = ps.recv(0, channel::control, &x, sizeof x);
    r.cancel();
    BOOST_TEST_REQUIRE(r.complete());
    BOOST_TEST(!r.ok());
    BOOST_TEST(r.failure().find("cancel") != std::string::npos, r.failure());
    const int value = 42;
    w.send(0, channel::control, &value, sizeof value);
    BOOST_TEST(x == 0);
    auto r2 = ps.recv(0, channel::control, &y, sizeof y);
    BOOST_TEST_REQUIRE(r2.complete());
    BOOST_TEST(r2.ok());
    BOOST_TEST(y == 42);
    r2.cancel();  // a completed receive stays completed
    BOOST_TEST(r2.ok());
}

BOOST_AUTO_TEST_CASE(a_killed_peer_fails_pending_and_later_operations)
{
    loopback_network net(2, 2);
    auto& w = net.worker(0);
    int x = 0;
    auto pending = w.recv(0, channel::control, &x, sizeof x);
    auto other = w.recv(1, channel::control, &x, sizeof x);
    BOOST_TEST(!w.failed(0));
    // Killed from another thread while this one waits.
    std::thread killer([&] {
        std::this_thread::sleep_for(50ms);
        net.kill_ps(0);
    });
    const auto t0 = clock::now();
    BOOST_TEST(settled(w, pending, 5s));
    killer.join();
    BOOST_TEST((clock::now() - t0 < 2s));
    BOOST_TEST(!pending.ok());
    BOOST_TEST(!pending.failure().empty());
    BOOST_TEST(w.failed(0));
    BOOST_TEST(!w.failure(0).empty());
    BOOST_TEST(net.worker(1).failed(0));
    BOOST_TEST(!w.failed(1));
    BOOST_TEST(!other.complete());  // PS 1 is alive
    other.cancel();
    // Later operations with the dead PS fail at once.
    auto s = w.send(0, channel::control, &x, sizeof x);
    BOOST_TEST_REQUIRE(s.complete());
    BOOST_TEST(!s.ok());
    auto r = w.recv(0, channel::control, &x, sizeof x);
    BOOST_TEST_REQUIRE(r.complete());
    BOOST_TEST(!r.ok());
    // A dead worker, seen from a PS.
    net.kill_worker(1);
    BOOST_TEST(net.ps(1).failed(1));
    BOOST_TEST(!net.ps(1).failed(0));
}

BOOST_AUTO_TEST_CASE(wait_until_returns_false_at_the_deadline)
{
    loopback_network net(1, 1);
    const auto t0 = clock::now();
    BOOST_TEST(!net.ps(0).wait_until([] { return false; }, t0 + 50ms));
    BOOST_TEST((clock::now() - t0 >= 50ms));
    BOOST_TEST((clock::now() - t0 < 2s));
    BOOST_TEST(net.ps(0).wait_until([] { return true; }, t0));
}

BOOST_AUTO_TEST_CASE(mapping_the_networks_rkey_gives_the_same_address)
{
    loopback_network net(1, 1), elsewhere(1, 1);
    auto memory = net.worker(0).allocate(64);
    BOOST_TEST_REQUIRE(memory->size() == 64u);
    auto* bytes = static_cast<unsigned char*>(memory->data());
    BOOST_TEST(std::all_of(bytes, bytes + 64, [](unsigned char c) { return c == 0; }));  // zero-filled
    const auto key = memory->packed_rkey();
    auto mapped = net.ps(0).map(0, key);
    BOOST_TEST_REQUIRE((mapped != nullptr));
    const auto address = reinterpret_cast<std::uintptr_t>(memory->data());
    BOOST_TEST(mapped->local_pointer(address, 64) == memory->data());
    BOOST_TEST(mapped->local_pointer(address + 16, 48) == static_cast<void*>(bytes + 16));
    static_cast<float*>(mapped->local_pointer(address, 8))[1] = 2.5f;
    BOOST_TEST(static_cast<float*>(memory->data())[1] == 2.5f);
    // Bytes past the memory the rkey names are refused, and so is an rkey
    // naming memory the network did not hand out.
    const auto refused = [](auto&& f) {
        try {
            f();
        } catch (const pstrain::error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    BOOST_TEST(
        refused([&] { mapped->local_pointer(address + 16, 49); }) ==
        fmt::format("49 bytes at {:#x} are not inside the 64 bytes at {:#x} its rkey names", address + 16, address));
    BOOST_TEST(!refused([&] { mapped->local_pointer(address - 4, 4); }).empty());
    BOOST_TEST(!refused([&] { mapped->local_pointer(address + 8, ~std::size_t(0)); }).empty());
    auto forged = key;
    forged[16] = 65;  // the size: 65 bytes
    BOOST_TEST(refused([&] { net.ps(0).map(0, forged); }) ==
               fmt::format("an rkey names 65 bytes at {:#x}, which this network did not hand out", address));
    // Another network's rkey, or a malformed one, does not map.
    BOOST_TEST((elsewhere.ps(0).map(0, key) == nullptr));
    std::vector<std::uint8_t> longer = key;
    longer.push_back(0);
    BOOST_TEST((net.ps(0).map(0, longer) == nullptr));
    BOOST_TEST((net.ps(0).map(0, {}) == nullptr));
}

// A link that holds a worker's messages in flight (a congested or lossy
// one): its sends complete, nothing arrives; closing the worker's transport
// lets them arrive, in order, before the peer sees it gone; closing it with
// force drops them, as UCX flushes or discards what it queued.
BOOST_AUTO_TEST_CASE(held_messages_arrive_when_the_sender_closes_and_are_dropped_when_it_closes_with_force)
{
    for (const bool force : {false, true}) {
        BOOST_TEST_CONTEXT("close(" << force << ")")
        {
            loopback_network net(2, 1);
            auto &w = net.worker(0), &ps = net.ps(1);
            std::uint32_t got = 0;
            auto early = ps.recv(0, channel::control, &got, sizeof got);  // posted before the messages
            net.hold_messages(0, 1);
            std::vector<transfer> sends;
            for (std::uint32_t i : {7u, 8u}) sends.push_back(w.send(1, channel::control, &i, sizeof i));
            const std::uint32_t to_ps0 = 5;
            w.send(0, channel::control, &to_ps0, sizeof to_ps0);  // another link: not held
            for (auto& s : sends) BOOST_TEST((s.complete() && s.ok()));
            BOOST_TEST(!settled(ps, early, 50ms));
            std::uint32_t at_ps0 = 0;
            BOOST_TEST(net.ps(0).recv(0, channel::control, &at_ps0, sizeof at_ps0).complete());
            BOOST_TEST(at_ps0 == 5u);
            BOOST_TEST(!ps.failed(0));

            w.close(force);
            BOOST_TEST_REQUIRE(settled(ps, early));
            BOOST_TEST(ps.failed(0));
            if (force) {
                BOOST_TEST(!early.ok());
            } else {
                BOOST_TEST_REQUIRE(early.ok());
                BOOST_TEST(got == 7u);
                std::uint32_t second = 0;
                auto late = ps.recv(0, channel::control, &second, sizeof second);
                BOOST_TEST_REQUIRE((late.complete() && late.ok()));
                BOOST_TEST(second == 8u);
            }
            std::uint32_t more = 0;
            auto after = ps.recv(0, channel::control, &more, sizeof more);
            BOOST_TEST((after.complete() && !after.ok()));
        }
    }
    loopback_network net(1, 1);
    BOOST_CHECK_THROW(net.hold_messages(1, 0), pstrain::error);
    BOOST_CHECK_THROW(net.hold_messages(0, 1), pstrain::error);
}
