// The parameter server's semantics, over the in-process loopback: each
// server runs in a thread, the test drives the workers' clients in the
// order it chooses.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE server
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "tests/unit/library/ps/loopback_job.hpp"
#include "tests/unit/library/ps/server_cases.hpp"
#include "tests/unit/stderr_capture.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

using namespace pstrain::ps;
using pstrain::testing::fill;
using pstrain::testing::job_options;
using pstrain::testing::ps_job;
using pstrain::testing::to_vector;
using namespace pstrain::testing::server_cases;
namespace bdata = boost::unit_test::data;
using namespace std::chrono_literals;

namespace {

// What the hooks saw, from the servers' threads.
struct recorder {
    std::mutex mu;
    std::vector<std::uint64_t> steps;
    struct snapshot_seen {
        std::uint64_t step = 0;
        int index = -1, num_ps = 0;
        shard_range range;
        std::uint64_t num_params = 0;
        optimizer_kind optimizer = optimizer_kind::sgd;
        std::vector<float> values, state;
        std::uint64_t updates = 0;
        std::vector<std::uint64_t> positions;
    };
    std::vector<snapshot_seen> snapshots;
    bool fail_snapshots = false;
    struct restore_seen {
        std::uint64_t step = 0;
        shard_range range;
        std::uint64_t num_params = 0;
    };
    std::vector<restore_seen> restores;

    server_hooks hooks(std::uint64_t end_at = 0)
    {
        server_hooks h;
        h.step_completed = [this, end_at](std::uint64_t step) {
            std::lock_guard lock(mu);
            steps.push_back(step);
            return end_at > 0 && step >= end_at;
        };
        h.snapshot = [this](const shard_snapshot& s) {
            std::lock_guard lock(mu);
            if (fail_snapshots) throw pstrain::error("the test's snapshot hook fails");
            snapshots.push_back({s.step,
                                 s.index,
                                 s.num_ps,
                                 s.range,
                                 s.num_params,
                                 s.optimizer,
                                 to_vector(s.values),
                                 to_vector(s.state),
                                 s.updates,
                                 {s.positions.begin(), s.positions.end()}});
            return snapshot_receipt{1000 + static_cast<std::uint64_t>(s.index),
                                    0xc0ffee00 + static_cast<std::uint64_t>(s.index)};
        };
        return h;
    }
    std::vector<snapshot_seen> take_snapshots()
    {
        std::lock_guard lock(mu);
        auto s = std::move(snapshots);
        snapshots.clear();
        std::sort(s.begin(), s.end(), [](auto& a, auto& b) { return a.index < b.index; });
        return s;
    }
};

std::vector<float> part(const std::vector<float>& v, shard_range r)
{
    return {v.begin() + static_cast<std::ptrdiff_t>(r.begin), v.begin() + static_cast<std::ptrdiff_t>(r.end)};
}

}  // namespace

namespace pstrain::ps {
// For Boost.Test's data test cases.
std::ostream& operator<<(std::ostream& o, wire_precision p) { return o << name_of(p); }
}  // namespace pstrain::ps

// ------------------------------------------------------------------ sync

BOOST_DATA_TEST_CASE(sync_step_applies_sgd_to_the_average_of_every_workers_gradient, bdata::make({false, true}), share)
{
    ps_job job(1, 2, sync_config(), {}, sharing(share));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    BOOST_TEST(to_vector(w1.params()) == initial, boost::test_tools::per_element());
    BOOST_TEST(w0.mapped(0) == share);
    BOOST_TEST(w1.mapped(0) == share);

    for (const auto& expected : {after_one_step, after_two_steps}) {
        fill(w0.grads(), g0);
        const auto t0 = w0.async_push();
        BOOST_TEST(held_for_the_step(job, w0, 0, t0), "one gradient of two completed a step");
        fill(w1.grads(), g1);
        const auto t1 = w1.async_push();
        w0.wait(t0);
        w1.wait(t1);
        BOOST_TEST(to_vector(w0.params()) == expected, boost::test_tools::per_element());
        BOOST_TEST(to_vector(w1.params()) == expected, boost::test_tools::per_element());
    }
    BOOST_TEST(w0.global_step() == 2u);
    BOOST_TEST(w1.global_step() == 2u);
    BOOST_TEST(!w0.done());

    w0.shutdown();
    pull_until_done(w1);
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(!end.threw, end.what);
    BOOST_TEST((end.outcome == server_outcome::done));
    BOOST_TEST(job.server(0).global_step() == 2u);
    BOOST_TEST(job.server(0).stale_gradients() == 0u);
}

BOOST_DATA_TEST_CASE(backup_workers_a_step_takes_the_first_replicas_to_aggregate_gradients, bdata::make({false, true}),
                     share)
{
    // 3 workers, 2 gradients a step: worker 1 is a backup that never pushes.
    ps_job job(1, 3, sync_config(2), {}, sharing(share));
    auto& w0 = job.chief();
    auto& w2 = job.worker(2);
    start(job, 3);
    fill(w0.grads(), g0);
    const auto t0 = w0.async_push();
    BOOST_TEST(held_for_the_step(job, w0, 0, t0), "one gradient of two completed a step");
    fill(w2.grads(), g1);
    const auto t2 = w2.async_push();
    w0.wait(t0);
    w2.wait(t2);
    BOOST_TEST(to_vector(w0.params()) == after_one_step, boost::test_tools::per_element());
    BOOST_TEST(to_vector(w2.params()) == after_one_step, boost::test_tools::per_element());
    BOOST_TEST(w2.global_step() == 1u);
    // The backup worker, a step behind, still gets the new values.
    job.worker(1).wait(job.worker(1).async_pull());
    BOOST_TEST(to_vector(job.worker(1).params()) == after_one_step, boost::test_tools::per_element());
    BOOST_TEST(job.worker(1).global_step() == 1u);

    w0.shutdown();
    pull_until_done(job.worker(1));
    pull_until_done(w2);
    BOOST_TEST((job.finish().outcome == server_outcome::done));
}

BOOST_DATA_TEST_CASE(a_stale_gradient_is_dropped_and_answered_with_the_current_values, bdata::make({false, true}),
                     share)
{
    ps_job job(1, 3, sync_config(2), {}, sharing(share));
    auto& w0 = job.chief();
    auto &w1 = job.worker(1), &w2 = job.worker(2);
    start(job, 3);  // worker 2 holds the values of step 0
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    auto t0 = w0.async_push();
    auto t1 = w1.async_push();
    w0.wait(t0);
    w1.wait(t1);

    // Worker 2's gradient was computed on step 0's values: the PS is at 1.
    fill(w2.grads(), {100, 100, 100, 100, 100, 100});
    w2.wait(w2.async_push());  // answered at once, not kept for step 2
    BOOST_TEST(to_vector(w2.params()) == after_one_step, boost::test_tools::per_element());
    BOOST_TEST(w2.global_step() == 1u);

    // Step 2 is workers 0 and 1's alone: worker 2's gradient is not in it.
    t0 = w0.async_push();
    t1 = w1.async_push();
    w0.wait(t0);
    w1.wait(t1);
    BOOST_TEST(to_vector(w0.params()) == after_two_steps, boost::test_tools::per_element());
    BOOST_TEST(w0.global_step() == 2u);

    w0.shutdown();
    pull_until_done(w1);
    pull_until_done(w2);
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(job.server(0).stale_gradients() == 1u);
    BOOST_TEST(job.server(0).global_step() == 2u);
}

// With backup workers a step's buckets could aggregate other workers'
// gradients each: a push of part of the shard is refused.
BOOST_AUTO_TEST_CASE(sync_with_backup_workers_refuses_a_push_of_part_of_the_shard)
{
    ps_job job(1, 2, sync_config(1));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w1.grads(), g1);
    try {
        w1.wait(w1.async_push({0, 3}));
        BOOST_ERROR("a push of [0, 3) of a shard of 6 was accepted in sync mode");
    } catch (const pstrain::peer_error& e) {
        BOOST_TEST(e.peer() == "ps 0");
        BOOST_TEST(std::string(e.what()).find("whole-shard") != std::string::npos, e.what());
    }
    // The PS goes on with the chief: one gradient a step, and not worker 1's.
    fill(w0.grads(), g0);
    w0.wait(w0.async_push());
    BOOST_TEST(to_vector(w0.params()) == (std::vector<float>{0.5f, 2, 2, 5, 4.75f, 4}),
               boost::test_tools::per_element());
    job.net().kill_worker(1);
    w0.shutdown();
    BOOST_TEST((job.finish().outcome == server_outcome::done));
}

// The overlapped step's cases: Adam on n values over two PS tasks, four
// buckets (the last first, one across the shards' boundary), a start and
// each worker's gradient of each step.
struct bucket_case {
    static constexpr std::uint64_t n = 10007;
    server_config cfg;
    job_options o;
    const std::vector<shard_range> buckets{{7000, n}, {3000, 7000}, {1200, 3000}, {0, 1200}};
    std::vector<float> init = std::vector<float>(n);

    bucket_case(server_config base, bool share, wire_precision precision) : cfg(base), o(sharing(share))
    {
        cfg.training.optimizer.kind = optimizer_kind::adam;
        cfg.training.optimizer.learning_rate = 0.01f;
        cfg.precision = precision;
        o.num_params = n;
        o.precisions = {precision, precision};
        for (std::uint64_t i = 0; i < n; ++i) init[i] = 0.01f * static_cast<float>(i % 89) - 0.4f;
    }
    // A job whose PS 0 ends between the second and third buckets, started.
    void start_job(ps_job& job) const
    {
        BOOST_TEST_REQUIRE(job.chief().partition().size() == 2u);
        BOOST_TEST_REQUIRE((job.chief().partition()[0].end > 3000 && job.chief().partition()[0].end < 7000));
        start(job, 2, init);
    }
    void fill_gradient(client& c, int w, int step) const
    {
        auto g = c.grads();
        for (std::uint64_t i = 0; i < n; ++i)
            g[i] = 0.001f * static_cast<float>((i * (3 + 4 * w) + step) % 101) - 0.05f;
    }
};

// The overlapped step's buckets (test_served_shard checks the arithmetic):
// two workers push each step's gradient bucket by bucket, the last one
// first, one bucket across the two PS tasks' boundary, each worker all of
// its buckets before it waits for any; they reach the values of a job of
// whole pushes, bit for bit, with Adam, fp32 and bf16 on the wire, through
// shared memory and messages, and the global step counts steps, not
// buckets.
BOOST_DATA_TEST_CASE(sync_buckets_reach_the_values_of_whole_pushes_bit_for_bit,
                     bdata::make({false, true}) * bdata::make({wire_precision::fp32, wire_precision::bf16}), share,
                     precision)
{
    const bucket_case k(sync_config(), share, precision);
    const auto run = [&](bool bucketed) {
        ps_job job(2, 2, k.cfg, {}, k.o);
        k.start_job(job);
        for (int step = 0; step < 5; ++step) {
            std::vector<ticket> tickets;
            for (int w = 0; w < 2; ++w) {
                auto& c = job.worker(w);
                k.fill_gradient(c, w, step);
                if (!bucketed) tickets.push_back(c.async_push());
                else
                    for (const auto& b : k.buckets) tickets.push_back(c.async_push(b));
            }
            const std::size_t per_worker = tickets.size() / 2;
            for (std::size_t t = 0; t < tickets.size(); ++t)
                job.worker(static_cast<int>(t / per_worker)).wait(tickets[t]);
            BOOST_TEST(job.chief().global_step() == static_cast<std::uint64_t>(step + 1));
            BOOST_TEST(to_vector(job.worker(1).params()) == to_vector(job.chief().params()),
                       boost::test_tools::per_element());
        }
        auto values = to_vector(job.chief().params());
        job.chief().shutdown();
        pull_until_done(job.worker(1));
        const auto end = job.finish();
        BOOST_TEST(!end.threw, end.what);
        BOOST_TEST(job.server(0).global_step() == 5u);
        BOOST_TEST(job.server(1).global_step() == 5u);
        return values;
    };
    const auto whole = run(false);
    BOOST_TEST(whole != k.init, "the steps changed nothing");
    BOOST_TEST(run(true) == whole, boost::test_tools::per_element());
}

// A worker that found inf or NaN pushes every bucket of its step with
// skip: no bucket of the step is applied on any PS (the others' buckets
// neither), the global step stays, and the next step is applied as the
// first would have been.
BOOST_DATA_TEST_CASE(sync_a_bucketed_step_that_one_worker_skips_applies_no_bucket, bdata::make({false, true}), share)
{
    ps_job job(2, 2, sync_config(), {}, sharing(share));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    const std::vector<shard_range> buckets{{4, 6}, {1, 4}, {0, 1}};
    const auto bucketed_step = [&](bool skip) {
        fill(w0.grads(), g0);
        fill(w1.grads(), g1);
        std::vector<ticket> t0, t1;
        for (const auto& b : buckets) t0.push_back(w0.async_push(b));
        for (const auto& b : buckets) t1.push_back(w1.async_push(b, 0, skip));
        for (const auto t : t0) w0.wait(t);
        for (const auto t : t1) w1.wait(t);
    };
    bucketed_step(true);
    for (client* w : std::vector<client*>{&w0, &w1}) {
        BOOST_TEST(to_vector(w->params()) == initial, boost::test_tools::per_element());
        BOOST_TEST(w->global_step() == 0u);
    }
    bucketed_step(false);
    BOOST_TEST(to_vector(w0.params()) == after_one_step, boost::test_tools::per_element());
    BOOST_TEST(to_vector(w1.params()) == after_one_step, boost::test_tools::per_element());
    BOOST_TEST(w0.global_step() == 1u);
    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST((job.finish().outcome == server_outcome::done));
}

// Every worker buckets its gradient alike: a bucket that overlaps another
// worker's bucket of the step without being it is refused, naming both,
// instead of leaving the step waiting for ever.
BOOST_AUTO_TEST_CASE(sync_a_bucket_that_overlaps_another_workers_is_refused)
{
    ps_job job(1, 2, sync_config());
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    const auto t0 = w0.async_push({3, 6});
    BOOST_TEST(held_for_the_step(job, w0, 0, t0), "a bucket of one worker of two was applied");
    try {
        w1.wait(w1.async_push({2, 6}));
        BOOST_ERROR("a bucket [2, 6) over the step's [3, 6) was accepted");
    } catch (const pstrain::peer_error& e) {
        BOOST_TEST(e.peer() == "ps 0");
        BOOST_TEST(std::string(e.what()).find("overlaps the bucket [3, 6) of the same sync step") != std::string::npos,
                   e.what());
    }
    job.net().kill_worker(1);
    w0.shutdown();
    job.finish();
}

// A worker that found inf or NaN in its gradient (a loss scaler's
// overflow) pushes it as skipped: the step it joins applies nothing on any
// PS, the global step stays, every contributor gets the values as they are,
// and the next step is applied as the first would have been.
BOOST_DATA_TEST_CASE(sync_a_skipped_push_skips_its_whole_step_on_every_ps, bdata::make({false, true}), share)
{
    ps_job job(2, 2, sync_config(), {}, sharing(share));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    auto t0 = w0.async_push();
    auto t1 = w1.async_push(w1.everything(), 0, true);
    w0.wait(t0);
    w1.wait(t1);
    for (client* w : std::vector<client*>{&w0, &w1}) {
        BOOST_TEST(to_vector(w->params()) == initial, boost::test_tools::per_element());
        BOOST_TEST(w->global_step() == 0u);
    }
    t0 = w0.async_push();
    t1 = w1.async_push();
    w0.wait(t0);
    w1.wait(t1);
    BOOST_TEST(to_vector(w0.params()) == after_one_step, boost::test_tools::per_element());
    BOOST_TEST(to_vector(w1.params()) == after_one_step, boost::test_tools::per_element());
    BOOST_TEST(w0.global_step() == 1u);
    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST((job.finish().outcome == server_outcome::done));
    BOOST_TEST(job.server(0).stale_gradients() == 0u);
}

BOOST_AUTO_TEST_CASE(async_a_skipped_push_is_not_applied_and_the_next_one_is)
{
    ps_job job(1, 2, async_config(), {}, sharing(false));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w1.grads(), g1);
    w1.wait(w1.async_push(w1.everything(), 0, true));
    BOOST_TEST(to_vector(w1.params()) == initial, boost::test_tools::per_element());
    BOOST_TEST(w1.global_step() == 0u);
    fill(w0.grads(), g0);
    w0.wait(w0.async_push());
    BOOST_TEST(w0.global_step() == 1u);
    BOOST_TEST(to_vector(w0.params()) != initial);
    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST((job.finish().outcome == server_outcome::done));
}

// ----------------------------------------------------------------- async

BOOST_DATA_TEST_CASE(async_applies_each_push_on_arrival, bdata::make({false, true}), share)
{
    ps_job job(1, 2, async_config(), {}, sharing(share));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w0.grads(), g0);
    w0.wait(w0.async_push());
    BOOST_TEST(to_vector(w0.params()) == (std::vector<float>{0.5f, 2, 2, 5, 4.75f, 4}),
               boost::test_tools::per_element());
    BOOST_TEST(w0.global_step() == 1u);
    // Worker 1's gradient, computed on step 0's values, is applied too.
    fill(w1.grads(), g1);
    w1.wait(w1.async_push());
    BOOST_TEST(to_vector(w1.params()) == (std::vector<float>{-1, 1, 2, 4, 4.5f, 6}), boost::test_tools::per_element());
    BOOST_TEST(w1.global_step() == 2u);
    w1.wait(w1.async_push());
    BOOST_TEST(to_vector(w1.params()) == (std::vector<float>{-2.5f, 0, 2, 3, 4.25f, 8}),
               boost::test_tools::per_element());
    BOOST_TEST(w1.global_step() == 3u);
    w0.wait(w0.async_pull());
    BOOST_TEST(to_vector(w0.params()) == to_vector(w1.params()), boost::test_tools::per_element());
    BOOST_TEST(w0.global_step() == 3u);

    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST_REQUIRE(job.finish().returned);
    BOOST_TEST(job.server(0).global_step() == 3u);
}

BOOST_DATA_TEST_CASE(async_push_and_pull_of_a_sub_range_touch_only_that_range, bdata::make({false, true}), share)
{
    // Tensors [0, 2) [2, 6) [6, 8) over 2 PS holding [0, 4) and [4, 8).
    auto o = sharing(share);
    o.num_params = 8;
    o.tensor_sizes = {2, 4, 2};
    ps_job job(2, 2, async_config(), {}, o);
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    const std::vector<float> v{1, 2, 3, 4, 5, 6, 7, 8};
    start(job, 2, v);
    BOOST_TEST((w0.tensor(1) == shard_range{2, 6}));

    fill(w0.grads(), std::vector<float>(8, 2.0f));  // a gradient everywhere; only tensor 1's part goes
    w0.wait(w0.async_push(w0.tensor(1)));
    const std::vector<float> updated{1, 2, 2, 3, 4, 5, 7, 8};
    BOOST_TEST(to_vector(w0.params()) == updated, boost::test_tools::per_element());

    // A pull of [1, 3) writes only there.
    fill(w1.params(), std::vector<float>(8, -100.0f));
    w1.wait(w1.async_pull({1, 3}));
    BOOST_TEST(to_vector(w1.params()) == (std::vector<float>{-100, 2, 2, -100, -100, -100, -100, -100}),
               boost::test_tools::per_element());
    w1.wait(w1.async_pull());
    BOOST_TEST(to_vector(w1.params()) == updated, boost::test_tools::per_element());

    // A push inside PS 1's range is one update there, none on PS 0.
    fill(w1.grads(), std::vector<float>(8, 4.0f));
    w1.wait(w1.async_push({4, 6}));
    w1.wait(w1.async_pull());
    BOOST_TEST(to_vector(w1.params()) == (std::vector<float>{1, 2, 2, 3, 2, 3, 7, 8}),
               boost::test_tools::per_element());
    BOOST_TEST(w1.global_step() == 1u);  // PS 0's

    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST_REQUIRE(job.finish(0).returned);
    BOOST_TEST_REQUIRE(job.finish(1).returned);
    BOOST_TEST(job.server(0).global_step() == 1u);
    BOOST_TEST(job.server(1).global_step() == 2u);
}

// The async overlapped step: each worker pushes a step's gradient bucket
// by bucket (the last first, one bucket across the two PS tasks'
// boundary); every bucket is applied on arrival as the step's one Adam
// update.  Two workers that take turns reach the values of whole pushes
// bit for bit, with fp32 and bf16 on the wire, through shared memory and
// messages; the global step and each worker's counters count steps, not
// buckets.
BOOST_DATA_TEST_CASE(async_buckets_reach_the_values_of_whole_pushes_bit_for_bit,
                     bdata::make({false, true}) * bdata::make({wire_precision::fp32, wire_precision::bf16}), share,
                     precision)
{
    const bucket_case k(async_config(), share, precision);
    const auto run = [&](bool bucketed) {
        ps_job job(2, 2, k.cfg, {}, k.o);
        k.start_job(job);
        for (int step = 0; step < 6; ++step) {
            const int w = step % 2;
            auto& c = job.worker(w);
            k.fill_gradient(c, w, step);
            std::vector<ticket> tickets;
            if (!bucketed) tickets.push_back(c.async_push());
            else
                for (const auto& b : k.buckets) tickets.push_back(c.async_push_bucket(b));
            for (const auto t : tickets) c.wait(t);
            BOOST_TEST(c.global_step() == static_cast<std::uint64_t>(step + 1));
        }
        job.chief().wait(job.chief().async_pull());
        auto values = to_vector(job.chief().params());
        const auto stats = job.chief().stats();
        for (const auto& ps : stats) {
            BOOST_TEST(ps.step == 6u);
            for (const auto& worker : ps.workers) BOOST_TEST(worker.gradients == 3u);
        }
        job.chief().shutdown();
        pull_until_done(job.worker(1));
        const auto end = job.finish();
        BOOST_TEST(!end.threw, end.what);
        return values;
    };
    const auto whole = run(false);
    BOOST_TEST(whole != k.init, "the steps changed nothing");
    BOOST_TEST(run(true) == whole, boost::test_tools::per_element());
}

// A bucket's reply comes as soon as it is applied, before the step's other
// buckets are in; the step counts once the buckets cover the shard.
BOOST_DATA_TEST_CASE(async_a_bucket_is_answered_at_once_and_the_step_counts_when_the_shard_is_covered,
                     bdata::make({false, true}), share)
{
    ps_job job(1, 2, async_config(), {}, sharing(share));
    auto& w0 = job.chief();
    start(job, 2);
    fill(w0.grads(), g0);
    w0.wait(w0.async_push_bucket({3, 6}));
    // SGD 0.5 on [3, 6) alone, and no step yet.
    BOOST_TEST(to_vector(w0.params()) == (std::vector<float>{1, 2, 3, 5, 4.75f, 4}), boost::test_tools::per_element());
    BOOST_TEST(job.server(0).global_step() == 0u);
    w0.wait(w0.async_push_bucket({0, 3}));
    BOOST_TEST(to_vector(w0.params()) == (std::vector<float>{0.5f, 2, 2, 5, 4.75f, 4}),
               boost::test_tools::per_element());
    BOOST_TEST(w0.global_step() == 1u);
    // A bucket that overlaps the step's own begins the next step: [0, 3)
    // alone, then [0, 3) again counts it as a step of its own.
    w0.wait(w0.async_push_bucket({0, 3}));
    BOOST_TEST(job.server(0).global_step() == 1u);
    w0.wait(w0.async_push_bucket({0, 3}));
    BOOST_TEST(job.server(0).global_step() == 2u);
    w0.shutdown();
    pull_until_done(job.worker(1));
    BOOST_TEST(!job.finish().threw);
}

// A worker that found inf or NaN pushes every bucket of its step with
// skip: none is applied, and the step counts as one skipped gradient.
BOOST_AUTO_TEST_CASE(async_a_bucketed_step_that_skips_applies_nothing_and_counts_once)
{
    ps_job job(2, 2, async_config(), {}, sharing(false));
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w1.grads(), g1);
    const std::vector<shard_range> buckets{{4, 6}, {1, 4}, {0, 1}};
    std::vector<ticket> tickets;
    for (const auto& b : buckets) tickets.push_back(w1.async_push_bucket(b, 0, true));
    for (const auto t : tickets) w1.wait(t);
    BOOST_TEST(to_vector(w1.params()) == initial, boost::test_tools::per_element());
    BOOST_TEST(w1.global_step() == 0u);
    for (const auto& ps : w1.stats()) BOOST_TEST(ps.workers[1].gradients == 1u);
    job.chief().shutdown();
    pull_until_done(w1);
    for (int p = 0; p < 2; ++p) BOOST_TEST(!job.finish(p).threw);
}

// With a staleness bound a step's earlier buckets are answered at once and
// the reply of the bucket that ends it is the one held.
BOOST_AUTO_TEST_CASE(async_the_staleness_bound_holds_the_reply_of_the_bucket_that_ends_the_step)
{
    ps_job job(1, 2, bounded_config(0));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w0.grads(), g0);
    w0.wait(w0.async_push_bucket({3, 6}));
    const auto last = w0.async_push_bucket({0, 3});
    BOOST_TEST_REQUIRE(held_by_the_bound(job, w0, 0, last));
    BOOST_TEST(job.server(0).global_step() == 1u);
    fill(w1.grads(), g1);
    w1.wait(w1.async_push());
    w0.wait(last);
    // The held reply of [0, 3) brings both gradients there, initial - 0.5 *
    // (g0 + g1); [3, 6) is as its reply brought it before worker 1 pushed.
    BOOST_TEST(to_vector(w0.params()) == (std::vector<float>{-1, 1, 2, 5, 4.75f, 4}), boost::test_tools::per_element());
    BOOST_TEST(job.server(0).staleness().replies_held == 1u);
    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST(!job.finish().threw);
}

BOOST_AUTO_TEST_CASE(two_ps_tasks_split_the_vector_as_make_partition_says)
{
    recorder rec;
    job_options o;
    o.num_params = 7;
    ps_job job(2, 1, async_config(), rec.hooks(), o);
    auto& w0 = job.chief();
    const std::vector<float> v{1, 2, 3, 4, 5, 6, 7};
    start(job, 1, v);
    BOOST_TEST((w0.partition() == make_partition(7, 2)));

    const auto taken = w0.snapshot(0);
    BOOST_TEST_REQUIRE(taken.size() == 2u);
    BOOST_TEST((taken[1].outcome == snapshot_result::status::taken));
    const auto seen = rec.take_snapshots();
    BOOST_TEST_REQUIRE(seen.size() == 2u);
    // make_partition(7, 2): [0, 3) and [3, 7).
    BOOST_TEST((seen[0].range == shard_range{0, 3}));
    BOOST_TEST((seen[1].range == shard_range{3, 7}));
    BOOST_TEST(seen[0].values == (std::vector<float>{1, 2, 3}), boost::test_tools::per_element());
    BOOST_TEST(seen[1].values == (std::vector<float>{4, 5, 6, 7}), boost::test_tools::per_element());
    BOOST_TEST(seen[1].num_ps == 2);

    // [2, 4) meets both shards: each updates its part.
    fill(w0.grads(), std::vector<float>(7, 2.0f));
    w0.wait(w0.async_push({2, 4}));
    w0.wait(w0.async_pull());
    BOOST_TEST(to_vector(w0.params()) == (std::vector<float>{1, 2, 2, 3, 5, 6, 7}), boost::test_tools::per_element());
    w0.shutdown();
    BOOST_TEST_REQUIRE(job.finish(0).returned);
    BOOST_TEST_REQUIRE(job.finish(1).returned);
    BOOST_TEST(job.server(0).global_step() == 1u);
    BOOST_TEST(job.server(1).global_step() == 1u);
}

// ------------------------------------------------------- moving averages

// A tensor of kind moving_average (a batch normalization's moving mean or
// variance) gets no optimizer: the PS adds the step's average of the
// pushed deltas.  Its range [2, 4) crosses the two PS tasks' shards; the
// chief's hello tells both.
BOOST_DATA_TEST_CASE(sync_adds_the_average_delta_to_moving_average_tensors_without_the_optimizer,
                     bdata::make({false, true}), share)
{
    auto o = sharing(share);
    o.tensor_sizes = {2, 2, 2};
    o.tensor_kinds = {client_config::tensor_kind::trainable, client_config::tensor_kind::moving_average,
                      client_config::tensor_kind::trainable};
    ps_job job(2, 2, sync_config(), {}, o);
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    auto t0 = w0.async_push();
    auto t1 = w1.async_push();
    w0.wait(t0);
    w1.wait(t1);
    w0.wait(w0.async_pull());
    // The average is {2, 1, 1, 0, 0.5, 0}: SGD (learning rate 0.5) on
    // elements 0, 1, 4, 5; elements 2 and 3 are 3 + 1 and 4 + 0.
    BOOST_TEST(to_vector(w0.params()) == (std::vector<float>{0, 1.5f, 4, 4, 4.75f, 6}),
               boost::test_tools::per_element());
    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST((job.finish(0).outcome == server_outcome::done));
    BOOST_TEST((job.finish(1).outcome == server_outcome::done));
}

BOOST_AUTO_TEST_CASE(a_kind_for_each_tensor_or_none)
{
    pstrain::ps::loopback_network net(1, 1);
    client_config c;
    c.num_params = 6;
    c.tensor_sizes = {3, 3};
    c.tensor_kinds = {client_config::tensor_kind::moving_average};
    BOOST_CHECK_EXCEPTION(client(net.worker(0), c), pstrain::error, [](const pstrain::error& e) {
        return std::string(e.what()).find("1 tensor kinds for 2 tensors") != std::string::npos;
    });
}

// ------------------------------------------------------------------ stats

BOOST_DATA_TEST_CASE(async_stats_count_each_workers_gradients_and_their_staleness, bdata::make({false, true}), share)
{
    ps_job job(1, 2, async_config(), {}, sharing(share));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);             // both hold the values of step 0
    w0.wait(w0.async_push());  // on step 0 at step 0: staleness 0, now step 1
    w1.wait(w1.async_push());  // on step 0 at step 1: 1, now step 2
    w1.wait(w1.async_push());  // on step 2 at step 2: 0, now step 3
    w0.wait(w0.async_push());  // on step 1 at step 3: 2, now step 4

    const auto stats = w1.stats();  // any worker may ask
    BOOST_TEST_REQUIRE(stats.size() == 1u);
    const auto& s = stats[0];
    BOOST_TEST(s.step == 4u);
    BOOST_TEST_REQUIRE(s.workers.size() == 2u);
    BOOST_TEST(s.workers[0].gradients == 2u);
    BOOST_TEST(s.workers[0].staleness_sum == 2u);
    BOOST_TEST(s.workers[0].staleness_max == 2u);
    BOOST_TEST(s.workers[1].gradients == 2u);
    BOOST_TEST(s.workers[1].staleness_sum == 1u);
    BOOST_TEST(s.workers[1].staleness_max == 1u);
    BOOST_TEST(s.workers[0].stale == 0u);
    if (!share) {
        // 64-byte frames; the model is 6 floats (24 bytes).  In: 2 hellos,
        // init + 24, a pull, 4 pushes + 24, this stats request.  Out: 2
        // welcomes, 6 values replies + 24 (this reply is not counted yet).
        BOOST_TEST(s.bytes_received == 2 * 64u + 88u + 64u + 4 * 88u + 64u);
        BOOST_TEST(s.bytes_sent == 2 * 64u + 6 * 88u);
    } else {
        // Gradients are read from and values written into the mapped buffers: counted too.
        BOOST_TEST(s.bytes_received >= 2 * 64u + 88u + 64u + 4 * 88u + 64u);
        BOOST_TEST(s.bytes_sent >= 2 * 64u + 6 * 88u);
    }
    // The counters move on with training.
    w0.wait(w0.async_push());
    const auto later = w0.stats();
    BOOST_TEST(later[0].workers[0].gradients == 3u);
    BOOST_TEST(later[0].bytes_received > s.bytes_received);
    BOOST_TEST(later[0].bytes_sent > s.bytes_sent);

    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST((job.finish().outcome == server_outcome::done));
}

BOOST_AUTO_TEST_CASE(sync_stats_count_aggregated_and_stale_gradients_on_every_ps)
{
    // 3 workers, 2 gradients a step: worker 2's late gradient is stale.
    ps_job job(2, 3, sync_config(2), {}, sharing(false));
    auto& w0 = job.chief();
    auto &w1 = job.worker(1), &w2 = job.worker(2);
    start(job, 3);
    auto t0 = w0.async_push();
    auto t1 = w1.async_push();
    w0.wait(t0);
    w1.wait(t1);
    w2.wait(w2.async_push());  // computed on step 0, the PS tasks are at 1

    const auto stats = w0.stats();
    BOOST_TEST_REQUIRE(stats.size() == 2u);
    for (const auto& s : stats) {
        BOOST_TEST(s.step == 1u);
        BOOST_TEST_REQUIRE(s.workers.size() == 3u);
        BOOST_TEST(s.workers[0].gradients == 1u);
        BOOST_TEST(s.workers[1].gradients == 1u);
        BOOST_TEST(s.workers[2].gradients == 0u);
        BOOST_TEST(s.workers[2].stale == 1u);
        BOOST_TEST(s.workers[0].staleness_max == 0u);
    }
    w0.shutdown();
    pull_until_done(w1);
    pull_until_done(w2);
    BOOST_TEST((job.finish().outcome == server_outcome::done));
}

// ------------------------------------------------------------------ hooks

// An async step cut short (a bucket that overlaps its own): the step before
// counts, with the staleness of the values it was computed on, and when it
// is the last step of training the new bucket is not applied.
BOOST_AUTO_TEST_CASE(async_a_step_cut_short_counts_with_its_own_staleness_and_may_end_training)
{
    recorder rec;
    ps_job job(1, 2, async_config(), rec.hooks(2));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w1.grads(), g1);
    w1.wait(w1.async_push());  // step 1: worker 0's values below are one step old
    fill(w0.grads(), g0);
    w0.wait(w0.async_push_bucket({3, 6}));  // computed on step 0's values, half of the shard
    const auto before = to_vector(w0.params());
    w0.wait(w0.async_push_bucket({3, 6}));  // overlaps: the step before counts, step 2 ends training
    BOOST_TEST(w0.done());
    BOOST_TEST(to_vector(w0.params()) == before, boost::test_tools::per_element());
    for (const auto& ps : w0.stats()) {
        BOOST_TEST(ps.step == 2u);
        BOOST_TEST(ps.workers[0].gradients == 1u);
        BOOST_TEST(ps.workers[0].staleness_max == 1u, "staleness of the step computed on step 0's values at step 1");
    }
    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST(!job.finish().threw);
}

BOOST_AUTO_TEST_CASE(the_step_completed_hook_ends_training_at_the_step_it_decides)
{
    recorder rec;
    ps_job job(1, 2, sync_config(), rec.hooks(2));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    BOOST_TEST(!w0.done());
    for (int step = 1; step <= 2; ++step) {
        push_g0_and_g1(w0, w1);
        BOOST_TEST(w0.done() == (step == 2), "after step " << step);
        BOOST_TEST(w1.done() == (step == 2), "after step " << step);
    }
    BOOST_TEST(!w0.stopped());
    // Once done, a push is answered at once and not applied.
    w0.wait(w0.async_push());
    BOOST_TEST(to_vector(w0.params()) == after_two_steps, boost::test_tools::per_element());
    BOOST_TEST(w0.global_step() == 2u);
    w0.shutdown();
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST((end.outcome == server_outcome::done));
    std::lock_guard lock(rec.mu);
    BOOST_TEST(rec.steps == (std::vector<std::uint64_t>{0, 1, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_hook_that_ends_training_at_the_start_makes_the_first_reply_done)
{
    std::vector<std::uint64_t> steps;  // read after the server ended
    server_hooks ends;
    ends.step_completed = [&](std::uint64_t step) {
        steps.push_back(step);
        return true;
    };
    ps_job job(1, 1, async_config(), ends);
    start(job, 1);
    BOOST_TEST(job.chief().done());
    BOOST_TEST(job.chief().global_step() == 0u);
    job.chief().shutdown();
    BOOST_TEST((job.finish().outcome == server_outcome::done));
    BOOST_TEST(steps == (std::vector<std::uint64_t>{0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_snapshot_hook_gets_the_shard_and_its_receipt_comes_back_to_the_chief)
{
    recorder rec;
    auto c = sync_config();
    c.training.optimizer.kind = optimizer_kind::momentum;
    c.training.optimizer.momentum = 0.5f;
    ps_job job(2, 2, c, rec.hooks());
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    const auto t0 = w0.async_push(11);
    const auto t1 = w1.async_push(22);
    w0.wait(t0);
    w1.wait(t1);
    BOOST_TEST(to_vector(w0.params()) == after_one_step,
               boost::test_tools::per_element());  // momentum's first step is SGD's

    const auto taken = w0.snapshot(1);
    BOOST_TEST_REQUIRE(taken.size() == 2u);
    for (std::uint64_t p = 0; p < 2; ++p) {
        BOOST_TEST((taken[p].outcome == snapshot_result::status::taken));
        BOOST_TEST(taken[p].step == 1u);
        BOOST_TEST(taken[p].bytes == 1000 + p);
        BOOST_TEST(taken[p].checksum == 0xc0ffee00 + p);
    }
    const auto seen = rec.take_snapshots();
    BOOST_TEST_REQUIRE(seen.size() == 2u);
    const std::vector<float> average{2, 1, 1, 0, 0.5f, 0};  // momentum's accumulator after one step
    for (int p = 0; p < 2; ++p) {
        const auto& s = seen[static_cast<std::size_t>(p)];
        const auto range = make_partition(6, 2)[static_cast<std::size_t>(p)];
        BOOST_TEST(s.index == p);
        BOOST_TEST(s.step == 1u);
        BOOST_TEST((s.range == range));
        BOOST_TEST(s.num_params == 6u);
        BOOST_TEST((s.optimizer == optimizer_kind::momentum));
        BOOST_TEST(s.values == part(after_one_step, range), boost::test_tools::per_element());
        BOOST_TEST(s.state == part(average, range), boost::test_tools::per_element());
        BOOST_TEST(s.updates == 1u);
        BOOST_TEST(s.positions == (std::vector<std::uint64_t>{11, 22}), boost::test_tools::per_element());
    }

    // Sync: a gradient waiting for step 2 when the chief asks for step 1's
    // snapshot is not in it, so its position is not either (a resumed
    // worker would skip that batch).
    fill(w1.grads(), g1);
    const auto waiting = w1.async_push(23);
    BOOST_TEST(held_for_the_step(job, w1, 1, waiting));
    BOOST_TEST_REQUIRE(w0.snapshot(1).size() == 2u);
    for (const auto& s : rec.take_snapshots())
        BOOST_TEST(s.positions == (std::vector<std::uint64_t>{11, 22}), boost::test_tools::per_element());
    fill(w0.grads(), g0);
    const auto t0b = w0.async_push(12);
    w0.wait(t0b);
    w1.wait(waiting);
    BOOST_TEST_REQUIRE(w0.snapshot(2).size() == 2u);
    for (const auto& s : rec.take_snapshots())
        BOOST_TEST(s.positions == (std::vector<std::uint64_t>{12, 23}), boost::test_tools::per_element());

    // Sync: a snapshot at a step the shards have left is refused with theirs.
    const auto old = w0.snapshot(0);
    BOOST_TEST_REQUIRE(old.size() == 2u);
    BOOST_TEST((old[0].outcome == snapshot_result::status::moved_on));
    BOOST_TEST(old[0].step == 2u);
    BOOST_TEST(rec.take_snapshots().empty());

    // A hook that cannot store it: the chief hears it failed.
    {
        std::lock_guard lock(rec.mu);
        rec.fail_snapshots = true;
    }
    const auto failed = w0.snapshot(2);  // the step the shards are at
    BOOST_TEST_REQUIRE(failed.size() == 2u);
    BOOST_TEST((failed[0].outcome == snapshot_result::status::failed));
    BOOST_TEST((failed[1].outcome == snapshot_result::status::failed));

    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST((job.finish(0).outcome == server_outcome::done));
    BOOST_TEST((job.finish(1).outcome == server_outcome::done));
}

BOOST_AUTO_TEST_CASE(the_restore_hooks_state_is_what_every_worker_pulls)
{
    recorder rec;
    const std::vector<float> values{10, 20, 30, 40, 50, 60}, state{2, 0, -2, 4, 0, 1};
    auto hooks = rec.hooks();
    hooks.restore = [&](std::uint64_t step, shard_range range, std::uint64_t n) {
        {
            std::lock_guard lock(rec.mu);
            rec.restores.push_back({step, range, n});
        }
        shard_state s;
        s.values = part(values, range);
        s.state = part(state, range);
        s.updates = 7;
        s.positions = {5, 9};
        return s;
    };
    auto c = sync_config();
    c.training.optimizer.kind = optimizer_kind::momentum;
    c.training.optimizer.momentum = 0.5f;
    ps_job job(2, 2, c, hooks);
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    fill(w0.params(), std::vector<float>(6, -1.0f));
    BOOST_TEST(!w0.restored_step().has_value());
    w0.wait(w0.async_restore(4));
    BOOST_TEST(to_vector(w0.params()) == values, boost::test_tools::per_element());
    BOOST_TEST((w0.restored_step() == std::optional<std::uint64_t>(4)));
    BOOST_TEST(w0.global_step() == 4u);
    w1.wait(w1.async_pull());
    BOOST_TEST(to_vector(w1.params()) == values, boost::test_tools::per_element());
    BOOST_TEST((w1.restored_step() == std::optional<std::uint64_t>(4)));
    BOOST_TEST(w1.global_step() == 4u);
    {
        std::lock_guard lock(rec.mu);
        BOOST_TEST_REQUIRE(rec.restores.size() == 2u);
        std::sort(rec.restores.begin(), rec.restores.end(),
                  [](auto& a, auto& b) { return a.range.begin < b.range.begin; });
        BOOST_TEST(rec.restores[0].step == 4u);
        BOOST_TEST((rec.restores[0].range == shard_range{0, 3}));
        BOOST_TEST((rec.restores[1].range == shard_range{3, 6}));
        BOOST_TEST(rec.restores[1].num_params == 6u);
        BOOST_TEST(rec.steps == (std::vector<std::uint64_t>{4, 4}), boost::test_tools::per_element());
    }

    // The restored state, positions and update count are the shard's.
    const auto taken = w0.snapshot(4);
    BOOST_TEST((taken.at(0).outcome == snapshot_result::status::taken));
    auto seen = rec.take_snapshots();
    BOOST_TEST_REQUIRE(seen.size() == 2u);
    BOOST_TEST(seen[0].state == (std::vector<float>{2, 0, -2}), boost::test_tools::per_element());
    BOOST_TEST(seen[1].positions == (std::vector<std::uint64_t>{5, 9}), boost::test_tools::per_element());
    BOOST_TEST(seen[1].updates == 7u);

    // A step goes on from them: accumulator 0.5 * state + average, values - 0.5 * accumulator.
    push_g0_and_g1(w0, w1);
    BOOST_TEST(to_vector(w1.params()) == (std::vector<float>{8.5f, 19.5f, 30, 39, 49.75f, 59.75f}),
               boost::test_tools::per_element());
    BOOST_TEST(w1.global_step() == 5u);

    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST(job.finish(0).returned);
    BOOST_TEST(job.finish(1).returned);
}

// ----------------------------------------------------------- the ending

BOOST_DATA_TEST_CASE(the_chiefs_shutdown_reaches_a_worker_waiting_for_its_step, bdata::make({false, true}), stop)
{
    ps_job job(1, 2, sync_config());
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w1.grads(), g1);
    const auto t1 = w1.async_push();  // waits for the chief's gradient, which never comes
    BOOST_TEST(held_for_the_step(job, w1, 1, t1));
    w0.shutdown(stop);
    w1.wait(t1);
    BOOST_TEST(w1.done());
    BOOST_TEST(w1.stopped() == stop);
    BOOST_TEST(to_vector(w1.params()) == initial, boost::test_tools::per_element());  // no step was applied
    BOOST_TEST(w1.global_step() == 0u);
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(!end.threw, end.what);
    BOOST_TEST((end.outcome == (stop ? server_outcome::stopped : server_outcome::done)));
}

BOOST_AUTO_TEST_CASE(a_stop_makes_every_other_worker_see_stopped)
{
    ps_job job(1, 3, async_config());
    start(job, 3);
    job.chief().shutdown(true);
    for (int w = 1; w < 3; ++w) {
        pull_until_done(job.worker(w));
        BOOST_TEST(job.worker(w).stopped(), "worker " << w);
    }
    BOOST_TEST((job.finish().outcome == server_outcome::stopped));
}

// ---------------------------------------------------------- the staleness bound

BOOST_AUTO_TEST_CASE(a_worker_more_than_max_staleness_pushes_ahead_waits_until_the_slowest_pushes)
{
    ps_job job(2, 2, bounded_config(1));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w0.grads(), g0);
    w0.wait(w0.async_push());         // one ahead of worker 1: within the bound
    const auto t0 = w0.async_push();  // two ahead: held on both PS tasks
    BOOST_TEST_REQUIRE(held_by_the_bound(job, w0, 0, t0));
    for (const auto& c : staleness_of(job)) {
        BOOST_TEST(c.largest_lead == 2u);
        BOOST_TEST(c.replies_held == 1u);
        BOOST_TEST(c.held_now == 1u);
    }
    std::this_thread::sleep_for(20ms);
    BOOST_TEST(!w0.test(t0), "the held reply came before the slowest worker pushed");
    fill(w1.grads(), g1);
    w1.wait(w1.async_push());
    w0.wait(t0);
    // The held reply brings the slow worker's update too: initial - 0.5 * (g0 + g0 + g1).
    BOOST_TEST(to_vector(w0.params()) == (std::vector<float>{-1.5f, 1, 1, 5, 4.25f, 4}),
               boost::test_tools::per_element());
    BOOST_TEST(w0.global_step() == 3u);
    for (const auto& c : staleness_of(job)) {
        BOOST_TEST(c.replies_held == 1u);
        BOOST_TEST(c.held_now == 0u);
        BOOST_TEST(c.held_time >= 20ms);
    }
    w0.shutdown();
    pull_until_done(w1);
    for (int p = 0; p < 2; ++p) BOOST_TEST(!job.finish(p).threw, job.finish(p).what);
}

BOOST_AUTO_TEST_CASE(max_staleness_0_is_lock_step)
{
    ps_job job(1, 2, bounded_config(0));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    for (std::uint64_t round = 1; round <= 2; ++round) {
        const auto t0 = w0.async_push();
        BOOST_TEST_REQUIRE(held_by_the_bound(job, w0, 0, t0), "round " << round);
        BOOST_TEST(job.server(0).global_step() == 2 * round - 1);
        w1.wait(w1.async_push());
        w0.wait(t0);
        BOOST_TEST(w0.global_step() == 2 * round);
    }
    // Both gradients of each round applied, one after the other: initial - 0.5 * 2 * (g0 + g1).
    BOOST_TEST(to_vector(w0.params()) == (std::vector<float>{-3, 0, 1, 4, 4, 6}), boost::test_tools::per_element());
    const auto c = job.server(0).staleness();
    BOOST_TEST(c.largest_lead == 1u);
    BOOST_TEST(c.replies_held == 2u);
    w0.shutdown();
    pull_until_done(w1);
    BOOST_TEST(!job.finish().threw);
}

BOOST_AUTO_TEST_CASE(without_a_bound_no_reply_is_held_and_the_lead_is_counted)
{
    ps_job job(1, 2, async_config());
    auto& w0 = job.chief();
    start(job, 2);
    fill(w0.grads(), g0);
    for (int k = 0; k < 3; ++k) w0.wait(w0.async_push());
    const auto c = job.server(0).staleness();
    BOOST_TEST(c.largest_lead == 3u);
    BOOST_TEST(c.replies_held == 0u);
    w0.shutdown();
    pull_until_done(job.worker(1));
    BOOST_TEST(!job.finish().threw);
}

BOOST_AUTO_TEST_CASE(a_lost_slow_worker_releases_the_held_reply)
{
    ps_job job(1, 3, bounded_config(0));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 3);
    fill(w0.grads(), g0);
    fill(w1.grads(), g1);
    const auto t1 = w1.async_push();
    BOOST_TEST_REQUIRE(held_by_the_bound(job, w1, 1, t1));
    const auto t0 = w0.async_push();
    BOOST_TEST_REQUIRE(held_by_the_bound(job, w0, 0, t0));  // both wait for worker 2
    BOOST_TEST(eventually([&] { return job.server(0).staleness().held_now == 2u; }),
               "held now: " << job.server(0).staleness().held_now);
    job.net().kill_worker(2);
    w0.wait(t0);
    w1.wait(t1);
    BOOST_TEST(to_vector(w0.params()) == (std::vector<float>{-1, 1, 2, 4, 4.5f, 6}), boost::test_tools::per_element());
    BOOST_TEST(eventually([&] { return job.server(0).staleness().held_now == 0u; }),
               "held now: " << job.server(0).staleness().held_now);
    BOOST_TEST(job.server(0).staleness().replies_held == 2u);
    w0.shutdown();
    pull_until_done(w1);
    const auto end = job.finish();
    BOOST_TEST(!end.threw, end.what);
    BOOST_TEST((end.outcome == server_outcome::done));
}

BOOST_AUTO_TEST_CASE(the_chiefs_shutdown_answers_a_held_worker_done)
{
    ps_job job(1, 2, bounded_config(0));
    auto& w1 = job.worker(1);
    start(job, 2);
    fill(w1.grads(), g1);
    const auto t1 = w1.async_push();  // ahead of the chief, which never pushes
    BOOST_TEST_REQUIRE(held_by_the_bound(job, w1, 1, t1));
    job.chief().shutdown();
    w1.wait(t1);
    BOOST_TEST(w1.done());
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(!end.threw, end.what);
    BOOST_TEST((end.outcome == server_outcome::done));
    BOOST_TEST(job.server(0).staleness().held_now == 0u);
}

BOOST_AUTO_TEST_CASE(a_lost_ps_makes_the_waiting_worker_throw_naming_it)
{
    ps_job job(1, 2, sync_config());
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    start(job, 2);
    const auto t0 = w0.async_push();  // waits for worker 1's gradient
    BOOST_TEST(held_for_the_step(job, w0, 0, t0));
    job.net().kill_ps(0);
    for (client* w : {static_cast<client*>(&w0), &w1}) {
        try {
            w->wait(w == &w0 ? t0 : w->async_pull());
            BOOST_ERROR("a request to a dead PS completed");
        } catch (const pstrain::peer_error& e) {
            BOOST_TEST(e.peer() == "ps 0");
            BOOST_TEST(std::string(e.what()).find("lost ps 0") != std::string::npos, e.what());
        }
    }
    // A client that failed stays failed.
    BOOST_CHECK_THROW(w0.async_pull(), pstrain::error);
}

BOOST_AUTO_TEST_CASE(of_two_ps_the_dead_one_is_named)
{
    ps_job job(2, 1, async_config());
    auto& w0 = job.chief();
    start(job, 1);
    w0.wait(w0.async_pull({0, 3}));  // PS 0 alone: fine
    job.net().kill_ps(1);
    w0.wait(w0.async_pull({0, 3}));  // still fine: PS 1 is not asked
    try {
        w0.wait(w0.async_pull());
        BOOST_ERROR("a pull from a dead PS completed");
    } catch (const pstrain::peer_error& e) {
        BOOST_TEST(e.peer() == "ps 1");
    }
}

BOOST_AUTO_TEST_CASE(of_two_ps_waited_on_the_lost_one_is_named_with_its_reason)
{
    // Both PS tasks hold the chief's push for worker 1's gradient; PS 1
    // dies.  The wait ends while PS 0's reply is still to come: the error
    // names PS 1 and why, not PS 0 (seen as "lost ps 0 (n1): send failed: "
    // under srun when ps 1 was killed).
    ps_job job(2, 2, sync_config());
    auto& w0 = job.chief();
    start(job, 2);
    const auto t0 = w0.async_push();
    BOOST_TEST(held_for_the_step(job, w0, 0, t0));
    job.net().kill_ps(1);
    try {
        w0.wait(t0);
        BOOST_ERROR("a push to a dead PS completed");
    } catch (const pstrain::peer_error& e) {
        const std::string what = e.what();
        BOOST_TEST(e.peer() == "ps 1");
        BOOST_TEST(what.find("lost ps 1: ") == 0, what);
        BOOST_TEST(what.size() > std::string("lost ps 1: ").size(), what);
        BOOST_TEST(what.back() != ' ', what);
    }
    job.net().kill_worker(1);
    const auto end = job.finish(0);
    BOOST_TEST_REQUIRE(end.returned);
}

BOOST_AUTO_TEST_CASE(a_request_that_failed_on_one_ps_leaves_no_receive_behind_for_the_others_reply)
{
    // The push waits on both PS tasks; PS 0 dies, so the wait throws while
    // PS 1's reply is still to come: it comes (an abort, when PS 1 loses
    // worker 1) into a receive the client must still own.  (A use after
    // free here shows under valgrind or ASan.)
    ps_job job(2, 2, sync_config());
    auto& w0 = job.chief();
    start(job, 2);
    const auto t0 = w0.async_push();
    BOOST_TEST(held_for_the_step(job, w0, 0, t0));
    job.net().kill_ps(0);
    try {
        w0.wait(t0);
        BOOST_ERROR("a push to a dead PS completed");
    } catch (const pstrain::peer_error& e) {
        BOOST_TEST(e.peer() == "ps 0");
    }
    job.net().kill_worker(1);
    const auto end = job.finish(1);
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(end.who == "worker 1");
}

// The chief's client is worker 0's: another worker that makes one is told
// to make a plain client.
BOOST_AUTO_TEST_CASE(only_worker_0_makes_a_chief_client)
{
    loopback_network net(1, 2);
    client_config c;
    c.index = 1;
    c.num_workers = 2;
    c.num_params = 4;
    BOOST_CHECK_EXCEPTION(chief_client(net.worker(1), c), pstrain::error, [](const pstrain::error& e) {
        return std::string(e.what()) ==
               "worker 1 made a chief_client: only worker 0, the chief, starts, saves and ends the job (make a client)";
    });
}
