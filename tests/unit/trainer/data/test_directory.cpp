// The synthetic linear data set (make_linear): the same numbers for a seed
// everywhere, and the known answer y = 2x + 10 still in them.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE directory
#include <boost/test/unit_test.hpp>

#include "trainer/data/dataset.hpp"

#include <cmath>

using pstrain::data::make_linear;

BOOST_AUTO_TEST_CASE(linear_data_of_a_seed_is_pinned)
{
    // Floats, so exact: a change in the generator or the formulas fails here
    // (and would change what the known-answer runs train on).
    const auto d = make_linear(1000, 200, 1);
    BOOST_TEST(d.train.features[0] == -0x1.5d87d8p-2f);
    BOOST_TEST(d.train.targets[0] == 0x1.326b68p+3f);
    BOOST_TEST(d.train.features[1] == 0x1.92fcf4p-1f);
    BOOST_TEST(d.train.targets[1] == 0x1.5e3578p+3f);
    BOOST_TEST(d.test.features[0] == 0x1.fa7742p-1f);
    BOOST_TEST(d.test.targets[0] == 0x1.7f4ee8p+3f);
}

BOOST_AUTO_TEST_CASE(same_seed_same_data_other_seed_other_data)
{
    const auto a = make_linear(50, 10, 3), b = make_linear(50, 10, 3), c = make_linear(50, 10, 4);
    BOOST_TEST(a.train.features == b.train.features);
    BOOST_TEST(a.train.targets == b.train.targets);
    BOOST_TEST(a.train.features != c.train.features);
}

BOOST_AUTO_TEST_CASE(training_data_has_slope_2_and_intercept_10_within_the_noise)
{
    for (std::uint64_t seed : {0, 1, 2, 3, 42}) {
        BOOST_TEST_CONTEXT("seed " << seed)
        {
            const auto d = make_linear(1000, 200, seed).train;
            BOOST_TEST(d.rows == 1000u);
            BOOST_TEST(d.cols == 1u);
            BOOST_TEST(d.features.size() == 1000u);
            BOOST_TEST(d.targets.size() == 1000u);
            // Least squares fit of y = a x + b.
            double sx = 0, sy = 0, sxx = 0, sxy = 0;
            for (std::size_t i = 0; i < d.rows; ++i) {
                const double x = d.features[i], y = d.targets[i];
                BOOST_TEST(std::fabs(x) < 1.0);
                sx += x, sy += y, sxx += x * x, sxy += x * y;
            }
            const double n = static_cast<double>(d.rows);
            const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
            const double intercept = (sy - slope * sx) / n;
            double ss = 0;
            for (std::size_t i = 0; i < d.rows; ++i) {
                const double r = d.targets[i] - (slope * d.features[i] + intercept);
                ss += r * r;
            }
            // Standard errors with noise 0.33 and x uniform in (-1, 1): 0.018
            // for the slope, 0.010 for the intercept, 0.007 for the noise's
            // stddev; the bounds are 5 of them.
            BOOST_TEST(std::fabs(slope - 2.0) < 0.09);
            BOOST_TEST(std::fabs(intercept - 10.0) < 0.05);
            BOOST_TEST(std::fabs(std::sqrt(ss / (n - 2)) - 0.33) < 0.035);
        }
    }
}

BOOST_AUTO_TEST_CASE(test_data_is_exact)
{
    const auto d = make_linear(10, 200, 5).test;
    BOOST_TEST(d.rows == 200u);
    for (std::size_t i = 0; i < d.rows; ++i) {
        BOOST_TEST(std::fabs(d.features[i]) < 1.0f);
        // float rounding of x and y only
        BOOST_TEST(std::fabs(d.targets[i] - (2.0 * d.features[i] + 10.0)) < 2e-6);
    }
}
