// The CUDA backend against the CPU oracle: forward/backward and a 200-step
// training run, compared with atol + rtol * |ref|; at --precision bf16, the
// dense layers' products against the oracle of the bf16-rounded operands
// (the bound of test_matmul_bf16), and a training curve beside the CPU's
// FP32 one.  Exits 77 (automake's SKIP) when no CUDA device is visible.  Run on a GPU node with
//   srun --gres=gpu:1 tests/unit/trainer/compute/test_cuda_backend
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include "trainer/compute/bf16.hpp"
#include "trainer/compute/cpu_backend.hpp"
#include "trainer/compute/cuda_backend.hpp"
#include "trainer/data/sampler.hpp"
#include "trainer/model/model.hpp"
#include "library/ps/shard.hpp"
#include "tests/unit/trainer/helpers.hpp"

#include <cmath>
#include <numeric>
#include <random>
#include <tuple>

using namespace pstrain;
using pstrain::testing::make_random_data;

namespace {

template <typename T>
void expect_close(const std::vector<T>& got, const std::vector<T>& ref, double atol, double rtol)
{
    BOOST_REQUIRE_EQUAL(got.size(), ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i)
        BOOST_TEST_REQUIRE(std::fabs(got[i] - ref[i]) <= atol + rtol * std::fabs(ref[i]),
                           "element " << i << ": cuda " << got[i] << " cpu " << ref[i]);
}

// A device copy of v on `be`, and back.
struct on_device {
    explicit on_device(compute::backend& b) : be(b) {}
    compute::backend& be;
    std::vector<compute::device_array<float>> arrays;
    float* up(const std::vector<float>& v)
    {
        arrays.emplace_back(be, v.size());
        be.copy_to_device(arrays.back().get(), v.data(), v.size() * sizeof(float));
        return arrays.back().get();
    }
    float* zeros(std::size_t n) { return arrays.emplace_back(be, n).get(); }
    std::vector<float> down(const float* p, std::size_t n)
    {
        std::vector<float> v(n);
        be.copy_to_host(v.data(), p, n * sizeof(float));
        return v;
    }
};

std::vector<float> random_floats(std::size_t n, unsigned seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng);
    return v;
}

// c[m x n] = op(a) op(b) against the double oracle of the bf16-rounded
// operands: |c - ref| <= 2 K u32 sum |a_k b_k| (float32 accumulation of K
// exact bf16 products), as test_matmul_bf16 bounds the CPU's; and bf16 ran:
// some element is further from the oracle of the unrounded operands than
// float32 could be.  at(i, k) and bt(k, j) read the operands.
template <typename A, typename B>
void expect_bf16_product(const std::vector<float>& c, int m, int n, int k, A at, B bt, const char* what)
{
    const double u32 = std::ldexp(1.0, -24);
    bool bf16_shows = false;
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            double ref = 0, sum_abs = 0, ref32 = 0, sum_abs32 = 0;
            for (int q = 0; q < k; ++q) {
                const double pr = double(compute::from_bf16(compute::to_bf16(at(i, q)))) *
                                  compute::from_bf16(compute::to_bf16(bt(q, j)));
                ref += pr;
                sum_abs += std::fabs(pr);
                ref32 += double(at(i, q)) * bt(q, j);
                sum_abs32 += std::fabs(double(at(i, q)) * bt(q, j));
            }
            const double got = c[std::size_t(i) * n + j];
            BOOST_TEST_REQUIRE(std::fabs(got - ref) <= 2 * k * u32 * sum_abs + 1e-30,
                               what << "[" << i << "," << j << "]: cuda " << got << ", oracle of the bf16 operands "
                                    << ref);
            if (std::fabs(got - ref32) > 2 * k * u32 * sum_abs32) bf16_shows = true;
        }
    BOOST_TEST(bf16_shows, what << ": no element is further from the fp32 oracle than float32 could be");
}

}  // namespace

BOOST_AUTO_TEST_CASE(bf16_dense_products_are_the_rounded_operands_products_in_fp32)
{
    auto gpu = compute::make_cuda_backend(compute::precision::bf16);
    BOOST_TEST(gpu->name().find("bf16 matrix products on tensor cores") != std::string::npos, gpu->name());
    for (auto [rows, in, out] : {std::tuple{1, 1, 1}, {7, 13, 5}, {100, 784, 128}, {33, 257, 65}}) {
        on_device dev{*gpu};
        const auto x = random_floats(std::size_t(rows) * in, 1), w = random_floats(std::size_t(in) * out, 2),
                   b = random_floats(std::size_t(out), 3), dy = random_floats(std::size_t(rows) * out, 4);
        float *gx = dev.up(x), *gw = dev.up(w), *gb = dev.up(b), *gdy = dev.up(dy);
        float *gy = dev.zeros(dy.size()), *gdx = dev.zeros(x.size()), *gdw = dev.zeros(w.size()),
              *gdb = dev.zeros(b.size());
        gpu->linear_forward(gx, gw, gb, gy, rows, in, out);
        gpu->linear_backward(gx, gw, gdy, gdx, gdw, gdb, rows, in, out);
        auto y = dev.down(gy, dy.size());
        for (std::size_t i = 0; i < y.size(); ++i) y[i] -= b[i % out];  // the bias is added in fp32
        const bool big = std::size_t(rows) * in * out > 64;             // tiny products may all round exactly
        auto X = [&](int r, int c) { return x[std::size_t(r) * in + c]; };
        auto W = [&](int r, int c) { return w[std::size_t(r) * out + c]; };
        auto DY = [&](int r, int c) { return dy[std::size_t(r) * out + c]; };
        if (big) {
            expect_bf16_product(y, rows, out, in, X, W, "y - b");
            expect_bf16_product(
                dev.down(gdw, w.size()), in, out, rows, [&](int i, int r) { return X(r, i); }, DY, "dw");
            expect_bf16_product(
                dev.down(gdx, x.size()), rows, in, out, DY, [&](int o, int i) { return W(i, o); }, "dx");
        }
        const auto db = dev.down(gdb, b.size());
        for (int c = 0; c < out; ++c) {
            double s = 0;
            for (int r = 0; r < rows; ++r) s += DY(r, c);
            BOOST_TEST(std::fabs(db[c] - s) <= 1e-5 * (1 + std::fabs(s)), "db[" << c << "] is a float32 column sum");
        }
    }
}

BOOST_AUTO_TEST_CASE(bf16_rounding_keeps_nan_and_infinities_and_representable_values)
{
    auto gpu = compute::make_cuda_backend(compute::precision::bf16);
    on_device dev{*gpu};
    // Six rows of one input, times a 1 x 1 weight of 1: each output is one
    // rounded input.
    const std::vector<float> x{1.5f, -0.15625f, -INFINITY, NAN, 1.00390625f, 1.01171875f};
    float* y = dev.zeros(x.size());
    gpu->linear_forward(dev.up(x), dev.up({1.0f}), dev.up({0.0f}), y, int(x.size()), 1, 1);
    const auto got = dev.down(y, x.size());
    BOOST_TEST(got[0] == 1.5f, "representable: exact");
    BOOST_TEST(got[1] == -0.15625f, "representable: exact");
    BOOST_TEST((std::isinf(got[2]) && got[2] < 0), got[2]);
    BOOST_TEST(std::isnan(got[3]), got[3]);
    BOOST_TEST(got[4] == 1.0f, "1 + 2^-8, a tie, rounds to the even 1");
    BOOST_TEST(got[5] == 1.015625f, "1 + 3 * 2^-8, a tie, rounds to the even 1 + 2^-6");
}

BOOST_AUTO_TEST_CASE(a_bf16_training_curve_follows_the_fp32_one)
{
    auto curve = [](compute::backend& be) {
        auto d = make_random_data(2000, 50, 5, 2);
        auto m = model::make_mlp(be, 50, {32}, 5, 50);
        return testing::adam_loss_curve(*m, d, 0.005f, 7, 200, 50);
    };
    compute::cpu_backend cpu(1);
    auto gpu = compute::make_cuda_backend(compute::precision::bf16);
    const auto ref = curve(cpu), got = curve(*gpu);
    BOOST_REQUIRE_EQUAL(got.size(), ref.size());
    // bf16 operands (8 significant bits) move each loss by about 2^-8
    // relative; 200 Adam steps may add to that, not change its order.
    for (std::size_t i = 0; i < ref.size(); ++i)
        BOOST_TEST_REQUIRE(std::fabs(got[i] - ref[i]) <= 0.05 * std::fabs(ref[i]),
                           "step " << i << ": bf16 loss " << got[i] << " fp32 " << ref[i]);
    // It learns as much as the FP32 run: at least half of FP32's fall from
    // the mean loss of the first 20 steps to that of the last 20.  (Random
    // labels: on the CPU the FP32 run goes from 1.698 to 1.510, 0.89 of it;
    // one batch's loss against another's, last/first, is 0.94 there, so the
    // bound of 0.8 this test had failed for FP32 too, on the H100.)
    const auto mean = [](const std::vector<double>& c, std::size_t from) {
        return std::accumulate(c.begin() + long(from), c.begin() + long(from + 20), 0.0) / 20;
    };
    const double fp32_fall = mean(ref, 0) - mean(ref, ref.size() - 20);
    BOOST_TEST_REQUIRE(fp32_fall > 0.1, "the FP32 run learns: " << fp32_fall);
    BOOST_TEST(mean(got, 0) - mean(got, got.size() - 20) >= 0.5 * fp32_fall, "the bf16 run learns");
}

BOOST_AUTO_TEST_CASE(gradients_match_the_cpu_oracle)
{
    compute::cpu_backend cpu(1);
    auto gpu = compute::make_cuda_backend();
    auto d = make_random_data(64, 784, 10, 1);
    auto mc = model::make_mlp(cpu, 784, {128, 64}, 10, 64);
    auto mg = model::make_mlp(*gpu, 784, {128, 64}, 10, 64);
    std::vector<float> p(mc->num_params()), gc(p.size()), gg(p.size());
    mc->initialize(p, 3);
    std::vector<std::uint32_t> rows(64);
    for (std::uint32_t i = 0; i < 64; ++i) rows[i] = i;
    double lc = mc->compute_gradients(p, d, rows, gc).loss;
    double lg = mg->compute_gradients(p, d, rows, gg).loss;
    BOOST_TEST(lg == lc, boost::test_tools::tolerance(1e-5));
    expect_close(gg, gc, 1e-5, 1e-3);
    auto ec = mc->evaluate(p, d), eg = mg->evaluate(p, d);
    BOOST_TEST(eg.accuracy == ec.accuracy);
    BOOST_TEST(eg.loss == ec.loss, boost::test_tools::tolerance(1e-5));
}

// The overlapped step on the GPU: each layer's gradient comes to a pinned
// host buffer on the copy stream while the next layers' kernels run; the
// hook hears only what has landed (its tail is already the final gradient),
// going down to 0, and the gradient is the one computed without a hook.
BOOST_AUTO_TEST_CASE(the_overlapped_steps_gradient_copies_land_before_the_hook_hears_of_them)
{
    auto gpu = compute::make_cuda_backend();
    auto d = make_random_data(64, 784, 10, 1);
    auto m = model::make_mlp(*gpu, 784, {512, 256}, 10, 64);
    const std::size_t n = m->num_params();
    std::vector<float> p(n), without(n);
    m->initialize(p, 3);
    compute::host_array<float> g(*gpu, n);  // pinned, as the exchange buffers are
    std::vector<std::uint32_t> rows(64);
    std::iota(rows.begin(), rows.end(), 0u);
    m->compute_gradients(p, d, rows, without);
    std::vector<std::pair<std::size_t, std::vector<float>>> calls;
    const std::span<float> host(g.data(), n);
    m->on_gradient_ready([&](std::size_t from, double) {
        calls.emplace_back(from, std::vector<float>(host.begin() + static_cast<std::ptrdiff_t>(from), host.end()));
    });
    m->compute_gradients(p, d, rows, host);
    BOOST_TEST(std::vector<float>(host.begin(), host.end()) == without, boost::test_tools::per_element());
    BOOST_TEST_REQUIRE(!calls.empty());
    BOOST_TEST(calls.back().first == 0u);
    for (std::size_t k = 0; k < calls.size(); ++k) {
        if (k > 0) BOOST_TEST(calls[k].first <= calls[k - 1].first);
        BOOST_TEST(calls[k].second ==
                       std::vector<float>(host.begin() + static_cast<std::ptrdiff_t>(calls[k].first), host.end()),
                   boost::test_tools::per_element());
    }
}

BOOST_AUTO_TEST_CASE(training_curve_matches_the_cpu_run)
{
    auto curve = [](compute::backend& be) {
        auto d = make_random_data(2000, 50, 5, 2);
        auto m = model::make_mlp(be, 50, {32}, 5, 50);
        return testing::adam_loss_curve(*m, d, 0.005f, 7, 200, 50);
    };
    compute::cpu_backend cpu(1);
    auto gpu = compute::make_cuda_backend();
    auto ref = curve(cpu);
    auto got = curve(*gpu);
    expect_close(got, ref, 1e-3, 1e-2);
    BOOST_TEST(ref.back() < ref.front());
}

#include "tests/unit/trainer/compute/cuda_main.hpp"
