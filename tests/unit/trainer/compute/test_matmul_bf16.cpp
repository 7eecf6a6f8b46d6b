// --precision bf16's dense-layer products (matmul_bf16, and the CPU backend
// that adds the bias and its gradient) against the FP32 oracle, in double.
//
// The tolerances, for one output element c = sum over k < K of a_k b_k:
// rounding an operand to bf16 (8 significant bits, to nearest) moves it by
// at most u = 2^-8 of itself, so a product moves by at most
// (2u + u^2) |a_k b_k|, and float32 accumulation adds at most about
// K 2^-24 sum |a_k b_k|.  Hence three checks:
//  - bound:  |c - c_fp32| <= (2^-7 + 2^-16 + 2 K 2^-24) sum |a_k b_k|, for
//    every element (the worst case; it cannot fail on a right kernel);
//  - rms:    the errors of independent roundings add like a random walk:
//    over all elements, rms(c - c_fp32) <= 2^-8 sqrt(K) rms(a) rms(b)
//    (each product's error has a standard deviation of at most
//    2^-8 sqrt(2/3) |a_k b_k|);
//  - exact:  against the oracle of the bf16-rounded operands,
//    |c - sum a'_k b'_k| <= 2 K 2^-24 sum |a'_k b'_k|: the operands are
//    rounded to nearest and nothing but the float32 sums adds error;
// and one that shows bf16 ran at all: some element is off the FP32 oracle
// by more than float32 arithmetic alone could be.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE matmul_bf16
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "config.h"
#include "trainer/compute/backend.hpp"
#include "trainer/compute/bf16.hpp"
#include "trainer/compute/matmul_bf16.hpp"
#include "trainer/compute/precision.hpp"
#include "tests/unit/trainer/compute/bf16_here.hpp"

#include <cmath>
#include <memory>
#include <ostream>
#include <random>
#include <vector>

using namespace pstrain::compute;
namespace bdata = boost::unit_test::data;
using pstrain::testing::bf16_here;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed, float scale = 1.0f)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

double rms(const std::vector<float>& v)
{
    double s = 0;
    for (float x : v) s += double(x) * x;
    return std::sqrt(s / static_cast<double>(v.size()));
}

// A[m x K] and B[K x n] as functions of (i, k) and (k, j), so one checker
// serves x w, x^T dy and dy w^T.
template <typename A, typename B>
void check_product(const std::vector<float>& got, int m, int n, int K, A a, B b, double rms_a, double rms_b,
                   const char* what)
{
    const double u = 0x1p-8, u32 = 0x1p-24;
    double sq = 0, fp32_excess = 0;
    for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
            double ref = 0, sum_abs = 0, ref_r = 0, sum_abs_r = 0;
            for (int k = 0; k < K; ++k) {
                const double p = double(a(i, k)) * b(k, j);
                const double pr = double(from_bf16(to_bf16(a(i, k)))) * from_bf16(to_bf16(b(k, j)));
                ref += p;
                sum_abs += std::fabs(p);
                ref_r += pr;
                sum_abs_r += std::fabs(pr);
            }
            const double c = got[std::size_t(i) * n + j], err = std::fabs(c - ref);
            BOOST_TEST_REQUIRE(err <= (2 * u + u * u + 2 * K * u32) * sum_abs,
                               what << "[" << i << "," << j << "]: " << c << ", fp32 oracle " << ref);
            BOOST_TEST_REQUIRE(std::fabs(c - ref_r) <= 2 * K * u32 * sum_abs_r + 1e-30,
                               what << "[" << i << "," << j << "]: " << c << ", oracle of the bf16 operands " << ref_r);
            sq += err * err;
            fp32_excess = std::max(fp32_excess, err / (2 * K * u32 * sum_abs + 1e-30));
        }
    }
    const double rms_err = std::sqrt(sq / (double(m) * n));
    BOOST_TEST(rms_err <= u * std::sqrt(double(K)) * rms_a * rms_b, what << ": rms error " << rms_err);
    if (K > 1 || m * n > 8)
        BOOST_TEST(fp32_excess > 1.0, what << ": no element is further from the fp32 oracle than float32 could be");
}

struct shape {
    int rows, in, out;
};
std::ostream& operator<<(std::ostream& os, const shape& s) { return os << s.rows << "x" << s.in << "x" << s.out; }

const std::vector<shape> shapes = {{1, 1, 1}, {7, 37, 10}, {100, 784, 129}, {3, 5, 300}, {100, 1024, 1024}};

}  // namespace

BOOST_TEST_DECORATOR(*boost::unit_test::precondition(bf16_here()))
BOOST_DATA_TEST_CASE(forward_matches_the_fp32_oracle_within_bf16_rounding, bdata::make(shapes), s)
{
    const auto x = random_floats(std::size_t(s.rows) * s.in, 1), w = random_floats(std::size_t(s.in) * s.out, 2, 0.1f),
               b = random_floats(s.out, 3);
    std::vector<float> y(std::size_t(s.rows) * s.out), zero(s.out, 0.0f);
    auto mm = cpu::make_matmul_bf16();
    mm->linear_forward(x.data(), w.data(), zero.data(), y.data(), s.rows, s.in, s.out);
    check_product(
        y, s.rows, s.out, s.in, [&](int i, int k) { return x[std::size_t(i) * s.in + k]; },
        [&](int k, int j) { return w[std::size_t(k) * s.out + j]; }, rms(x), rms(w), "x w");
    // The bias is added in float32, after the product.
    std::vector<float> yb(y.size());
    mm->linear_forward(x.data(), w.data(), b.data(), yb.data(), s.rows, s.in, s.out);
    for (std::size_t i = 0; i < y.size(); ++i)
        BOOST_TEST_REQUIRE(std::fabs(yb[i] - (y[i] + b[i % s.out])) <= 1e-6 * (1 + std::fabs(yb[i])), i);
}

BOOST_TEST_DECORATOR(*boost::unit_test::precondition(bf16_here()))
BOOST_DATA_TEST_CASE(backward_matches_the_fp32_oracle_within_bf16_rounding, bdata::make(shapes), s)
{
    const auto x = random_floats(std::size_t(s.rows) * s.in, 4), w = random_floats(std::size_t(s.in) * s.out, 5, 0.1f),
               dy = random_floats(std::size_t(s.rows) * s.out, 6, 0.01f);
    std::vector<float> dx(std::size_t(s.rows) * s.in), dw(std::size_t(s.in) * s.out);
    auto mm = cpu::make_matmul_bf16();
    mm->linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), s.rows, s.in, s.out);
    // dw[in x out] = x^T dy: K = rows.
    check_product(
        dw, s.in, s.out, s.rows, [&](int i, int k) { return x[std::size_t(k) * s.in + i]; },
        [&](int k, int j) { return dy[std::size_t(k) * s.out + j]; }, rms(x), rms(dy), "x^T dy");
    // dx[rows x in] = dy w^T: K = out.
    check_product(
        dx, s.rows, s.in, s.out, [&](int i, int k) { return dy[std::size_t(i) * s.out + k]; },
        [&](int k, int j) { return w[std::size_t(j) * s.out + k]; }, rms(dy), rms(w), "dy w^T");
    // Without dx, dw alone, the same.
    std::vector<float> dw2(dw.size());
    mm->linear_backward(x.data(), w.data(), dy.data(), nullptr, dw2.data(), s.rows, s.in, s.out);
    BOOST_TEST((dw2 == dw));
}

BOOST_AUTO_TEST_CASE(products_of_several_shapes_in_turn_repeat_bit_for_bit,
                     *boost::unit_test::precondition(bf16_here()))
{
    // Each shape's primitive is kept; a later call of a shape must use its
    // own, whatever ran between.
    auto mm = cpu::make_matmul_bf16();
    std::vector<std::vector<float>> first;
    for (int round = 0; round < 2; ++round) {
        for (std::size_t i = 0; i < shapes.size() - 1; ++i) {
            const auto& s = shapes[i];
            const auto x = random_floats(std::size_t(s.rows) * s.in, 10 + i),
                       w = random_floats(std::size_t(s.in) * s.out, 20 + i), b = random_floats(s.out, 30 + i);
            std::vector<float> y(std::size_t(s.rows) * s.out);
            mm->linear_forward(x.data(), w.data(), b.data(), y.data(), s.rows, s.in, s.out);
            if (round == 0) first.push_back(y);
            else BOOST_TEST((y == first[i]), "shape " << s);
        }
    }
}

BOOST_AUTO_TEST_CASE(the_backend_adds_the_bias_and_sums_its_gradient_in_fp32,
                     *boost::unit_test::precondition(bf16_here()))
{
    const int rows = 9, in = 13, out = 6;
    const auto x = random_floats(rows * in, 7), w = random_floats(in * out, 8), b = random_floats(out, 9),
               dy = random_floats(rows * out, 10);
    auto bf = make_backend(device_kind::cpu, precision::bf16, 1),
         fp = make_backend(device_kind::cpu, precision::fp32, 1);
    std::vector<float> dx(rows * in), dw(in * out), db(out), db32(out), dw32(in * out), dx32(rows * in);
    bf->linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), rows, in, out);
    fp->linear_backward(x.data(), w.data(), dy.data(), dx32.data(), dw32.data(), db32.data(), rows, in, out);
    for (int c = 0; c < out; ++c) BOOST_TEST(db[c] == db32[c], "db[" << c << "] is a float32 column sum");
    std::vector<float> y(rows * out), zero(out, 0.0f), y0(rows * out);
    bf->linear_forward(x.data(), w.data(), b.data(), y.data(), rows, in, out);
    bf->linear_forward(x.data(), w.data(), zero.data(), y0.data(), rows, in, out);
    for (int i = 0; i < rows * out; ++i) BOOST_TEST_REQUIRE(std::fabs(y[i] - (y0[i] + b[i % out])) <= 1e-6, i);
    BOOST_TEST((dw != dw32), "the backend's products are bf16's, not OpenBLAS's");
}
