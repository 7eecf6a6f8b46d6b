// MLP gradients against central finite differences, and determinism.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE mlp
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/compute/cpu_backend.hpp"
#include "trainer/data/sampler.hpp"
#include "trainer/model/model.hpp"
#include "library/ps/shard.hpp"
#include "tests/unit/trainer/compute/bf16_here.hpp"
#include "tests/unit/trainer/helpers.hpp"

#include <cmath>
#include <numeric>
#include <random>

using namespace pstrain;
using pstrain::testing::make_random_data;

namespace {

// Gradient check in float32.  Documented bound: with central differences of
// step 1e-3 on a loss summed in double, |analytic - numeric| must stay below
// 2e-3 + 2e-2 * |numeric| for every parameter (float32 rounding of the
// forward pass, ~1e-7 of the loss divided by the step, dominates below
// that).  A larger step crosses ReLU kinks with these seeds.
void check_gradients(model::model& m, const data::dataset& d, std::vector<std::uint32_t> rows, std::uint64_t seed)
{
    std::vector<float> p(m.num_params()), g(m.num_params()), scratch(m.num_params());
    m.initialize(p, seed);
    m.compute_gradients(p, d, rows, g);
    const float eps = 1e-3f;
    double worst = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
        const float saved = p[i];
        p[i] = saved + eps;
        double up = m.compute_gradients(p, d, rows, scratch).loss;
        p[i] = saved - eps;
        double down = m.compute_gradients(p, d, rows, scratch).loss;
        p[i] = saved;
        double numeric = (up - down) / (2.0 * eps);
        double err = std::fabs(g[i] - numeric);
        BOOST_TEST_REQUIRE(err <= 2e-3 + 2e-2 * std::fabs(numeric),
                           "param " << i << ": analytic " << g[i] << " numeric " << numeric);
        worst = std::max(worst, err);
    }
    BOOST_TEST_MESSAGE("largest gradient difference " << worst);
}

}  // namespace

BOOST_AUTO_TEST_CASE(tensors_are_named_and_flat)
{
    compute::cpu_backend be(1);
    auto m = model::make_mlp(be, 784, {256, 128}, 10, 100);
    const auto& t = m->tensors();
    BOOST_TEST(t.size() == 6u);
    BOOST_TEST(t[0].name == "hidden_0/weights");
    BOOST_TEST(t[5].name == "softmax/biases");
    BOOST_TEST(t[1].offset == 784u * 256u);
    BOOST_TEST(m->num_params() == 784u * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
    BOOST_TEST(m->describe() == "784-256-128-10 mlp");
}

BOOST_AUTO_TEST_CASE(gradients_match_finite_differences_one_hidden_layer)
{
    compute::cpu_backend be(1);
    auto d = make_random_data(8, 6, 3, 1);
    auto m = model::make_mlp(be, 6, {5}, 3, 8);
    check_gradients(*m, d, {0, 1, 2, 3, 4, 5, 6, 7}, 11);
}

BOOST_AUTO_TEST_CASE(gradients_match_finite_differences_two_hidden_layers)
{
    compute::cpu_backend be(1);
    auto d = make_random_data(6, 7, 4, 2);
    auto m = model::make_mlp(be, 7, {6, 5}, 4, 6);
    check_gradients(*m, d, {5, 3, 1, 0}, 12);
}

BOOST_AUTO_TEST_CASE(linear_model_gradient)
{
    compute::cpu_backend be(1);
    auto d = data::make_linear(20, 5, 3).train;
    auto m = model::make_linear(be, 20);
    check_gradients(*m, d, {0, 1, 2, 3, 4, 5}, 4);
}

BOOST_AUTO_TEST_CASE(a_batchs_accuracy_and_loss_are_the_evaluations_on_the_same_rows)
{
    compute::cpu_backend be(1);
    auto d = make_random_data(40, 6, 3, 7);
    auto m = model::make_mlp(be, 6, {8}, 3, 40);
    std::vector<float> p(m->num_params()), g(m->num_params());
    std::vector<std::uint32_t> rows(40);
    for (std::uint32_t i = 0; i < rows.size(); ++i) rows[i] = i;
    for (std::uint64_t seed : {1, 2, 3}) {
        m->initialize(p, seed);
        const auto batch = m->compute_gradients(p, d, rows, g);
        const auto eval = m->evaluate(p, d);
        BOOST_TEST(batch.accuracy == eval.accuracy);
        BOOST_TEST(batch.loss == eval.loss, boost::test_tools::tolerance(1e-9));
        BOOST_TEST(batch.accuracy > 0.0);  // random labels of 3 classes: some right
        BOOST_TEST(batch.accuracy < 1.0);
    }
}

BOOST_AUTO_TEST_CASE(initialisation_is_truncated_normal_with_fan_in_scale)
{
    compute::cpu_backend be(1);
    auto m = model::make_mlp(be, 400, {300}, 10, 1);
    std::vector<float> p(m->num_params());
    m->initialize(p, 5);
    const auto& w = m->tensors()[0];
    double sum_sq = 0, limit = 2.0 / std::sqrt(400.0);
    for (std::size_t i = w.offset; i < w.offset + w.size; ++i) {
        BOOST_TEST_REQUIRE(std::fabs(p[i]) <= limit + 1e-6);
        sum_sq += double(p[i]) * p[i];
    }
    // A normal truncated at 2 sigma has variance 0.774 sigma^2.
    double var = sum_sq / w.size;
    BOOST_TEST(var * 400.0 == 0.774, boost::test_tools::tolerance(0.03));
    const auto& b = m->tensors()[1];
    for (std::size_t i = b.offset; i < b.offset + b.size; ++i) BOOST_TEST_REQUIRE(p[i] == 0.0f);
}

BOOST_AUTO_TEST_CASE(same_seed_gives_a_bit_identical_loss_sequence)
{
    auto run = [](std::uint64_t seed) {
        compute::cpu_backend be(1);
        auto d = make_random_data(200, 10, 5, 9);
        auto m = model::make_mlp(be, 10, {16}, 5, 20);
        return testing::adam_loss_curve(*m, d, 0.01f, seed, 50, 20);
    };
    auto a = run(3), b = run(3), c = run(4);
    BOOST_TEST(a == b);
    BOOST_TEST(a != c);
    BOOST_TEST(a.back() < a.front());  // it learns
}

BOOST_AUTO_TEST_CASE(a_batch_gathered_ahead_gives_the_same_steps_bit_for_bit)
{
    // 200 rows, batches of 30: six batches an epoch, the seventh crosses
    // into the next (not known ahead); evaluations between some steps
    // gather other rows into the same input.
    auto run = [](testing::curve_options how) {
        compute::cpu_backend be(1);
        auto d = make_random_data(200, 10, 5, 9);
        auto m = model::make_mlp(be, 10, {16}, 5, 30);
        return testing::adam_loss_curve(*m, d, 0.01f, 3, 40, 30, how);
    };
    const auto plain = run({});
    BOOST_TEST(run({.prefetch = true}) == plain);
    BOOST_TEST(run({.prefetch = false, .evaluate_every = 4}) == plain);
    BOOST_TEST(run({.prefetch = true, .evaluate_every = 4}) == plain);
}

BOOST_AUTO_TEST_CASE(compute_gradients_uses_the_batch_gathered_ahead_once_and_only_that_one)
{
    compute::cpu_backend be(1);
    auto d = make_random_data(60, 6, 3, 7);
    const auto copy = d;
    auto m = model::make_mlp(be, 6, {8}, 3, 20);
    std::vector<float> p(m->num_params()), before(p.size()), g(p.size()), after(p.size());
    m->initialize(p, 1);
    const std::vector<std::uint32_t> rows{4, 9, 17, 33, 50}, others{1, 2, 3, 5, 8};
    m->compute_gradients(p, d, rows, before);
    // Gathered ahead, then the rows changed in the data (which a caller
    // must not do): the step reads what was gathered.
    m->prefetch(d, rows);
    for (auto r : rows) std::fill_n(d.features.begin() + r * d.cols, d.cols, 5.0f);
    m->compute_gradients(p, d, rows, g);
    BOOST_TEST(g == before);
    // Once: the next step of the same rows reads the data.
    m->compute_gradients(p, d, rows, after);
    BOOST_TEST(after != before);
    // Other rows, or the same rows of another dataset, gathered ahead: the
    // step's own rows are gathered as always.
    m->prefetch(d, others);
    m->compute_gradients(p, d, rows, g);
    BOOST_TEST(g == after);
    m->prefetch(copy, rows);
    m->compute_gradients(p, d, rows, g);
    BOOST_TEST(g == after);
    // An evaluation in between gathers other rows into the same input.
    m->prefetch(d, rows);
    m->evaluate(p, copy);
    m->compute_gradients(p, d, rows, g);
    BOOST_TEST(g == after);
}

BOOST_AUTO_TEST_CASE(hidden_units_parsing)
{
    BOOST_TEST(model::parse_hidden_units("256,128") == (std::vector<int>{256, 128}));
    for (const char* bad : {"10,,5", "", "0", "abc", "5,", "-3"}) {
        try {
            model::parse_hidden_units(bad);
            BOOST_FAIL("accepted " << bad);
        } catch (const error& e) {
            BOOST_TEST(std::string(e.what()).find("--hidden-units") == 0u);
        }
    }
}

BOOST_AUTO_TEST_CASE(wrong_feature_count_is_an_error)
{
    compute::cpu_backend be(1);
    auto m = model::make_mlp(be, 5, {4}, 3, 4);
    auto d = make_random_data(4, 6, 3, 1);
    std::vector<float> p(m->num_params()), g(m->num_params());
    std::vector<std::uint32_t> rows{0, 1};
    BOOST_CHECK_THROW(m->compute_gradients(p, d, rows, g), error);
}

// --precision bf16 through the mlp preset (ReLU): the Adam loss curve of
// 60 steps tracks float32's.  Gradients are compared element by element in
// test_sequential, on tanh: at a ReLU, a pre-activation within bf16's
// rounding of zero switches the unit's gradient on or off, so bf16 and
// float32 gradients of a ReLU network differ by whole terms (here about 4%
// of their norm) however right the products are, and the two runs drift
// apart step by step as those differences move Adam's weights.  So: the
// loss of each of the first 20 steps within 1% of float32's (measured:
// 0.5% at most), the mean loss of the last 10 within 2% (measured: 0.2%),
// and a loss that falls to below half.
BOOST_TEST_DECORATOR(*boost::unit_test::precondition(pstrain::testing::bf16_here()))
BOOST_AUTO_TEST_CASE(a_bf16_mlp_learns_as_the_fp32_one_does)
{
    const auto fp32 = compute::make_backend(compute::device_kind::cpu, compute::precision::fp32, 1);
    const auto bf16 = compute::make_backend(compute::device_kind::cpu, compute::precision::bf16, 1);
    auto d = make_random_data(512, 64, 4, 8);
    for (std::size_t i = 0; i < d.rows; ++i) d.features[i * d.cols + static_cast<std::size_t>(d.labels[i])] += 2.0f;
    auto m32 = model::make_mlp(*fp32, 64, {128, 64}, 4, 32);
    auto m16 = model::make_mlp(*bf16, 64, {128, 64}, 4, 32);
    const auto c32 = testing::adam_loss_curve(*m32, d, 0.003f, 5, 60, 32);
    const auto c16 = testing::adam_loss_curve(*m16, d, 0.003f, 5, 60, 32);
    for (std::size_t i = 0; i < 20; ++i)
        BOOST_TEST_REQUIRE(std::fabs(c16[i] - c32[i]) <= 0.01 * c32[i],
                           "step " << i << ": bf16 loss " << c16[i] << ", fp32 " << c32[i]);
    const auto last10 = [](const std::vector<double>& c) { return std::accumulate(c.end() - 10, c.end(), 0.0) / 10; };
    BOOST_TEST(std::fabs(last10(c16) - last10(c32)) <= 0.02 * last10(c32),
               "the last 10 steps' mean loss: bf16 " << last10(c16) << ", fp32 " << last10(c32));
    BOOST_TEST(c16.back() < 0.5 * c16.front(), "from " << c16.front() << " to " << c16.back());
    BOOST_TEST((c16 != c32), "the bf16 model's products are bf16's");
}

// The overlapped step's buckets of the 784-256-128-10 MLP (w0 200704, b0
// 256, w1 32768, b1 128, w2 1280, b2 10 floats): whole tensors, last
// first, each at least the size asked for but the first tensors' bucket,
// covering the vector; one bucket when the size exceeds the model.
BOOST_AUTO_TEST_CASE(backward_buckets_group_whole_tensors_last_first)
{
    compute::cpu_backend be(1);
    auto m = model::make_mlp(be, 784, {256, 128}, 10, 100);
    using r = model::flat_range;
    const std::size_t b1 = 200704 + 256 + 32768, w2 = b1 + 128, n = w2 + 1280 + 10;
    BOOST_TEST_REQUIRE(m->num_params() == n);
    BOOST_TEST((model::backward_buckets(m->tensors(), 4096) == std::vector<r>{{w2, n}, {200960, w2}, {0, 200960}}));
    BOOST_TEST(
        (model::backward_buckets(m->tensors(), 100 * 1024) == std::vector<r>{{200704 + 256, n}, {0, 200704 + 256}}));
    BOOST_TEST(
        (model::backward_buckets(m->tensors(), 1) ==
         std::vector<r>{{w2 + 1280, n}, {w2, w2 + 1280}, {b1, w2}, {200960, b1}, {200704, 200960}, {0, 200704}}));
    BOOST_TEST((model::backward_buckets(m->tensors(), n * 4 + 1) == std::vector<r>{{0, n}}));
}
