// What the server-level tests share (test_server.cpp, test_membership.cpp,
// test_startup.cpp): exact values to train with, the servers' settings, and
// the steps a test's workers take over the in-process loopback.
#pragma once

#include "tests/unit/library/ps/loopback_job.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <string_view>
#include <thread>
#include <vector>

namespace pstrain::testing::server_cases {

using namespace pstrain::ps;
using namespace std::chrono_literals;

// Exact binary fractions, so that every expected value below is exact.
inline const std::vector<float> initial{1, 2, 3, 4, 5, 6};
inline const std::vector<float> g0{1, 0, 2, -2, 0.5f, 4};
inline const std::vector<float> g1{3, 2, 0, 2, 0.5f, -4};
// Their average is {2, 1, 1, 0, 0.5, 0}; SGD with learning rate 0.5:
inline const std::vector<float> after_one_step{0, 1.5f, 2.5f, 4, 4.75f, 6};  // initial - 0.5 * average
inline const std::vector<float> after_two_steps{-1, 1, 2, 4, 4.5f, 6};       // ... twice

inline server_config sync_config(int replicas = 0)
{
    server_config c;
    c.training.sync = true;
    c.training.replicas_to_aggregate = replicas;
    c.training.optimizer.kind = optimizer_kind::sgd;
    c.training.optimizer.learning_rate = 0.5f;
    c.shutdown_wait = 2s;
    return c;
}

inline server_config async_config()
{
    auto c = sync_config();
    c.training.sync = false;
    return c;
}

inline job_options sharing(bool share)
{
    job_options o;
    o.share_memory = share;
    return o;
}

// A job with `spares` spare PS tasks (server_config::spare).
inline job_options with_spares(int spares)
{
    job_options o;
    o.spares = spares;
    return o;
}

// The chief initialises the model with `values`, every other worker pulls it.
inline void start(ps_job& job, int workers, const std::vector<float>& values = initial)
{
    fill(job.chief().params(), values);
    job.chief().wait(job.chief().async_init());
    for (int w = 1; w < workers; ++w) job.worker(w).wait(job.worker(w).async_pull());
}

// A worker asks until a reply says training is done (the chief's shutdown
// may reach the PS after the worker's request).
inline void pull_until_done(client& c)
{
    for (int i = 0; i < 100 && !c.done(); ++i) c.wait(c.async_pull());
    BOOST_TEST(c.done(), "no reply said training is done");
}

// A push that every PS task holds: each one's activity waits for `request`
// (10 s at most for that) with worker w not among the peers it waits for,
// and the ticket is still open.
inline bool held_while(ps_job& job, client& c, std::size_t w, ticket t, std::string_view request)
{
    const auto holds = [&](int p) {
        const auto a = job.server(p).activity();
        return a.waiting && a.request.starts_with(request) &&
               std::find(a.peers.begin(), a.peers.end(), w) == a.peers.end();
    };
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    for (int p = 0; p < job.num_ps(); ++p)
        while (!holds(p)) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            std::this_thread::yield();
        }
    return !c.test(t);
}

// True once pred() holds, within 10 s: for a server's counters, which its
// thread updates after what a test can see (an activity, a reply).
template <class Pred>
bool eventually(Pred pred)
{
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::yield();
    }
    return true;
}

// A sync push held for its step: every PS has counted worker w's gradient
// and waits for the others'.
inline bool held_for_the_step(ps_job& job, client& c, std::size_t w, ticket t)
{
    return held_while(job, c, w, t, "the missing gradients of a sync step");
}

// An async push that the staleness bound holds: every PS has applied it and
// waits for the slowest workers' gradients, worker w's not among them.
inline bool held_by_the_bound(ps_job& job, client& c, std::size_t w, ticket t)
{
    return held_while(job, c, w, t, "the gradients of the slowest workers");
}

// One sync step of two workers: w0 pushes g0, w1 pushes g1, both get the reply.
inline void push_g0_and_g1(client& w0, client& w1)
{
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    const auto t0 = w0.async_push();
    const auto t1 = w1.async_push();
    w0.wait(t0);
    w1.wait(t1);
}

inline training_settings sgd_settings_for_the_bound()
{
    training_settings t;
    t.optimizer.kind = optimizer_kind::sgd;
    t.optimizer.learning_rate = 0.5f;
    return t;
}

inline server_config bounded_config(int max_staleness)
{
    auto c = async_config();
    c.training.max_staleness = max_staleness;
    return c;
}

// What every PS task of the job has counted.
inline std::vector<staleness_counters> staleness_of(ps_job& job)
{
    std::vector<staleness_counters> v;
    for (int p = 0; p < job.num_ps(); ++p) v.push_back(job.server(p).staleness());
    return v;
}

}  // namespace pstrain::testing::server_cases
