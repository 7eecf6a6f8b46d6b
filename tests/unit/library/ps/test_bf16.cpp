// The wire precision bf16: the message buffers' encoding and widening (the
// rounding itself: tests/unit/common/test_bf16.cpp), and a job over the
// loopback transport whose pushes, values and rows travel as bf16 while the
// PS keeps FP32 master weights; the refusal of a worker of another
// precision; the bytes a PS counts.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE bf16
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "tests/unit/library/ps/loopback_job.hpp"
#include "library/ps/bf16.hpp"
#include "library/ps/protocol.hpp"

#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

using namespace pstrain::ps;
using pstrain::testing::fill;
using pstrain::testing::job_options;
using pstrain::testing::ps_job;
using pstrain::testing::to_vector;
namespace bdata = boost::unit_test::data;
using namespace std::chrono_literals;

namespace {

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }
float rounded(float f) { return bf16::to_float(bf16::from_float(f)); }

server_config sgd(wire_precision p, bool sync = false)
{
    server_config c;
    c.training.sync = sync;
    c.training.optimizer.kind = optimizer_kind::sgd;
    c.training.optimizer.learning_rate = 1.0f;
    c.shutdown_wait = 2s;
    c.precision = p;
    return c;
}

job_options every_worker(wire_precision p, int workers, bool share_memory = false)
{
    job_options o;
    o.share_memory = share_memory;
    o.precisions.assign(static_cast<std::size_t>(workers), p);
    return o;
}

void leave(client& c)
{
    for (int i = 0; i < 100 && !c.done(); ++i) c.wait(c.async_pull());
    BOOST_TEST(c.done(), "no reply said training is done");
}

// The values each snapshot showed the hook.
struct snapshots {
    std::mutex mu;
    std::vector<std::vector<float>> seen;
    server_hooks hooks()
    {
        server_hooks h;
        h.snapshot = [this](const shard_snapshot& s) {
            std::lock_guard lock(mu);
            seen.emplace_back(s.values.begin(), s.values.end());
            return snapshot_receipt{};
        };
        return h;
    }
};

}  // namespace

namespace pstrain::ps {
// For Boost.Test's data test cases.
std::ostream& operator<<(std::ostream& o, wire_precision p) { return o << name_of(p); }
}  // namespace pstrain::ps

namespace {

constexpr float two_to(int e) { return e >= 0 ? float(1ull << e) : 1.0f / float(1ull << -e); }

}  // namespace

// ------------------------------------------------------------ the buffers
// (the rounding itself: tests/unit/common/test_bf16.cpp)

BOOST_AUTO_TEST_CASE(widening_in_place_gives_each_number_its_float)
{
    const std::vector<float> in{1.5f, -0.0f, 3.0f * two_to(20), 0.10009765625f, -7.0f};
    std::vector<float> buffer(in.size(), 99.0f);
    bf16::encode(in.data(), in.size(), buffer.data());  // the halves fill the buffer's first half
    bf16::widen_in_place(buffer.data(), in.size());
    for (std::size_t k = 0; k < in.size(); ++k) BOOST_TEST(bits(buffer[k]) == bits(in[k]), k);
}

// ------------------------------------------------------------ a job in bf16

// The PS applies the gradient bf16 brought, in FP32: 16 pushes of -2^-12
// take an element from 1 to 1 + 2^-8, which bf16 cannot hold (a PS that
// kept bf16 would stay at 1 for ever); the values sent back are rounded.
BOOST_AUTO_TEST_CASE(a_bf16_push_is_applied_in_fp32_to_master_weights_that_stay_fp32)
{
    snapshots snaps;
    ps_job job(1, 1, sgd(wire_precision::bf16), snaps.hooks(), every_worker(wire_precision::bf16, 1));
    auto& w = job.chief();
    fill(w.params(), {1, 1, 1, 1, 1, 1});
    w.wait(w.async_init());
    // Element 5's gradient, 0.5 + 2^-10, travels as 0.5: its value goes down by 0.5 a push.
    fill(w.grads(), {-two_to(-12), -two_to(-12), -two_to(-12), -two_to(-12), -two_to(-12), 0.5f + two_to(-10)});
    for (int k = 0; k < 16; ++k) w.wait(w.async_push());
    const auto taken = w.snapshot(w.global_step());
    BOOST_TEST_REQUIRE(taken.size() == 1u);
    {
        std::lock_guard lock(snaps.mu);
        BOOST_TEST_REQUIRE(snaps.seen.size() == 1u);
        BOOST_TEST(snaps.seen[0][0] == 1.0f + two_to(-8));  // FP32 on the PS
        BOOST_TEST(snaps.seen[0][5] == 1.0f - 16 * 0.5f);   // the rounded gradient, applied exactly
    }
    BOOST_TEST(w.params()[0] == 1.0f);  // 1 + 2^-8 is a tie: to 1
    BOOST_TEST(w.params()[5] == -7.0f);
    fill(w.grads(), {-two_to(-12), 0, 0, 0, 0, 0});
    for (int k = 0; k < 16; ++k) w.wait(w.async_push());
    BOOST_TEST(w.params()[0] == 1.0f + two_to(-7));  // bf16 holds this one
    BOOST_TEST(w.params()[1] == 1.0f);
    w.shutdown();
    BOOST_TEST((job.finish().outcome == server_outcome::done));
}

BOOST_DATA_TEST_CASE(values_pulled_in_bf16_are_the_ps_values_rounded_to_nearest_even, bdata::make({1, 2}), num_ps)
{
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> initial{1.0f + two_to(-8), 1.0f + 3 * two_to(-8), inf, -inf, 0.1f, 3.0f};
    ps_job job(num_ps, 2, sgd(wire_precision::bf16), {}, every_worker(wire_precision::bf16, 2));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    fill(w0.params(), initial);
    w0.wait(w0.async_init());
    // The reply to init is float32: the chief starts from the PS's exact values.
    BOOST_TEST(to_vector(w0.params()) == initial, boost::test_tools::per_element());
    w0.wait(w0.async_pull());
    w1.wait(w1.async_pull());
    const std::vector<float> expect{1.0f, 1.0f + two_to(-6), inf, -inf, 0.10009765625f, 3.0f};
    BOOST_TEST(to_vector(w0.params()) == expect, boost::test_tools::per_element());
    BOOST_TEST(to_vector(w1.params()) == expect, boost::test_tools::per_element());
    w0.shutdown();
    leave(w1);
    for (int p = 0; p < num_ps; ++p) BOOST_TEST(!job.finish(p).threw);
}

// On one host the PS reads and writes the worker's buffers in place: no
// wire, nothing rounded.
BOOST_AUTO_TEST_CASE(the_shared_memory_path_stays_fp32)
{
    ps_job job(1, 1, sgd(wire_precision::bf16), {}, every_worker(wire_precision::bf16, 1, true));
    auto& w = job.chief();
    fill(w.params(), {1.0f + two_to(-8), 0.1f, 1, 1, 1, 1});
    w.wait(w.async_init());
    BOOST_TEST_REQUIRE(w.mapped(0));
    BOOST_TEST(w.params()[0] == 1.0f + two_to(-8));  // the reply to init: float32 too
    fill(w.grads(), {-two_to(-12), 0, 0, 0, 0, 0});
    w.wait(w.async_push());
    w.wait(w.async_pull());
    BOOST_TEST(w.params()[0] == 1.0f + two_to(-8) + two_to(-12));
    BOOST_TEST(w.params()[1] == 0.1f);
    w.shutdown();
    BOOST_TEST((job.finish().outcome == server_outcome::done));
}

// A sync step averages the decoded gradients in FP32.
BOOST_AUTO_TEST_CASE(sync_averages_the_decoded_gradients_in_fp32)
{
    snapshots snaps;
    ps_job job(1, 2, sgd(wire_precision::bf16, true), snaps.hooks(), every_worker(wire_precision::bf16, 2));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    fill(w0.params(), {1, 1, 1, 1, 1, 1});
    w0.wait(w0.async_init());
    w1.wait(w1.async_pull());
    // (2^-12 + 0) / 2 = 2^-13 a step: after one step 1 - 2^-13 on the PS.
    fill(w0.grads(), {two_to(-12), 0, 0, 0, 0, 0});
    fill(w1.grads(), {0, 0, 0, 0, 0, 0});
    const auto t0 = w0.async_push();
    const auto t1 = w1.async_push();
    w0.wait(t0);
    w1.wait(t1);
    w0.snapshot(1);
    {
        std::lock_guard lock(snaps.mu);
        BOOST_TEST_REQUIRE(snaps.seen.size() == 1u);
        BOOST_TEST(snaps.seen[0][0] == 1.0f - two_to(-13));
    }
    BOOST_TEST(w0.params()[0] == 1.0f);  // rounded
    BOOST_TEST(w1.params()[0] == 1.0f);
    w0.shutdown();
    leave(w1);
    BOOST_TEST(!job.finish().threw);
}

// The bytes each PS counts: frames of 64 bytes, the chief's init and its
// reply in FP32, every push and other values reply's numbers in two bytes
// each instead of four.
BOOST_DATA_TEST_CASE(a_bf16_job_moves_half_the_bytes_of_gradients_and_values,
                     bdata::make({wire_precision::fp32, wire_precision::bf16}), precision)
{
    job_options o = every_worker(precision, 2);
    o.num_params = 1000;
    ps_job job(1, 2, sgd(precision), {}, o);
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    w0.wait(w0.async_init());
    w1.wait(w1.async_pull());
    for (int k = 0; k < 4; ++k) w0.wait(w0.async_push());
    const auto stats = w1.stats();
    const std::uint64_t n = precision == wire_precision::bf16 ? 2000 : 4000;  // one message's numbers
    // In: 2 hellos, init (4000), a pull, 4 pushes, this stats request.
    // Out: 2 welcomes, init's reply (4000), 5 values replies.
    BOOST_TEST(stats[0].bytes_received == 2 * 64u + (64u + 4000u) + 64u + 4 * (64u + n) + 64u);
    BOOST_TEST(stats[0].bytes_sent == 2 * 64u + (64u + 4000u) + 5 * (64u + n));
    w0.shutdown();
    leave(w1);
    BOOST_TEST(!job.finish().threw);
}

// ------------------------------------------------------------ refusals

BOOST_AUTO_TEST_CASE(a_worker_of_another_wire_precision_is_refused_at_its_hello_in_one_line)
{
    job_options o;
    o.precisions = {wire_precision::fp32, wire_precision::bf16};
    ps_job job(1, 2, sgd(wire_precision::fp32), {}, o);
    auto& w0 = job.chief();
    w0.wait(w0.async_init());
    try {
        job.worker(1).wait(job.worker(1).async_pull());
        BOOST_FAIL("worker 1's hello was welcomed");
    } catch (const pstrain::peer_error& e) {
        BOOST_TEST(std::string(e.what()) ==
                   "ps 0 refused this worker's hello: worker 1 sends bf16 on the wire and this PS fp32: give every "
                   "task of the job the same --wire-precision");
    }
    w0.shutdown();
    BOOST_TEST(!job.finish().threw);
}

BOOST_AUTO_TEST_CASE(a_chief_of_another_wire_precision_ends_the_ps_naming_both)
{
    ps_job job(1, 1, sgd(wire_precision::bf16), {}, every_worker(wire_precision::fp32, 1));
    try {
        job.chief().wait(job.chief().async_init());
        BOOST_FAIL("the chief's hello was welcomed");
    } catch (const pstrain::peer_error& e) {
        BOOST_TEST(std::string(e.what()) ==
                   "ps 0 refused this worker's hello: worker 0 sends fp32 on the wire and this PS bf16: give every "
                   "task of the job the same --wire-precision");
    }
    const auto end = job.finish();
    BOOST_TEST_REQUIRE(end.returned);
    BOOST_TEST(end.peer_error);
    BOOST_TEST(end.what ==
               "refused the hello of worker 0 (the chief): worker 0 sends fp32 on the wire and this PS bf16: give "
               "every task of the job the same --wire-precision");
}

// A PS task without settings of its own (pstrain serve) takes the chief's
// precision, and holds every other worker to it.
BOOST_AUTO_TEST_CASE(a_ps_without_settings_takes_the_chiefs_wire_precision)
{
    server_config c;
    c.settings_from_chief = true;
    c.shutdown_wait = 2s;
    training_settings t;
    t.optimizer.kind = optimizer_kind::sgd;
    t.optimizer.learning_rate = 1.0f;
    job_options o;
    o.settings = t;
    o.share_memory = false;
    o.precisions = {wire_precision::bf16, wire_precision::fp32};
    ps_job job(1, 2, c, {}, o);
    auto& w0 = job.chief();
    fill(w0.params(), {0.1f, 1, 1, 1, 1, 1});
    w0.wait(w0.async_init());
    w0.wait(w0.async_pull());
    BOOST_TEST(w0.params()[0] == 0.10009765625f);
    BOOST_CHECK_EXCEPTION(job.worker(1).wait(job.worker(1).async_pull()), pstrain::peer_error,
                          [](const pstrain::peer_error& e) {
                              return std::string(e.what()).ends_with(
                                  "worker 1 sends fp32 on the wire and this PS bf16: give every task of the job "
                                  "the same --wire-precision");
                          });
    w0.shutdown();
    BOOST_TEST(!job.finish().threw);
}

// ------------------------------------------------------------ rows

// Rows pulled in bf16 are the table's rounded; a row push's gradient is
// rounded on the way and applied in FP32.
BOOST_AUTO_TEST_CASE(rows_travel_as_bf16_and_the_table_stays_fp32)
{
    embedding_config table;
    table.dim = 3;
    table.seed = 11;
    auto c = sgd(wire_precision::bf16);
    c.training.tables = {table};
    job_options o = every_worker(wire_precision::bf16, 1);
    o.num_params = 4;
    o.table_dims = {3};
    ps_job job(2, 1, c, {}, o);
    auto& w = job.chief();
    w.wait(w.async_init());
    embedding_table ref(table);
    const std::vector<std::uint64_t> keys{5, 1ull << 50, 77};
    std::vector<float> expect(9), out(9, -7.0f);
    ref.pull(keys, expect, 0);
    w.wait(w.async_pull_rows(0, keys, out));
    for (std::size_t k = 0; k < out.size(); ++k) {
        BOOST_TEST(out[k] == rounded(expect[k]), k);
        if (expect[k] != rounded(expect[k])) BOOST_TEST(out[k] != expect[k]);  // really rounded
    }
    const std::vector<float> grads{0.1f, -0.25f, 1.0f + two_to(-10), 3, 0.3f, -0.7f, 0, 1e-3f, 2};
    w.wait(w.async_push_rows(0, keys, grads));
    std::vector<float> sent(grads.size());
    for (std::size_t k = 0; k < grads.size(); ++k) sent[k] = rounded(grads[k]);
    ref.push(keys, sent, 0);
    ref.pull(keys, expect, 0);
    w.wait(w.async_pull_rows(0, keys, out));
    for (std::size_t k = 0; k < out.size(); ++k) BOOST_TEST(out[k] == rounded(expect[k]), k);
    w.shutdown();
    for (int p = 0; p < 2; ++p) BOOST_TEST(!job.finish(p).threw);
}
