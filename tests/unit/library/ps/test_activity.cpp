// client::activity() and server::activity(): from another thread, what a
// client or server waits for (which peers, which request) and how far it
// has come, the facts a program's own watchdog names in its stall line.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE activity
#include <boost/test/unit_test.hpp>

#include "tests/unit/library/ps/loopback_job.hpp"

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace pstrain::ps;
using pstrain::testing::ps_job;
using namespace std::chrono_literals;

namespace {

// Polls `read` until `ok` holds of it (at most 5 s); returns the last look.
activity poll_until(const std::function<activity()>& read, const std::function<bool(const activity&)>& ok)
{
    auto a = read();
    for (int i = 0; i < 500 && !ok(a); ++i) {
        std::this_thread::sleep_for(10ms);
        a = read();
    }
    return a;
}

server_config sync_config()
{
    server_config c;
    c.training.sync = true;
    c.training.optimizer.kind = optimizer_kind::sgd;
    c.training.optimizer.learning_rate = 0.5f;
    c.shutdown_wait = 2s;
    return c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_client_names_the_ps_that_has_not_answered_its_hello)
{
    loopback_network net(1, 1);
    client_config cfg;
    cfg.num_params = 4;
    cfg.timeout = 10s;
    client c(net.worker(0), cfg);
    BOOST_TEST(!c.activity().waiting);
    std::thread t([&] {
        try {
            c.wait(c.async_pull());
        } catch (const pstrain::error&) {}
    });
    const auto a = poll_until([&] { return c.activity(); }, [](const activity& x) { return x.waiting; });
    BOOST_TEST(a.waiting);
    BOOST_TEST(a.peer_names == std::vector<std::string>{"ps 0"}, "peers: " << a.peer_names.size());
    BOOST_TEST(a.request.find("hello") != std::string::npos, a.request);
    BOOST_TEST(!a.ending);
    net.kill_ps(0);  // the wait fails and ends
    t.join();
    BOOST_TEST(!c.activity().waiting);
}

BOOST_AUTO_TEST_CASE(in_a_sync_step_the_server_names_the_worker_whose_gradient_is_missing_and_the_pusher_names_the_ps)
{
    ps_job job(1, 2, sync_config());
    auto& chief = job.chief();
    auto& other = job.worker(1);
    std::fill(chief.params().begin(), chief.params().end(), 1.0f);
    chief.wait(chief.async_init());
    other.wait(other.async_pull());
    const auto before = job.server(0).activity().progress;
    BOOST_TEST(before > 0u);
    BOOST_TEST(chief.activity().progress > 0u);

    // The chief's gradient arrives; the step waits for worker 1's.
    std::thread pusher([&] { chief.step(1); });
    const auto s = poll_until(
        [&] { return job.server(0).activity(); },
        [](const activity& x) { return x.waiting && x.request.find("missing gradients") != std::string::npos; });
    BOOST_TEST(s.request == "the missing gradients of a sync step (global step 0)");
    BOOST_TEST(s.peer_names == std::vector<std::string>{"worker 1"});
    BOOST_TEST(s.peers == std::vector<std::size_t>{1});
    BOOST_TEST(s.progress > before);  // the chief's push was handled

    const auto c = poll_until([&] { return chief.activity(); }, [](const activity& x) { return x.waiting; });
    BOOST_TEST(c.request == "the reply to push (global step 0)");
    BOOST_TEST(c.peer_names == std::vector<std::string>{"ps 0"});

    other.step(1);
    pusher.join();
    BOOST_TEST(!chief.activity().waiting);
    BOOST_TEST(chief.global_step() == 1u);
    const auto after = poll_until(
        [&] { return job.server(0).activity(); },
        [](const activity& x) { return x.waiting && x.request.find("(global step 1)") != std::string::npos; });
    BOOST_TEST(after.request == "the gradients of a sync step (global step 1)");
    BOOST_TEST(after.peer_names == (std::vector<std::string>{"worker 0", "worker 1"}));

    chief.shutdown();
    // Worker 1 has not had its last reply: the server's end of job is
    // bounded by shutdown_wait and says so.
    const auto end = poll_until([&] { return job.server(0).activity(); }, [](const activity& x) { return x.ending; });
    BOOST_TEST(end.ending);
    BOOST_TEST(end.peer_names == std::vector<std::string>{"worker 1"});
    other.wait(other.async_push(2));
    BOOST_TEST(job.finish(0).returned);
}
