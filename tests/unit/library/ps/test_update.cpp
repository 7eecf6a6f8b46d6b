// A server's update of a large shard: spread over its update threads,
// fused with the sync step's aggregation and the copies into mapped
// buffers, it must give exactly the values of the plain, one-pass update;
// and the profile of the steps it served.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE update
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "tests/unit/library/ps/loopback_job.hpp"
#include "library/ps/update_pool.hpp"
#include "common/denormals.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

using namespace pstrain::ps;
using pstrain::testing::job_options;
using pstrain::testing::ps_job;
namespace bdata = boost::unit_test::data;
using namespace std::chrono_literals;

namespace {

// Above the size from which a server spreads its updates over threads
// (2^18), and not a multiple of its 4096-element blocks.
constexpr std::uint64_t large = (1u << 18) + 4097;

// Deterministic values of every sign and scale, from (seed, i).
float value(std::uint64_t seed, std::uint64_t i)
{
    std::uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (i * 0xBF58476D1CE4E5B9ull);
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (static_cast<float>(x % 20001) - 10000.0f) / 1000.0f;
}

std::vector<float> values(std::uint64_t seed, std::uint64_t n)
{
    std::vector<float> v(n);
    for (std::uint64_t i = 0; i < n; ++i) v[i] = value(seed, i);
    return v;
}

server_config adam(bool sync, int threads)
{
    server_config c;
    c.training.sync = sync;
    c.training.optimizer.kind = optimizer_kind::adam;
    c.training.optimizer.learning_rate = 0.01f;
    c.update_threads = threads;
    c.shutdown_wait = 2s;
    return c;
}

bool bitwise_equal(std::span<const float> a, const std::vector<float>& b)
{
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), b.size() * sizeof(float)) == 0;
}

}  // namespace

BOOST_DATA_TEST_CASE(the_pool_runs_every_block_exactly_once, bdata::make({1, 2, 4}) * bdata::make({0, 1, 7, 1000}),
                     threads, blocks)
{
    update_pool pool(threads);
    BOOST_TEST(pool.threads() == threads);
    std::vector<std::atomic<int>> seen(static_cast<std::size_t>(blocks));
    for (int run = 0; run < 50; ++run)
        pool.run(static_cast<std::size_t>(blocks), [&](std::size_t b) { seen[b].fetch_add(1); });
    for (int b = 0; b < blocks; ++b) BOOST_TEST(seen[static_cast<std::size_t>(b)].load() == 50, "block " << b);
}

// Sync, Adam, two workers: after each step both workers hold exactly the
// values of one update with the mean of their gradients (summed in worker
// order), whatever the threads and whether the PS writes into the
// workers' memory or sends messages.
BOOST_DATA_TEST_CASE(a_large_sync_step_equals_the_plain_update, bdata::make({1, 3}) * bdata::make({true, false}),
                     threads, share)
{
    job_options o;
    o.num_params = large;
    o.share_memory = share;
    ps_job job(1, 2, adam(true, threads), {}, o);
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    auto expected = values(0, large);
    std::copy(expected.begin(), expected.end(), w0.params().begin());
    w0.wait(w0.async_init());
    w1.wait(w1.async_pull());

    const auto cfg = adam(true, 1).training.optimizer;
    std::vector<float> state(2 * large, 0.0f), mean(large);
    for (std::uint64_t step = 1; step <= 3; ++step) {
        const auto g0 = values(10 * step, large), g1 = values(10 * step + 1, large);
        std::copy(g0.begin(), g0.end(), w0.grads().begin());
        std::copy(g1.begin(), g1.end(), w1.grads().begin());
        const auto t0 = w0.async_push(), t1 = w1.async_push();
        w0.wait(t0);
        w1.wait(t1);
        for (std::uint64_t i = 0; i < large; ++i) mean[i] = (0.0f + g0[i] + g1[i]) * 0.5f;
        apply_update(cfg, expected, mean, state, step);
        BOOST_TEST(bitwise_equal(w0.params(), expected), "worker 0's values after step " << step);
        BOOST_TEST(bitwise_equal(w1.params(), expected), "worker 1's values after step " << step);
    }
    w0.shutdown();
    for (int i = 0; i < 100 && !w1.done(); ++i) w1.wait(w1.async_pull());
    BOOST_TEST_REQUIRE(job.finish().returned);
    BOOST_TEST(job.server(0).global_step() == 3u);
}

BOOST_DATA_TEST_CASE(a_large_async_update_equals_the_plain_update, bdata::make({1, 3}), threads)
{
    job_options o;
    o.num_params = large;
    ps_job job(1, 1, adam(false, threads), {}, o);
    auto& w = job.chief();
    auto expected = values(5, large);
    std::copy(expected.begin(), expected.end(), w.params().begin());
    w.wait(w.async_init());
    const auto cfg = adam(false, 1).training.optimizer;
    std::vector<float> state(2 * large, 0.0f);
    for (std::uint64_t step = 1; step <= 3; ++step) {
        const auto g = values(20 + step, large);
        std::copy(g.begin(), g.end(), w.grads().begin());
        w.wait(w.async_push());
        apply_update(cfg, expected, g, state, step);
        BOOST_TEST(bitwise_equal(w.params(), expected), "values after update " << step);
    }
    w.shutdown();
    BOOST_TEST_REQUIRE(job.finish().returned);
}

// Denormals (server_config::flush_denormals): the server flushes them on
// the thread that runs it and on its update threads, whatever the mode of
// the program's threads (kept here).  A gradient of 1e-38 gives Adam a
// first moment of 1e-39, a denormal: flushed, it is 0 and a value of 0
// stays 0; kept, the value moves by lr * 1e-38 / epsilon = 1e-32.  The
// shard is large enough for the update threads, and every one of its
// values must stay 0.
BOOST_DATA_TEST_CASE(the_server_flushes_denormals_on_its_thread_and_its_update_threads,
                     bdata::make({true, false}) * bdata::make({true, false}), sync, flush)
{
    if (!pstrain::can_flush_denormals()) return;
    pstrain::scoped_denormal_mode program(pstrain::denormal_mode::keep);
    job_options o;
    o.num_params = large;
    auto config = adam(sync, 3);
    config.flush_denormals = flush;
    std::atomic<int> steps{0}, flushed_steps{0};
    server_hooks hooks;
    hooks.step_completed = [&](std::uint64_t) {
        ++steps;
        if (pstrain::current_denormal_mode() == pstrain::denormal_mode::flush) ++flushed_steps;
        return false;
    };
    ps_job job(1, 1, config, hooks, o);
    auto& w = job.chief();
    std::fill(w.params().begin(), w.params().end(), 0.0f);
    w.wait(w.async_init());
    for (int step = 0; step < 2; ++step) {
        std::fill(w.grads().begin(), w.grads().end(), 1e-38f);
        w.wait(w.async_push());
    }
    const auto moved = std::count_if(w.params().begin(), w.params().end(), [](float v) { return v != 0.0f; });
    BOOST_TEST(moved == (flush ? 0 : static_cast<long>(large)));
    BOOST_TEST(steps.load() >= 2);
    BOOST_TEST(flushed_steps.load() == (flush ? steps.load() : 0));
    w.shutdown();
    BOOST_TEST_REQUIRE(job.finish().returned);
}

// The profile counts the steps and names its phases; the time of a phase
// grows where the work is.
BOOST_AUTO_TEST_CASE(the_profiles_count_steps_and_time_their_phases)
{
    job_options o;
    o.num_params = large;
    ps_job job(1, 1, adam(true, 1), {}, o);
    auto& w = job.chief();
    w.wait(w.async_init());
    const auto issued_at_start = w.profile().phases.at(2).entered;
    for (int step = 0; step < 5; ++step) {
        std::this_thread::sleep_for(20ms);  // the worker's own work, outside the client's calls
        w.wait(w.async_push());
    }
    const auto c = w.profile();
    BOOST_TEST(c.steps == 5u);
    std::vector<std::string> names;
    for (const auto& p : c.phases) names.emplace_back(p.name);
    BOOST_TEST(names == (std::vector<std::string>{"outside", "start", "issue", "wait", "check"}),
               boost::test_tools::per_element());
    BOOST_TEST(c.phases[0].time >= 100ms, "outside: " << c.phases[0].time.count() << " ns");
    BOOST_TEST(c.phases[3].time > 0ns);
    BOOST_TEST(c.phases[2].entered - issued_at_start == 5u);  // five pushes

    w.shutdown();
    BOOST_TEST_REQUIRE(job.finish().returned);
    const auto s = job.server(0).profile();
    BOOST_TEST(s.steps == 5u);
    names.clear();
    for (const auto& p : s.phases) names.emplace_back(p.name);
    BOOST_TEST(names == (std::vector<std::string>{"start", "wait", "requests", "update", "reply", "drain", "sparse"}),
               boost::test_tools::per_element());
    BOOST_TEST(s.phases[1].time >= 90ms, "wait: " << s.phases[1].time.count() << " ns");  // for the worker's 20 ms
    BOOST_TEST(s.phases[3].entered == 5u);
    BOOST_TEST(s.phases[3].time > 0ns);
}
