// The CPU layer kernels against the direct oracle (trainer/compute/oracle.hpp):
// forward and backward of convolution, pooling, activations, softmax, mean
// squared error and dropout, on odd shapes: 1x1 kernels, strides > 1, same
// and valid padding, even kernels (the odd padding row at the bottom),
// batch 1, non-square images, several channels.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE cpu_layers
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/compute/conv2d.hpp"
#include "trainer/compute/cpu_layers.hpp"
#include "tests/unit/trainer/compute/bf16_here.hpp"
#include "trainer/compute/oracle.hpp"

#include <cfloat>
#include <cmath>
#include <random>
#include <string>
#include <vector>

using namespace pstrain;
namespace oracle = pstrain::compute::oracle;
namespace cpu = pstrain::compute::cpu;
namespace bdata = boost::unit_test::data;

namespace {

// Documented tolerance: float32 kernels against double references, sums of
// at most a few hundred products of values below ~3.
constexpr double atol = 1e-4, rtol = 1e-4;

std::vector<float> random_floats(std::size_t n, unsigned seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist;
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

oracle::vec widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// `terms`: how many products of unit-normal values each element sums.  A
// float sum of K such terms is off by about K * FLT_EPSILON whatever its
// result (the partial sums are of size sqrt(K), and blocked or threaded
// kernels add them in varying orders), so a long reduction whose result
// happens to be near zero gets that much more than atol + rtol * |ref|.
void expect_close(const std::vector<float>& got, const oracle::vec& want, const char* what, std::size_t terms = 0)
{
    BOOST_TEST_REQUIRE(got.size() == want.size());
    const double reduction = 4.0 * FLT_EPSILON * static_cast<double>(terms);
    for (std::size_t i = 0; i < got.size(); ++i)
        BOOST_TEST_REQUIRE(std::fabs(got[i] - want[i]) <= atol + reduction + rtol * std::fabs(want[i]),
                           what << "[" << i << "]: got " << got[i] << ", oracle " << want[i]);
}

struct conv_case {
    int n, c, h, w, filters, kh, kw, sh, sw;
    bool same;
};

std::ostream& operator<<(std::ostream& os, const conv_case& k)
{
    return os << k.n << "x" << k.c << "x" << k.h << "x" << k.w << " * " << k.filters << "x" << k.kh << "x" << k.kw
              << " stride " << k.sh << "x" << k.sw << (k.same ? " same" : " valid");
}

const conv_case conv_cases[] = {
    {2, 3, 7, 5, 4, 3, 3, 1, 1, true},      // several channels, non-square
    {1, 1, 5, 5, 2, 1, 1, 1, 1, false},     // 1x1 kernel, batch 1 (the direct path)
    {2, 2, 6, 9, 3, 1, 1, 2, 2, false},     // 1x1 kernel with stride 2
    {3, 2, 9, 6, 3, 3, 2, 2, 3, true},      // non-square kernel, unequal strides
    {1, 4, 8, 8, 2, 5, 5, 2, 2, false},     // stride 2 valid
    {2, 1, 8, 7, 2, 4, 4, 1, 1, true},      // even kernel: the odd padding row at the bottom
    {2, 3, 5, 4, 2, 5, 4, 1, 1, false},     // kernel as large as the image: 1x1 output
    {1, 2, 3, 3, 2, 5, 5, 1, 1, true},      // kernel larger than the image, same padding
    {2, 1, 28, 28, 4, 5, 5, 1, 1, true},    // the cnn preset's first layer
    {2, 2, 7, 7, 3, 3, 3, 3, 3, true},      // stride 3 same
    {30, 32, 14, 14, 4, 5, 5, 1, 1, true},  // the cnn preset's second layer: chunks of 13, 13 and 4 images
};

compute::window2d window_of(const conv_case& k)
{
    compute::window2d w{k.c, k.h, k.w, k.kh, k.kw, k.sh, k.sw};
    BOOST_TEST_REQUIRE(compute::resolve_padding(w, k.same));
    return w;
}

oracle::geometry geometry_of(const conv_case& k)
{
    oracle::geometry g{k.n, k.c, k.h, k.w, k.kh, k.kw, k.sh, k.sw, k.same};
    return g.resolve();
}

}  // namespace

BOOST_DATA_TEST_CASE(padding_matches_tensorflow, bdata::make(conv_cases), k)
{
    auto w = window_of(k);
    auto g = geometry_of(k);
    BOOST_TEST(w.out_h == g.oh);
    BOOST_TEST(w.out_w == g.ow);
    BOOST_TEST(w.pad_top == g.pt);
    BOOST_TEST(w.pad_left == g.pl);
}

BOOST_AUTO_TEST_CASE(valid_window_larger_than_the_image_is_refused)
{
    compute::window2d w{1, 4, 4, 5, 5, 1, 1};
    BOOST_TEST(!compute::resolve_padding(w, false));
    BOOST_TEST(compute::resolve_padding(w, true));
    BOOST_TEST(w.out_h == 4);
}

BOOST_DATA_TEST_CASE(conv2d_forward_and_backward_match_the_oracle, bdata::make(conv_cases), k)
{
    auto w = window_of(k);
    auto g = geometry_of(k);
    const std::size_t in = std::size_t(k.n) * k.c * k.h * k.w;
    const std::size_t out = std::size_t(k.n) * k.filters * w.out_h * w.out_w;
    auto x = random_floats(in, 1);
    auto kernel = random_floats(std::size_t(k.filters) * k.c * k.kh * k.kw, 2);
    auto bias = random_floats(std::size_t(k.filters), 3);
    auto dy = random_floats(out, 4);
    std::vector<float> y(out), col(cpu::conv2d_workspace(w, k.filters, k.n)), dx(in, 7.0f), dk(kernel.size(), 7.0f),
        db(bias.size(), 7.0f);
    cpu::conv2d_forward(x.data(), kernel.data(), bias.data(), y.data(), k.n, k.filters, w, col.data());
    const std::size_t per_output = std::size_t(k.c) * k.kh * k.kw, per_kernel = out / k.filters;
    expect_close(y, oracle::conv2d_forward(g, k.filters, widen(x), widen(kernel), widen(bias)), "y", per_output);

    oracle::vec rdx, rdk, rdb;
    oracle::conv2d_backward(g, k.filters, widen(x), widen(kernel), widen(dy), rdx, rdk, rdb);
    cpu::conv2d_backward(x.data(), kernel.data(), dy.data(), dx.data(), dk.data(), db.data(), k.n, k.filters, w,
                         col.data());
    expect_close(dx, rdx, "dx", std::size_t(k.filters) * k.kh * k.kw);
    expect_close(dk, rdk, "dkernel", per_kernel);
    expect_close(db, rdb, "dbias", per_kernel);

    // Without dx (the first layer) the parameter gradients are the same.
    std::fill(dk.begin(), dk.end(), 7.0f);
    cpu::conv2d_backward(x.data(), kernel.data(), dy.data(), nullptr, dk.data(), db.data(), k.n, k.filters, w,
                         col.data());
    expect_close(dk, rdk, "dkernel without dx", per_kernel);
}

// The layer kernels the models use, each built one against the same
// oracle: im2col always, oneDNN when pstrain is built with it; a kernel
// made once serves batches of several sizes (its largest first and after).
BOOST_DATA_TEST_CASE(conv2d_kernels_match_the_oracle, bdata::make(conv_cases), k)
{
    std::vector<cpu::conv2d_impl> impls{cpu::conv2d_impl::im2col};
    if (cpu::have_onednn()) impls.push_back(cpu::conv2d_impl::onednn);
    auto w = window_of(k);
    for (auto impl : impls) {
        auto conv = cpu::make_conv2d(w, k.filters, k.n, impl);
        for (int n : {k.n, 1, k.n}) {
            oracle::geometry g{n, k.c, k.h, k.w, k.kh, k.kw, k.sh, k.sw, k.same};
            g = g.resolve();
            const std::size_t in = std::size_t(n) * k.c * k.h * k.w;
            const std::size_t out = std::size_t(n) * k.filters * w.out_h * w.out_w;
            auto x = random_floats(in, 11 + n),
                 kernel = random_floats(std::size_t(k.filters) * k.c * k.kh * k.kw, 12 + n);
            auto bias = random_floats(std::size_t(k.filters), 13), dy = random_floats(out, 14 + n);
            std::vector<float> y(out, 7.0f), dx(in, 7.0f), dk(kernel.size(), 7.0f), db(bias.size(), 7.0f);
            BOOST_TEST_CONTEXT(conv->name() << ", batch " << n)
            {
                conv->forward(x.data(), kernel.data(), bias.data(), y.data(), n);
                const std::size_t per_output = std::size_t(k.c) * k.kh * k.kw, per_kernel = out / k.filters;
                expect_close(y, oracle::conv2d_forward(g, k.filters, widen(x), widen(kernel), widen(bias)), "y",
                             per_output);
                oracle::vec rdx, rdk, rdb;
                oracle::conv2d_backward(g, k.filters, widen(x), widen(kernel), widen(dy), rdx, rdk, rdb);
                conv->backward(x.data(), kernel.data(), dy.data(), dx.data(), dk.data(), db.data(), n);
                expect_close(dx, rdx, "dx", std::size_t(k.filters) * k.kh * k.kw);
                expect_close(dk, rdk, "dkernel", per_kernel);
                expect_close(db, rdb, "dbias", per_kernel);
                std::fill(dk.begin(), dk.end(), 7.0f);
                conv->backward(x.data(), kernel.data(), dy.data(), nullptr, dk.data(), db.data(), n);
                expect_close(dk, rdk, "dkernel without dx", per_kernel);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(a_conv2d_kernel_is_chosen_by_name)
{
    compute::window2d w{1, 4, 4, 3, 3, 1, 1};
    BOOST_TEST_REQUIRE(compute::resolve_padding(w, true));
    BOOST_TEST(std::string(cpu::make_conv2d(w, 2, 4, cpu::conv2d_impl::im2col)->name()) == "im2col");
    BOOST_TEST(std::string(cpu::make_conv2d(w, 2, 4)->name()) == "im2col", "one input channel: im2col is faster");
    compute::window2d deep{8, 4, 4, 3, 3, 1, 1};
    BOOST_TEST_REQUIRE(compute::resolve_padding(deep, true));
    BOOST_TEST(std::string(cpu::make_conv2d(deep, 2, 4)->name()) == (cpu::have_onednn() ? "onednn" : "im2col"));
    if (!cpu::have_onednn()) BOOST_CHECK_THROW(cpu::make_conv2d(w, 2, 4, cpu::conv2d_impl::onednn), pstrain::error);
    setenv("PSTRAIN_CONV", "winograd", 1);
    BOOST_CHECK_THROW(cpu::make_conv2d(w, 2, 4), pstrain::error);
    setenv("PSTRAIN_CONV", "im2col", 1);
    BOOST_TEST(std::string(cpu::make_conv2d(w, 2, 4)->name()) == "im2col");
    unsetenv("PSTRAIN_CONV");
}

namespace {

struct pool_case {
    int n, c, h, w, kh, kw, sh, sw;
    bool same;
};

std::ostream& operator<<(std::ostream& os, const pool_case& k)
{
    return os << k.n << "x" << k.c << "x" << k.h << "x" << k.w << " pool " << k.kh << "x" << k.kw << " stride " << k.sh
              << "x" << k.sw << (k.same ? " same" : " valid");
}

const pool_case pool_cases[] = {
    {2, 3, 28, 28, 2, 2, 2, 2, false},  // the presets' pools
    {1, 1, 7, 7, 2, 2, 2, 2, false},    // odd size: the last row and column dropped
    {1, 2, 7, 5, 2, 2, 2, 2, true},     // same: a partial window at the bottom and right
    {2, 2, 6, 9, 3, 3, 2, 2, false},    // overlapping windows
    {1, 1, 5, 6, 3, 2, 1, 3, true},     // non-square window, unequal strides
    {3, 1, 4, 4, 1, 1, 1, 1, false},    // 1x1: identity
};

}  // namespace

BOOST_DATA_TEST_CASE(pooling_matches_the_oracle, bdata::make(pool_cases), k)
{
    compute::window2d w{k.c, k.h, k.w, k.kh, k.kw, k.sh, k.sw};
    BOOST_TEST_REQUIRE(compute::resolve_padding(w, k.same));
    oracle::geometry g{k.n, k.c, k.h, k.w, k.kh, k.kw, k.sh, k.sw, k.same};
    g.resolve();
    const std::size_t in = std::size_t(k.n) * k.c * k.h * k.w, out = std::size_t(k.n) * k.c * w.out_h * w.out_w;
    auto x = random_floats(in, 5);
    auto dy = random_floats(out, 6);
    std::vector<float> y(out), dx(in, 7.0f);
    std::vector<std::int32_t> argmax(out);

    cpu::maxpool_forward(x.data(), y.data(), argmax.data(), k.n, w);
    expect_close(y, oracle::pool_forward(g, true, widen(x)), "max y");
    cpu::maxpool_backward(dy.data(), argmax.data(), dx.data(), k.n, w);
    expect_close(dx, oracle::pool_backward(g, true, widen(x), widen(dy)), "max dx");

    std::fill(dx.begin(), dx.end(), 7.0f);
    cpu::avgpool_forward(x.data(), y.data(), k.n, w);
    expect_close(y, oracle::pool_forward(g, false, widen(x)), "avg y");
    cpu::avgpool_backward(dy.data(), dx.data(), k.n, w);
    expect_close(dx, oracle::pool_backward(g, false, widen(x), widen(dy)), "avg dx");
}

BOOST_DATA_TEST_CASE(activations_match_the_oracle, bdata::make({0, 1, 2}), kind)
{
    const compute::activation a[] = {compute::activation::relu, compute::activation::tanh,
                                     compute::activation::sigmoid};
    auto x = random_floats(301, 8);
    auto dy = random_floats(301, 9);
    std::vector<float> y(x.size()), dx(x.size());
    cpu::activation_forward(a[kind], x.data(), y.data(), x.size());
    cpu::activation_backward(a[kind], y.data(), dy.data(), dx.data(), x.size());
    oracle::vec ry(x.size()), rdx(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        ry[i] = oracle::activation(kind, x[i]);
        rdx[i] = dy[i] * oracle::activation_derivative(kind, x[i]);
    }
    expect_close(y, ry, "y");
    expect_close(dx, rdx, "dx");
}

BOOST_AUTO_TEST_CASE(softmax_and_its_backward_match_the_oracle)
{
    const int rows = 5, classes = 7;
    auto x = random_floats(rows * classes, 10);
    x[3] = 80.0f;  // large logits stay finite
    auto dy = random_floats(x.size(), 11);
    std::vector<float> y(x.size()), dx(x.size());
    cpu::softmax_forward(x.data(), y.data(), rows, classes);
    const auto ry = oracle::softmax(widen(x), rows, classes);
    expect_close(y, ry, "y");
    cpu::softmax_backward(y.data(), dy.data(), dx.data(), rows, classes);
    expect_close(dx, oracle::softmax_backward(ry, widen(dy), rows, classes), "dx");
}

BOOST_AUTO_TEST_CASE(mean_squared_error_against_one_hot_labels)
{
    const int rows = 4, classes = 3;
    auto p = random_floats(rows * classes, 12);
    const std::vector<std::int32_t> labels{0, 2, 1, 2};
    std::vector<float> d(p.size());
    auto sums = cpu::mse_onehot(p.data(), labels.data(), d.data(), rows, classes);
    double loss = 0;
    std::int64_t correct = 0;
    oracle::vec rd(p.size());
    for (int r = 0; r < rows; ++r) {
        int best = 0;
        for (int c = 0; c < classes; ++c) {
            const double diff = p[r * classes + c] - (c == labels[r] ? 1.0 : 0.0);
            loss += diff * diff / classes;
            rd[r * classes + c] = 2.0 * diff / (rows * classes);
            if (p[r * classes + c] > p[r * classes + best]) best = c;
        }
        correct += best == labels[r];
    }
    BOOST_TEST(sums.loss == loss, boost::test_tools::tolerance(1e-6));
    BOOST_TEST(sums.correct == correct);
    expect_close(d, rd, "dpred");
}

BOOST_AUTO_TEST_CASE(dropout_is_inverted_seeded_and_its_backward_uses_the_mask)
{
    const std::size_t n = 100000;
    std::vector<float> x(n, 1.0f), y(n), mask(n), y2(n), mask2(n), dx(n);
    cpu::dropout_forward(x.data(), y.data(), mask.data(), n, 0.4f, 42);
    std::size_t kept = 0;
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
        BOOST_TEST_REQUIRE((y[i] == 0.0f || std::fabs(y[i] - 1.0f / 0.6f) < 1e-6));
        kept += y[i] != 0.0f;
        sum += y[i];
    }
    // 60% kept (binomial: 4 standard deviations is 0.6%); the mean is kept.
    BOOST_TEST(std::fabs(double(kept) / n - 0.6) < 0.006);
    BOOST_TEST(std::fabs(sum / n - 1.0) < 0.01);
    cpu::dropout_forward(x.data(), y2.data(), mask2.data(), n, 0.4f, 42);
    BOOST_TEST((mask == mask2), "the same seed draws the same mask");
    cpu::dropout_forward(x.data(), y2.data(), mask2.data(), n, 0.4f, 43);
    BOOST_TEST((mask != mask2), "another seed draws another mask");
    auto dy = random_floats(n, 13);
    cpu::dropout_backward(dy.data(), mask.data(), dx.data(), n);
    for (std::size_t i = 0; i < n; i += 997) BOOST_TEST(dx[i] == dy[i] * mask[i]);
}

// Batch normalization against a naive double-precision oracle: statistics
// by their definitions, the input gradient through the full Jacobian
// dy_i/dx_k = gamma * inv_std * (delta_ik - 1/M - xhat_i * xhat_k / M) of
// each channel's M = n * inner values, and that Jacobian against central
// finite differences of the oracle's own forward pass.
namespace {

struct bn_case {
    int n, channels, inner;
};

std::ostream& operator<<(std::ostream& os, const bn_case& k)
{
    return os << k.n << "x" << k.channels << "x" << k.inner;
}

const bn_case bn_cases[] = {
    {4, 3, 35},  // after a convolution: 3 channels of non-square 5x7 planes
    {1, 2, 12},  // batch 1: statistics over one image's 3x4 plane
    {8, 5, 1},   // after a dense layer: per feature over the batch
    {3, 1, 2},   // one channel, tiny batch
    {2, 4, 9},   // 3x3 planes, batch 2
};

constexpr float bn_eps = 1e-3f;

struct bn_oracle {
    oracle::vec y, mean, var;
};

std::size_t bn_at(const bn_case& k, int i, int c, int j) { return (std::size_t(i) * k.channels + c) * k.inner + j; }

bn_oracle bn_forward(const bn_case& k, const oracle::vec& x, const oracle::vec& gamma, const oracle::vec& beta)
{
    bn_oracle o{oracle::vec(x.size()), oracle::vec(k.channels), oracle::vec(k.channels)};
    const double m = double(k.n) * k.inner;
    for (int c = 0; c < k.channels; ++c) {
        double s = 0;
        for (int i = 0; i < k.n; ++i)
            for (int j = 0; j < k.inner; ++j) s += x[bn_at(k, i, c, j)];
        o.mean[c] = s / m;
        double v = 0;
        for (int i = 0; i < k.n; ++i)
            for (int j = 0; j < k.inner; ++j)
                v += (x[bn_at(k, i, c, j)] - o.mean[c]) * (x[bn_at(k, i, c, j)] - o.mean[c]);
        o.var[c] = v / m;
        for (int i = 0; i < k.n; ++i)
            for (int j = 0; j < k.inner; ++j)
                o.y[bn_at(k, i, c, j)] =
                    gamma[c] * (x[bn_at(k, i, c, j)] - o.mean[c]) / std::sqrt(o.var[c] + bn_eps) + beta[c];
    }
    return o;
}

// dx through the full Jacobian, dgamma and dbeta by their definitions.
void bn_backward(const bn_case& k, const oracle::vec& x, const oracle::vec& gamma, const oracle::vec& dy,
                 oracle::vec& dx, oracle::vec& dgamma, oracle::vec& dbeta)
{
    const auto o = bn_forward(k, x, gamma, oracle::vec(k.channels, 0.0));
    const double m = double(k.n) * k.inner;
    dx.assign(x.size(), 0.0);
    dgamma.assign(k.channels, 0.0);
    dbeta.assign(k.channels, 0.0);
    for (int c = 0; c < k.channels; ++c) {
        const double inv = 1.0 / std::sqrt(o.var[c] + bn_eps);
        auto xhat = [&](std::size_t p) { return (x[p] - o.mean[c]) * inv; };
        for (int i = 0; i < k.n; ++i)
            for (int j = 0; j < k.inner; ++j) {
                const auto p = bn_at(k, i, c, j);
                dbeta[c] += dy[p];
                dgamma[c] += dy[p] * xhat(p);
                for (int i2 = 0; i2 < k.n; ++i2)
                    for (int j2 = 0; j2 < k.inner; ++j2) {
                        const auto q = bn_at(k, i2, c, j2);
                        const double jac = gamma[c] * inv * ((p == q ? 1.0 : 0.0) - 1.0 / m - xhat(p) * xhat(q) / m);
                        dx[q] += dy[p] * jac;
                    }
            }
    }
}

}  // namespace

BOOST_DATA_TEST_CASE(batchnorm_training_forward_and_backward_match_the_oracle, bdata::make(bn_cases), k)
{
    const std::size_t count = std::size_t(k.n) * k.channels * k.inner;
    auto x = random_floats(count, 21);
    for (auto& v : x) v = 1.5f + 2.0f * v;  // away from zero mean and unit variance
    auto gamma = random_floats(k.channels, 22), beta = random_floats(k.channels, 23), dy = random_floats(count, 24);
    std::vector<float> y(count), mean(k.channels), var(k.channels), inv_std(k.channels), dx(count), dgamma(k.channels),
        dbeta(k.channels);
    cpu::batchnorm_forward_train(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(), inv_std.data(),
                                 k.n, k.channels, k.inner, bn_eps);
    const auto o = bn_forward(k, widen(x), widen(gamma), widen(beta));
    expect_close(y, o.y, "y");
    expect_close(mean, o.mean, "mean");
    expect_close(var, o.var, "var");
    cpu::batchnorm_backward(x.data(), gamma.data(), mean.data(), inv_std.data(), dy.data(), dx.data(), dgamma.data(),
                            dbeta.data(), k.n, k.channels, k.inner);
    oracle::vec rdx, rdgamma, rdbeta;
    bn_backward(k, widen(x), widen(gamma), widen(dy), rdx, rdgamma, rdbeta);
    expect_close(dx, rdx, "dx");
    expect_close(dgamma, rdgamma, "dgamma");
    expect_close(dbeta, rdbeta, "dbeta");
    // dx without the input gradient leaves dx alone and gives the same parameter gradients.
    std::vector<float> dgamma2(k.channels), dbeta2(k.channels);
    cpu::batchnorm_backward(x.data(), gamma.data(), mean.data(), inv_std.data(), dy.data(), nullptr, dgamma2.data(),
                            dbeta2.data(), k.n, k.channels, k.inner);
    BOOST_TEST((dgamma2 == dgamma));
    BOOST_TEST((dbeta2 == dbeta));
}

BOOST_DATA_TEST_CASE(batchnorm_oracle_gradients_match_finite_differences, bdata::make(bn_cases), k)
{
    const std::size_t count = std::size_t(k.n) * k.channels * k.inner;
    auto x = widen(random_floats(count, 31)), gamma = widen(random_floats(k.channels, 32)),
         beta = widen(random_floats(k.channels, 33)), dy = widen(random_floats(count, 34));
    oracle::vec dx, dgamma, dbeta;
    bn_backward(k, x, gamma, dy, dx, dgamma, dbeta);
    // loss = sum dy * y
    auto loss = [&](const oracle::vec& xx, const oracle::vec& g, const oracle::vec& b) {
        const auto o = bn_forward(k, xx, g, b);
        double l = 0;
        for (std::size_t i = 0; i < count; ++i) l += dy[i] * o.y[i];
        return l;
    };
    const double h = 1e-5;
    auto check = [&](oracle::vec& v, const oracle::vec& grad, const char* what) {
        for (std::size_t i = 0; i < v.size(); ++i) {
            const double keep = v[i];
            v[i] = keep + h;
            const double up = loss(x, gamma, beta);
            v[i] = keep - h;
            const double down = loss(x, gamma, beta);
            v[i] = keep;
            const double fd = (up - down) / (2 * h);
            BOOST_TEST_REQUIRE(std::fabs(fd - grad[i]) <= 1e-5 + 1e-4 * std::fabs(fd),
                               what << "[" << i << "]: finite difference " << fd << ", oracle " << grad[i]);
        }
    };
    check(x, dx, "dx");
    check(gamma, dgamma, "dgamma");
    check(beta, dbeta, "dbeta");
}

BOOST_AUTO_TEST_CASE(batchnorm_of_a_single_dense_row_outputs_beta_with_finite_gradients)
{
    // Batch 1 after a dense layer: each feature's variance is 0, so xhat is 0.
    const bn_case k{1, 3, 1};
    std::vector<float> x{2.0f, -1.0f, 0.5f}, gamma{1.0f, 2.0f, 3.0f}, beta{0.1f, 0.2f, 0.3f}, dy{1.0f, -2.0f, 0.5f},
        y(3), mean(3), var(3), inv_std(3), dx(3), dgamma(3), dbeta(3);
    cpu::batchnorm_forward_train(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(), inv_std.data(),
                                 k.n, k.channels, k.inner, bn_eps);
    cpu::batchnorm_backward(x.data(), gamma.data(), mean.data(), inv_std.data(), dy.data(), dx.data(), dgamma.data(),
                            dbeta.data(), k.n, k.channels, k.inner);
    for (int c = 0; c < 3; ++c) {
        BOOST_TEST(y[c] == beta[c]);
        BOOST_TEST(var[c] == 0.0f);
        BOOST_TEST(dx[c] == 0.0f);
        BOOST_TEST(dgamma[c] == 0.0f);
        BOOST_TEST(dbeta[c] == dy[c]);
    }
}

BOOST_AUTO_TEST_CASE(batchnorm_evaluation_uses_the_moving_statistics)
{
    const bn_case k{3, 2, 4};
    const std::size_t count = 24;
    auto x = random_floats(count, 41);
    const std::vector<float> gamma{1.5f, -0.5f}, beta{0.25f, 1.0f}, moving_mean{0.3f, -1.0f}, moving_var{2.0f, 0.5f};
    std::vector<float> y(count);
    cpu::batchnorm_forward_eval(x.data(), gamma.data(), beta.data(), moving_mean.data(), moving_var.data(), y.data(),
                                k.n, k.channels, k.inner, bn_eps);
    oracle::vec want(count);
    for (int i = 0; i < k.n; ++i)
        for (int c = 0; c < k.channels; ++c)
            for (int j = 0; j < k.inner; ++j) {
                const auto p = bn_at(k, i, c, j);
                want[p] =
                    gamma[c] * (double(x[p]) - moving_mean[c]) / std::sqrt(double(moving_var[c]) + bn_eps) + beta[c];
            }
    expect_close(y, want, "y");
    // Not the batch's statistics: training mode on the same batch differs.
    std::vector<float> yt(count), mean(2), var(2), inv_std(2);
    cpu::batchnorm_forward_train(x.data(), gamma.data(), beta.data(), yt.data(), mean.data(), var.data(),
                                 inv_std.data(), k.n, k.channels, k.inner, bn_eps);
    BOOST_TEST((yt != y));
}

BOOST_AUTO_TEST_CASE(moving_average_delta_steps_toward_the_batch_statistic)
{
    // moving += (1 - momentum) * (batch - moving), applied 200 times at
    // momentum 0.9, is within 0.9^200 of the batch value; one step is exact.
    std::vector<float> batch{1.0f, -2.0f, 0.0f}, moving{0.0f, 0.0f, 1.0f}, delta(3);
    cpu::moving_average_delta(batch.data(), moving.data(), delta.data(), 3, 0.9f);
    BOOST_TEST(delta[0] == 0.1f * 1.0f, boost::test_tools::tolerance(1e-6f));
    BOOST_TEST(delta[1] == 0.1f * -2.0f, boost::test_tools::tolerance(1e-6f));
    BOOST_TEST(delta[2] == 0.1f * -1.0f, boost::test_tools::tolerance(1e-6f));
    for (int s = 0; s < 200; ++s) {
        cpu::moving_average_delta(batch.data(), moving.data(), delta.data(), 3, 0.9f);
        for (int i = 0; i < 3; ++i) moving[i] += delta[i];
    }
    for (int i = 0; i < 3; ++i) BOOST_TEST(std::fabs(moving[i] - batch[i]) < 1e-5);
}

// --precision bf16: oneDNN's bf16 convolution against the oracle.  As for
// the dense products (test_matmul_bf16): every output sums K products of
// operands rounded to bf16 (8 significant bits, a relative error of at most
// u = 2^-8 each) in float32, so it is within
// (2u + u^2 + 2 K 2^-24) * sum |a_k b_k| of the exact sum, where the sums of
// |a_k b_k| are the oracle's own convolution of |x|, |k| and |dy|.  And
// some element is further off than float32 alone could be: bf16 ran.
namespace {

oracle::vec absolute(const std::vector<float>& v)
{
    oracle::vec a(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(v[i]);
    return a;
}

// Returns the largest error over the float32 bound (2 K 2^-24 * sum).
double expect_within_bf16(const std::vector<float>& got, const oracle::vec& want, const oracle::vec& sum_abs,
                          std::size_t terms, const char* what)
{
    BOOST_TEST_REQUIRE(got.size() == want.size());
    const double u = 0x1p-8, k = static_cast<double>(terms), fp32 = 2 * k * 0x1p-24;
    double excess = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(got[i] - want[i]);
        BOOST_TEST_REQUIRE(err <= (2 * u + u * u + fp32) * sum_abs[i] + 1e-30,
                           what << "[" << i << "]: got " << got[i] << ", oracle " << want[i]);
        excess = std::max(excess, err / (fp32 * sum_abs[i] + 1e-30));
    }
    return excess;
}

}  // namespace

BOOST_TEST_DECORATOR(*boost::unit_test::precondition(testing::bf16_here()))
BOOST_DATA_TEST_CASE(bf16_conv2d_matches_the_oracle_within_bf16_rounding, bdata::make(conv_cases), k)
{
    auto w = window_of(k);
    auto g = geometry_of(k);
    const std::size_t in = std::size_t(k.n) * k.c * k.h * k.w;
    const std::size_t out = std::size_t(k.n) * k.filters * w.out_h * w.out_w;
    auto x = random_floats(in, 1), kernel = random_floats(std::size_t(k.filters) * k.c * k.kh * k.kw, 2),
         dy = random_floats(out, 4);
    const std::vector<float> zero(std::size_t(k.filters), 0.0f);
    auto conv = cpu::make_conv2d(w, k.filters, k.n, cpu::conv2d_impl::automatic, compute::precision::bf16);
    BOOST_TEST(conv->name() == std::string("onednn"), "bf16 convolutions are oneDNN's, on one channel too");
    std::vector<float> y(out), dx(in, 7.0f), dk(kernel.size(), 7.0f), db(zero.size(), 7.0f);
    conv->forward(x.data(), kernel.data(), zero.data(), y.data(), k.n);
    const oracle::vec no_bias(zero.size(), 0.0);
    const std::size_t per_output = std::size_t(k.c) * k.kh * k.kw, per_kernel = out / k.filters;
    double excess = expect_within_bf16(y, oracle::conv2d_forward(g, k.filters, widen(x), widen(kernel), no_bias),
                                       oracle::conv2d_forward(g, k.filters, absolute(x), absolute(kernel), no_bias),
                                       per_output, "y");
    oracle::vec rdx, rdk, rdb, adx, adk, adb;
    oracle::conv2d_backward(g, k.filters, widen(x), widen(kernel), widen(dy), rdx, rdk, rdb);
    oracle::conv2d_backward(g, k.filters, absolute(x), absolute(kernel), absolute(dy), adx, adk, adb);
    conv->backward(x.data(), kernel.data(), dy.data(), dx.data(), dk.data(), db.data(), k.n);
    excess = std::max(excess, expect_within_bf16(dx, rdx, adx, std::size_t(k.filters) * k.kh * k.kw, "dx"));
    excess = std::max(excess, expect_within_bf16(dk, rdk, adk, per_kernel, "dkernel"));
    BOOST_TEST(excess > 1.0, "some element is further from the oracle than float32 could be");
    // The bias gradient sums bf16-rounded dy in float32: within 2^-8 of the sums of |dy|.
    expect_within_bf16(db, rdb, adb, per_kernel, "dbias");
}

BOOST_AUTO_TEST_CASE(im2col_at_bf16_is_refused)
{
    compute::window2d w{1, 8, 8, 3, 3, 1, 1};
    BOOST_TEST_REQUIRE(compute::resolve_padding(w, true));
    BOOST_CHECK_EXCEPTION(cpu::make_conv2d(w, 2, 4, cpu::conv2d_impl::im2col, compute::precision::bf16), error,
                          [](const error& e) {
                              return e.what() == std::string("the im2col convolution multiplies in fp32: unset "
                                                             "PSTRAIN_CONV=im2col for --precision bf16");
                          });
}
