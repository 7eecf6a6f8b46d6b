// Layer models: whole-model gradients against central finite differences
// (conv, pooling, dense, activations, softmax + mse, batch 1, non-square
// images, strides, padding), dense layers against the oracle through the
// model, dropout off at evaluation, initialisation, and training that
// learns.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE sequential
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/compute/cpu_backend.hpp"
#include "trainer/compute/layers.hpp"
#include "trainer/model/model.hpp"
#include "tests/unit/trainer/compute/bf16_here.hpp"
#include "tests/unit/trainer/helpers.hpp"
#include "tests/unit/trainer/forwarding_backend.hpp"
#include "trainer/compute/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

using namespace pstrain;
namespace oracle = pstrain::compute::oracle;
namespace bdata = boost::unit_test::data;

namespace {

std::unique_ptr<model::model> build(compute::backend& be, const std::string& spec, const data::dataset& d,
                                    std::size_t batch = 16)
{
    return model::make_sequential(be, model::parse_model_spec(spec), model::data_shape(d), d.num_classes, batch, 7);
}

// Central differences of step 1e-3 on the loss (summed in double), as in
// test_mlp: |analytic - numeric| <= 2e-3 + 2e-2 * |numeric| for every
// parameter.  Smooth activations (tanh, sigmoid) and average pooling keep
// the step off kinks; max pooling and relu are checked with random data
// where no window's maximum or sign changes within the step.
void check_gradients(model::model& m, const data::dataset& d, const std::vector<std::uint32_t>& rows)
{
    std::vector<float> p(m.num_params()), g(m.num_params()), scratch(m.num_params());
    m.initialize(p, 3);
    m.compute_gradients(p, d, rows, g);
    const float eps = 1e-3f;
    double worst = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
        const float saved = p[i];
        p[i] = saved + eps;
        const double up = m.compute_gradients(p, d, rows, scratch).loss;
        p[i] = saved - eps;
        const double down = m.compute_gradients(p, d, rows, scratch).loss;
        p[i] = saved;
        const double numeric = (up - down) / (2.0 * eps);
        const double err = std::fabs(g[i] - numeric);
        BOOST_TEST_REQUIRE(err <= 2e-3 + 2e-2 * std::fabs(numeric),
                           "param " << i << ": analytic " << g[i] << " numeric " << numeric);
        worst = std::max(worst, err);
    }
    BOOST_TEST_MESSAGE("largest gradient difference " << worst);
}

struct fd_case {
    const char* spec;
    int c, h, w;
    std::size_t batch;
};

std::ostream& operator<<(std::ostream& os, const fd_case& k)
{
    return os << k.spec << " on " << k.c << "x" << k.h << "x" << k.w << ", batch " << k.batch;
}

const fd_case fd_cases[] = {
    {"conv2d:3:3x3:tanh,avgpool:2,flatten,dense:3", 2, 6, 5, 3},
    {"conv2d:2:1x1:sigmoid,conv2d:3:3x2:stride=2:valid:tanh,dense:3", 3, 7, 6, 2},
    {"conv2d:2:4x4:tanh,avgpool:3:stride=2:same,dense:3", 1, 7, 9, 1},  // batch 1, even kernel, same pools
    {"conv2d:2:3x3:relu,maxpool:2,flatten,dense:5:sigmoid,dense:3", 1, 6, 6, 4},
    {"conv2d:2:3x3:stride=2:he,tanh,dense:3,softmax", 2, 5, 8, 3},  // softmax fused into the loss
    {"dense:5:tanh,dense:3,softmax,loss:mse", 1, 3, 4, 3},          // softmax through its Jacobian
    {"conv2d:2:2x2:valid:sigmoid,flatten,dense:3,loss:mse", 1, 3, 5, 2},
    {"input:2x3x2,conv2d:2:3x3,tanh,dense:3", 1, 1, 12, 2},  // flat rows made images
};

}  // namespace

BOOST_DATA_TEST_CASE(gradients_match_finite_differences, bdata::make(fd_cases), k)
{
    compute::cpu_backend be(1);
    auto d = testing::make_image_data(8, k.c, k.h, k.w, 3, 11);
    if (std::string(k.spec).starts_with("input:")) d.channels = d.height = d.width = 0;
    auto m = build(be, k.spec, d);
    std::vector<std::uint32_t> rows(k.batch);
    std::iota(rows.begin(), rows.end(), 2u);
    check_gradients(*m, d, rows);
}

BOOST_AUTO_TEST_CASE(a_dense_layer_matches_the_oracle_through_the_model)
{
    compute::cpu_backend be(1);
    auto d = testing::make_random_data(5, 6, 4, 3);
    auto m = build(be, "dense:4,loss:mse", d);
    std::vector<float> p(m->num_params()), g(m->num_params());
    m->initialize(p, 1);
    std::vector<std::uint32_t> rows{0, 1, 2, 3, 4};
    const auto r = m->compute_gradients(p, d, rows, g);
    const oracle::vec x(d.features.begin(), d.features.end()), w(p.begin(), p.begin() + 24), b(p.begin() + 24, p.end());
    const auto y = oracle::dense_forward(5, 6, 4, x, w, b);
    double loss = 0;
    for (int i = 0; i < 5; ++i)
        for (int c = 0; c < 4; ++c) {
            const double diff = y[i * 4 + c] - (c == d.labels[i] ? 1.0 : 0.0);
            loss += diff * diff / 4 / 5;
        }
    BOOST_TEST(r.loss == loss, boost::test_tools::tolerance(1e-5));
    // d loss / d b[c] = sum over rows of 2 (y - t) / (rows * classes).
    for (int c = 0; c < 4; ++c) {
        double want = 0;
        for (int i = 0; i < 5; ++i) want += 2.0 * (y[i * 4 + c] - (c == d.labels[i] ? 1.0 : 0.0)) / 20.0;
        BOOST_TEST(std::fabs(g[24 + c] - want) <= 1e-5 + 1e-4 * std::fabs(want));
    }
}

BOOST_AUTO_TEST_CASE(tensors_are_named_shaped_and_counted)
{
    compute::cpu_backend be(1);
    auto d = testing::make_image_data(4, 1, 28, 28, 10, 1);
    auto m = build(be, "cnn", d);
    BOOST_TEST(m->num_params() == 3274634u);  // the TensorFlow tutorial's model
    const auto& t = m->tensors();
    BOOST_TEST_REQUIRE(t.size() == 8u);
    BOOST_TEST(t[0].name == "layer_1_conv2d/kernel");
    BOOST_TEST((t[0].shape == std::vector<int>{32, 1, 5, 5}));
    BOOST_TEST(t[1].name == "layer_1_conv2d/biases");
    BOOST_TEST(t[4].name == "layer_6_dense/weights");
    BOOST_TEST((t[4].shape == std::vector<int>{3136, 1024}));
    BOOST_TEST(m->describe() == "conv2d:32:5x5:relu,maxpool:2,conv2d:64:5x5:relu,maxpool:2,flatten,dense:1024:relu,"
                                "dropout:0.4,dense:10 on 1x28x28");
    BOOST_TEST(build(be, "lenet5", d)->num_params() == 61706u);
}

BOOST_AUTO_TEST_CASE(initialisation_follows_glorot_and_he)
{
    compute::cpu_backend be(1);
    auto d = testing::make_image_data(4, 3, 16, 16, 10, 1);
    auto m = build(be, "conv2d:64:3x3:he,flatten,dense:200,dense:10", d);
    std::vector<float> p(m->num_params());
    m->initialize(p, 5);
    const auto& t = m->tensors();
    auto stats = [&](const model::tensor_spec& s, double& var, double& max_abs) {
        double sum = 0, sq = 0;
        max_abs = 0;
        for (std::size_t i = s.offset; i < s.offset + s.size; ++i) {
            sum += p[i];
            sq += double(p[i]) * p[i];
            max_abs = std::max(max_abs, double(std::fabs(p[i])));
        }
        var = sq / s.size - (sum / s.size) * (sum / s.size);
    };
    double var, max_abs;
    stats(t[0], var, max_abs);  // he: variance 2 / fan_in, fan_in 27
    BOOST_TEST(var == 2.0 / 27, boost::test_tools::tolerance(0.1));
    stats(t[2], var, max_abs);  // glorot uniform: limit sqrt(6 / (16384 + 200)), variance limit^2 / 3
    const double limit = std::sqrt(6.0 / (64.0 * 16 * 16 + 200));
    BOOST_TEST(max_abs <= limit);
    BOOST_TEST(var == limit * limit / 3, boost::test_tools::tolerance(0.05));
    for (std::size_t i = t[1].offset; i < t[1].offset + t[1].size; ++i) BOOST_TEST_REQUIRE(p[i] == 0.0f);
    std::vector<float> again(p.size());
    m->initialize(again, 5);
    BOOST_TEST((again == p), "the same seed gives the same values");
}

BOOST_AUTO_TEST_CASE(dropout_draws_masks_in_training_and_is_off_at_evaluation)
{
    compute::cpu_backend be(1);
    auto d = testing::make_image_data(20, 1, 6, 6, 3, 2);
    auto m = build(be, "conv2d:4:3x3:relu,flatten,dropout:0.5,dense:3", d, 20);
    std::vector<float> p(m->num_params()), g1(p.size()), g2(p.size());
    m->initialize(p, 1);
    std::vector<std::uint32_t> rows(20);
    std::iota(rows.begin(), rows.end(), 0u);
    const auto l1 = m->compute_gradients(p, d, rows, g1).loss;
    const auto l2 = m->compute_gradients(p, d, rows, g2).loss;
    BOOST_TEST(l1 != l2, "each training step draws a new mask");
    const auto e1 = m->evaluate(p, d), e2 = m->evaluate(p, d);
    BOOST_TEST(e1.loss == e2.loss);
    auto plain = build(be, "conv2d:4:3x3:relu,flatten,dense:3", d, 20);
    BOOST_TEST(plain->evaluate(p, d).loss == e1.loss, "evaluation sees no dropout");
}

BOOST_AUTO_TEST_CASE(evaluation_in_chunks_equals_one_batch)
{
    compute::cpu_backend be(1);
    auto d = testing::make_image_data(23, 2, 5, 4, 3, 4);
    auto small = build(be, "conv2d:3:3x3:tanh,maxpool:2:same,dense:3", d, 5);  // 5 chunks, the last partial
    auto large = build(be, "conv2d:3:3x3:tanh,maxpool:2:same,dense:3", d, 23);
    std::vector<float> p(small->num_params());
    small->initialize(p, 2);
    const auto a = small->evaluate(p, d), b = large->evaluate(p, d);
    BOOST_TEST(a.loss == b.loss, boost::test_tools::tolerance(1e-6));
    BOOST_TEST(a.accuracy == b.accuracy);
    BOOST_TEST(a.examples == 23u);
}

BOOST_AUTO_TEST_CASE(a_small_cnn_learns)
{
    compute::cpu_backend be(1);
    // Labels from the brightest quadrant of the image: a convolution and a
    // pool find it; chance is 1/4.
    auto d = testing::make_image_data(400, 1, 8, 8, 4, 9);
    for (std::size_t i = 0; i < d.rows; ++i) {
        double q[4] = {0, 0, 0, 0};
        for (int y = 0; y < 8; ++y)
            for (int x = 0; x < 8; ++x) q[(y / 4) * 2 + x / 4] += d.features[i * 64 + y * 8 + x];
        d.labels[i] = static_cast<int>(std::max_element(q, q + 4) - q);
    }
    auto m = build(be, "conv2d:4:3x3:relu,avgpool:4,flatten,dense:4", d, 50);
    ps::optimizer_config cfg;
    cfg.kind = ps::optimizer_kind::adam;
    cfg.learning_rate = 0.02f;
    ps::parameter_shard shard({0, m->num_params()}, cfg);
    std::vector<float> init(m->num_params()), g(m->num_params());
    m->initialize(init, 1);
    shard.assign(init);
    data::sampler s(d.rows, 1, 0, 1, false);
    std::vector<std::uint32_t> rows;
    for (int step = 0; step < 300; ++step) {
        s.next_batch(50, rows);
        m->compute_gradients(shard.values(), d, rows, g);
        shard.apply(g);
    }
    const auto r = m->evaluate(shard.values(), d);
    BOOST_TEST_MESSAGE("training accuracy " << r.accuracy);
    BOOST_TEST(r.accuracy > 0.9);
}

using pstrain::testing::device_memory_backend;

BOOST_DATA_TEST_CASE(on_device_memory_a_step_gives_what_the_cpu_gives,
                     bdata::make({std::string("conv2d:4:3x3:relu,batchnorm,maxpool:2:same,conv2d:3:2x2:stride=2:tanh,"
                                              "avgpool:2:same,flatten,dropout:0.3,dense:5,batchnorm,dense:3"),
                                  std::string("conv2d:2:1x1:sigmoid,flatten,dense:3,softmax,loss:mse")}),
                     spec)
{
    compute::cpu_backend cpu(1);
    device_memory_backend dev;
    auto d = testing::make_image_data(9, 2, 7, 5, 3, 6);
    auto on_cpu = build(cpu, spec, d, 9);
    auto on_dev = build(dev, spec, d, 9);
    std::vector<float> p(on_cpu->num_params()), gc(p.size()), gd(p.size(), -1.0f);
    on_cpu->initialize(p, 4);
    std::vector<std::uint32_t> rows{8, 0, 3, 3, 5};
    for (int step = 0; step < 2; ++step) {  // the second step draws new dropout masks on both
        const auto lc = on_cpu->compute_gradients(p, d, rows, gc);
        const auto ld = on_dev->compute_gradients(p, d, rows, gd);
        BOOST_TEST(ld.loss == lc.loss);
        BOOST_TEST(ld.accuracy == lc.accuracy);
        BOOST_TEST((gd == gc), "every gradient comes back from the device");
    }
    const auto ec = on_cpu->evaluate(p, d), ed = on_dev->evaluate(p, d);
    BOOST_TEST(ed.loss == ec.loss);
    BOOST_TEST(ed.accuracy == ec.accuracy);
    BOOST_TEST(dev.copies_out >= 2);
    BOOST_TEST(dev.copies_in >= 6);  // parameters, batch and labels per step
}

// A CNN with dropout (its masks drawn each step); 50 images in batches of
// 8: the seventh batch crosses into the next epoch (not known ahead);
// evaluations between some steps gather other rows into the same input.
// On device memory the batch gathered ahead is also copied in ahead.
BOOST_DATA_TEST_CASE(a_batch_gathered_ahead_gives_the_same_steps_bit_for_bit, bdata::make({false, true}), on_device)
{
    auto run = [&](testing::curve_options how) {
        compute::cpu_backend cpu(1);
        device_memory_backend dev;
        compute::backend& be = on_device ? static_cast<compute::backend&>(dev) : cpu;
        auto d = testing::make_image_data(50, 1, 6, 6, 3, 2);
        auto m = build(be, "conv2d:4:3x3:relu,maxpool:2,flatten,dropout:0.3,dense:3", d, 8);
        return testing::adam_loss_curve(*m, d, 0.01f, 5, 30, 8, how);
    };
    const auto plain = run({});
    BOOST_TEST(run({.prefetch = true}) == plain);
    BOOST_TEST(run({.prefetch = true, .evaluate_every = 3}) == run({.prefetch = false, .evaluate_every = 3}));
}

BOOST_AUTO_TEST_CASE(wrong_data_is_refused)
{
    compute::cpu_backend be(1);
    auto d = testing::make_image_data(4, 1, 6, 6, 3, 1);
    auto m = build(be, "conv2d:2:3x3,dense:3", d);
    auto other = testing::make_image_data(4, 1, 5, 5, 3, 1);
    std::vector<float> p(m->num_params()), g(p.size());
    std::vector<std::uint32_t> rows{0};
    BOOST_CHECK_EXCEPTION(m->compute_gradients(p, other, rows, g), error, [](const error& e) {
        return std::string(e.what()) == "the data has 25 features per example but the model takes 1x6x6";
    });
    std::vector<std::uint32_t> too_many(17, 0);
    BOOST_CHECK_THROW(m->compute_gradients(p, d, too_many, g), error);
}

// Batch normalization through the model: gamma and beta against finite
// differences (after a convolution, per channel, and after a dense layer,
// per feature, batch 1 included); the moving mean and variance are
// moving-average tensors whose pushed values are the steps toward the
// batch's statistics; training ignores them and evaluation uses them.
BOOST_AUTO_TEST_CASE(batchnorm_trains_on_batch_statistics_and_evaluates_on_the_moving_ones)
{
    compute::cpu_backend be(1);
    const auto d = testing::make_image_data(12, 2, 5, 4, 3, 17);
    for (const char* spec : {"conv2d:3:3x3:tanh,batchnorm,flatten,dense:3", "flatten,dense:4,batchnorm,tanh,dense:3"}) {
        BOOST_TEST_CONTEXT(spec)
        {
            auto m = build(be, spec, d);
            std::vector<std::size_t> moving;
            for (std::size_t k = 0; k < m->tensors().size(); ++k)
                if (m->tensors()[k].moving_average) moving.push_back(k);
            BOOST_TEST_REQUIRE(moving.size() == 2u);
            const auto &tm = m->tensors()[moving[0]], &tv = m->tensors()[moving[1]];
            BOOST_TEST(tm.name.ends_with("/moving_mean"));
            BOOST_TEST(tv.name.ends_with("/moving_variance"));
            for (const std::vector<std::uint32_t>& rows :
                 {std::vector<std::uint32_t>{0, 3, 5, 7, 11}, std::vector<std::uint32_t>{4}}) {
                std::vector<float> p(m->num_params()), g(m->num_params()), scratch(m->num_params());
                m->initialize(p, 3);
                for (std::size_t i = 0; i < tv.size; ++i) {
                    BOOST_TEST(p[tm.offset + i] == 0.0f);
                    BOOST_TEST(p[tv.offset + i] == 1.0f);
                    p[tm.offset + i] = 0.5f;  // not the batch's statistics
                    p[tv.offset + i] = 2.0f;
                }
                const double loss = m->compute_gradients(p, d, rows, g).loss;
                const float eps = 1e-3f;
                for (std::size_t i = 0; i < p.size(); ++i) {
                    const bool is_moving =
                        (i >= tm.offset && i < tm.offset + tm.size) || (i >= tv.offset && i < tv.offset + tv.size);
                    const float saved = p[i];
                    p[i] = saved + eps;
                    const double up = m->compute_gradients(p, d, rows, scratch).loss;
                    p[i] = saved - eps;
                    const double down = m->compute_gradients(p, d, rows, scratch).loss;
                    p[i] = saved;
                    const double numeric = (up - down) / (2.0 * eps);
                    if (is_moving) {
                        BOOST_TEST_REQUIRE(numeric == 0.0, "training does not read moving statistic " << i);
                        continue;
                    }
                    BOOST_TEST_REQUIRE(std::fabs(g[i] - numeric) <= 2e-3 + 2e-2 * std::fabs(numeric),
                                       "param " << i << ": analytic " << g[i] << " numeric " << numeric);
                }
                // Pushed for the moving averages: 0.01 * (batch statistic - moving).
                // Batch 1 after a dense layer: each feature's variance is 0.
                if (rows.size() == 1 && std::string(spec).starts_with("flatten"))
                    for (std::size_t i = 0; i < tv.size; ++i)
                        BOOST_TEST(g[tv.offset + i] == 0.01f * (0.0f - 2.0f), boost::test_tools::tolerance(1e-5f));
                for (std::size_t i = 0; i < tv.size; ++i) {
                    BOOST_TEST(g[tm.offset + i] != 0.0f);
                    BOOST_TEST(std::fabs(g[tv.offset + i]) <= 0.01f * (2.0f + 100.0f));
                }
                (void)loss;
            }
            // Evaluation reads the moving statistics.
            std::vector<float> p(m->num_params());
            m->initialize(p, 3);
            const auto before = m->evaluate(p, d);
            for (std::size_t i = 0; i < tm.size; ++i) p[tm.offset + i] = 3.0f;
            const auto after = m->evaluate(p, d);
            BOOST_TEST(before.loss != after.loss);
        }
    }
}

BOOST_AUTO_TEST_CASE(batchnorm_parses_prints_and_counts_its_parameters)
{
    const auto s = model::parse_model_spec("conv2d:8:3x3,batchnorm,flatten,dense:10");
    BOOST_TEST(s.text() == "conv2d:8:3x3,batchnorm,flatten,dense:10");
    BOOST_TEST(model::layer_params(s.layers[1], {true, 8, 28, 28}) == 32u);
    BOOST_TEST(model::layer_params(s.layers[1], {false, 100, 1, 1}) == 400u);
    const auto j =
        model::parse_model_json(R"({"layers":["conv2d:8:3x3",{"type":"batchnorm"},"flatten","dense:10"]})", "m.json");
    BOOST_TEST(j.text() == s.text());
    BOOST_CHECK_EXCEPTION(model::parse_model_spec("conv2d:8:3x3,batchnorm:0.9,flatten,dense:10"), error,
                          [](const error& e) { return std::string(e.what()).find("batchnorm") != std::string::npos; });
}

// --precision bf16: a whole model's gradients against float32's, from the
// same weights and batch, dense and convolutional, on tanh and average
// pooling (smooth: no unit switches on or off as at a ReLU or a window's
// maximum, so the difference is the products' rounding alone).
// Documented bound: a product of bf16-rounded operands is off by a relative
// error of at most 2^-8 per operand; over a reduction of K terms the
// independent errors add like a random walk, a relative error of about
// 2^-8 sqrt(2/3) of the result.  A gradient passes through at most 2L = 6
// products (three layers forward, three back), whose errors add in
// quadrature: 2^-8 sqrt(6 * 2/3) = 2 * 2^-8 of its norm.  Each tensor's
// error norm must stay within twice that, 4 * 2^-8 of the tensor's norm,
// and each element within 2^-8 sqrt(K) of the tensor's largest gradient
// (K = 256, the longest reduction of the dense model; the convolutional
// one's is 8 * 3 * 3 = 72 or 7 * 7 * 16 = 784 for the dense layer); the
// loss within 2^-8 of float32's.
namespace {

// A model spec and its data: features, or images c x h x w.
struct bf16_case {
    const char* spec;
    int channels, height, width;
};
std::ostream& operator<<(std::ostream& os, const bf16_case& c) { return os << c.spec; }

const bf16_case bf16_cases[] = {
    {"dense:128:tanh,dense:64:tanh,dense:10", 0, 0, 0},
    {"conv2d:8:3x3:tanh,avgpool:2,conv2d:16:3x3:tanh,flatten,dense:10", 1, 16, 16},
};

}  // namespace

BOOST_TEST_DECORATOR(*boost::unit_test::precondition(testing::bf16_here()))
BOOST_DATA_TEST_CASE(bf16_gradients_are_within_bf16_rounding_of_fp32_ones, bdata::make(bf16_cases), c)
{
    const auto fp32 = compute::make_backend(compute::device_kind::cpu, compute::precision::fp32, 1);
    const auto bf16 = compute::make_backend(compute::device_kind::cpu, compute::precision::bf16, 1);
    auto d = c.channels ? testing::make_image_data(64, c.channels, c.height, c.width, 10, 5)
                        : testing::make_random_data(64, 256, 10, 5);
    auto m32 = build(*fp32, c.spec, d, 64), m16 = build(*bf16, c.spec, d, 64);
    std::vector<float> p(m32->num_params()), g32(p.size()), g16(p.size());
    m32->initialize(p, 3);
    std::vector<std::uint32_t> rows(64);
    std::iota(rows.begin(), rows.end(), 0u);
    const double l32 = m32->compute_gradients(p, d, rows, g32).loss;
    const double l16 = m16->compute_gradients(p, d, rows, g16).loss;
    BOOST_TEST(std::fabs(l16 - l32) <= 0x1p-8 * l32, "loss " << l16 << " against " << l32);
    const double u = 0x1p-8, k = c.channels ? 784 : 256;
    for (const auto& t : m32->tensors()) {
        double largest = 0, worst = 0, err2 = 0, norm2 = 0;
        for (std::size_t i = t.offset; i < t.offset + t.size; ++i) {
            const double e = double(g16[i]) - g32[i];
            largest = std::max(largest, double(std::fabs(g32[i])));
            worst = std::max(worst, std::fabs(e));
            err2 += e * e;
            norm2 += double(g32[i]) * g32[i];
        }
        const double relative = std::sqrt(err2 / norm2);
        BOOST_TEST(relative <= 4 * u, t.name << ": error norm / norm " << relative);
        BOOST_TEST(worst <= u * std::sqrt(k) * largest, t.name << ": error " << worst << ", largest " << largest);
        BOOST_TEST(worst > 0.0, t.name << " is bf16's, not float32's");
        BOOST_TEST_MESSAGE(t.name << ": error norm / norm " << relative << ", largest error / largest "
                                  << worst / largest);
    }
}

// The overlapped step's hook: during backward, the last layers first, each
// call says [from, end) of the host gradient is complete (it is the final
// gradient already), with the batch's loss; the calls go down to 0, and
// the gradient is the one computed without a hook.  On device memory the
// layers' gradients come to the host on copies that land late (a copy
// stream's): a call tells only what has landed, and some land while
// backward goes on.
BOOST_DATA_TEST_CASE(the_gradient_ready_hook_tells_each_finished_tail_of_the_gradient_in_backward_order,
                     bdata::make({std::string("mlp"),
                                  std::string("conv2d:4:3x3:relu,batchnorm,maxpool:2,flatten,dense:8:relu,dense:3")}) *
                         bdata::make({false, true}),
                     kind, on_device)
{
    compute::cpu_backend cpu(1);
    device_memory_backend dev;
    compute::backend& be = on_device ? static_cast<compute::backend&>(dev) : cpu;
    auto d = testing::make_image_data(6, 1, 8, 8, 3, 5);
    auto m = kind == "mlp" ? model::make_mlp(be, 64, {12, 7}, 3, 8) : build(be, kind, d);
    std::vector<float> p(m->num_params()), g(m->num_params(), -1.0f), without(m->num_params());
    m->initialize(p, 2);
    const std::vector<std::uint32_t> rows{0, 1, 2, 3, 4, 5};
    const auto plain = m->compute_gradients(p, d, rows, without);
    struct call {
        std::size_t from;
        double loss;
        std::vector<float> tail;
    };
    std::vector<call> calls;
    m->on_gradient_ready([&](std::size_t from, double loss) {
        calls.push_back({from, loss, std::vector<float>(g.begin() + static_cast<std::ptrdiff_t>(from), g.end())});
    });
    const auto r = m->compute_gradients(p, d, rows, g);
    BOOST_TEST(g == without, boost::test_tools::per_element());
    BOOST_TEST(r.loss == plain.loss);
    BOOST_TEST_REQUIRE(calls.size() >= 3u);  // every weighted layer, then the end
    BOOST_TEST(calls.back().from == 0u);
    BOOST_TEST(calls.front().from > 0u);
    BOOST_TEST(std::any_of(calls.begin(), calls.end() - 1,
                           [&](const call& c) { return c.from > 0 && c.from < m->num_params(); }),
               "a tail of the gradient was told before the end");
    for (std::size_t k = 0; k < calls.size(); ++k) {
        if (k > 0) BOOST_TEST(calls[k].from <= calls[k - 1].from);
        BOOST_TEST(calls[k].loss == r.loss);
        BOOST_TEST(calls[k].tail == std::vector<float>(g.begin() + static_cast<std::ptrdiff_t>(calls[k].from), g.end()),
                   boost::test_tools::per_element());
    }
}
