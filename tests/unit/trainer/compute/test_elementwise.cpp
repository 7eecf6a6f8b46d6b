// The element-wise math shared by the CPU and CUDA backends.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE elementwise
#include <boost/test/unit_test.hpp>

#include "trainer/compute/cpu_backend.hpp"
#include "trainer/compute/cpu_layers.hpp"
#include "trainer/compute/elementwise.hpp"

#include <cmath>
#include <vector>

using namespace pstrain::compute;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_CASE(relu_and_its_gradient)
{
    BOOST_TEST(relu(2.5f) == 2.5f);
    BOOST_TEST(relu(-1.0f) == 0.0f);
    BOOST_TEST(relu_grad(0.3f, 7.0f) == 7.0f);
    BOOST_TEST(relu_grad(-0.3f, 7.0f) == 0.0f);
    BOOST_TEST(relu_grad(0.0f, 7.0f) == 0.0f);
}

BOOST_AUTO_TEST_CASE(softmax_cross_entropy_matches_double_reference)
{
    const float logits[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    double s = 0;
    for (float l : logits) s += std::exp(double(l));
    const double want = std::log(s) - 0.5;  // label 2
    float m = row_max(logits, 4), se = row_sum_exp(logits, 4, m);
    BOOST_TEST(xent_loss(logits, 4, 2, m, se) == want, tt::tolerance(1e-6));
    double gsum = 0;
    for (int c = 0; c < 4; ++c) {
        float g = xent_grad(logits[c], m, se, c == 2, 1.0f);
        double p = std::exp(double(logits[c])) / s;
        BOOST_TEST(g == p - (c == 2), tt::tolerance(1e-5));
        gsum += g;
    }
    BOOST_TEST(gsum == 0.0, tt::tolerance(1e-6));
    BOOST_TEST(row_argmax(logits, 4) == 3);
}

BOOST_AUTO_TEST_CASE(softmax_is_stable_for_huge_logits)
{
    const float logits[3] = {1000.0f, 999.0f, -1000.0f};
    float m = row_max(logits, 3), se = row_sum_exp(logits, 3, m);
    float loss = xent_loss(logits, 3, 1, m, se);
    BOOST_TEST(std::isfinite(loss));
    BOOST_TEST(loss == std::log(1.0 + std::exp(1.0)), tt::tolerance(1e-4));  // float32 at logits of 1000
}

// The GPU's dropout kernel draws each element's factor alone
// (dropout_factor); the CPU's runs the generator in order.  They must agree
// element for element, or a model would train differently on each device.
BOOST_AUTO_TEST_CASE(dropout_factor_draws_the_cpu_mask)
{
    for (const float rate : {0.1f, 0.4f, 0.5f, 0.9f}) {
        const std::size_t count = 1001;  // odd: the last draw is half used
        std::vector<float> x(count, 1.0f), y(count), mask(count);
        const std::uint64_t seed = 0x1234abcdull + static_cast<std::uint64_t>(rate * 100);
        cpu::dropout_forward(x.data(), y.data(), mask.data(), count, rate, seed);
        std::size_t kept = 0;
        for (std::size_t i = 0; i < count; ++i) {
            const float f = dropout_factor(seed, i, dropout_threshold(rate), 1.0f / (1.0f - rate));
            BOOST_TEST_REQUIRE(f == mask[i], "element " << i << " at rate " << rate);
            kept += f != 0.0f;
        }
        BOOST_TEST(std::abs(double(kept) / count - (1.0 - rate)) < 0.05, "rate " << rate << " kept " << kept);
    }
}

BOOST_AUTO_TEST_CASE(cpu_backend_layers)
{
    cpu_backend be(1);
    // y = x w + b with x 2x3, w 3x2.
    std::vector<float> x{1, 2, 3, 4, 5, 6}, w{1, 0, 0, 1, 1, 1}, b{10, 20}, y(4);
    be.linear_forward(x.data(), w.data(), b.data(), y.data(), 2, 3, 2);
    BOOST_TEST(y == (std::vector<float>{14, 25, 20, 31}));
    std::vector<float> dy{1, 0, 0, 1}, dx(6), dw(6), db(2);
    be.linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), 2, 3, 2);
    BOOST_TEST(dw == (std::vector<float>{1, 4, 2, 5, 3, 6}));
    BOOST_TEST(db == (std::vector<float>{1, 1}));
    BOOST_TEST(dx == (std::vector<float>{1, 0, 1, 0, 1, 1}));
    std::vector<float> logits{0, 0, 5, 0}, dl(4);
    std::vector<std::int32_t> labels{1, 0};
    auto sums = be.softmax_xent(logits.data(), labels.data(), dl.data(), 2, 2);
    BOOST_TEST(sums.correct == 1);  // row 0 ties (argmax 0, label 1), row 1 right
    BOOST_TEST(sums.loss == std::log(2.0) + std::log(1 + std::exp(-5.0)), tt::tolerance(1e-5));
    BOOST_TEST(dl[0] == 0.25f, tt::tolerance(1e-5));
}
