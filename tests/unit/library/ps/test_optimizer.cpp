// Each optimizer's step against values computed by hand.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE optimizer
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "pstrain/optimizer.hpp"

#include <cmath>
#include <vector>

using namespace pstrain::ps;
namespace tt = boost::test_tools;

namespace {
optimizer_config config(optimizer_kind kind, float lr)
{
    optimizer_config c;
    c.kind = kind;
    c.learning_rate = lr;
    return c;
}
}  // namespace

BOOST_AUTO_TEST_CASE(sgd)
{
    std::vector<float> p{1.0f, -2.0f}, g{0.5f, -1.0f}, s;
    apply_update(config(optimizer_kind::sgd, 0.1f), p, g, s, 1);
    BOOST_TEST(p[0] == 0.95f, tt::tolerance(1e-6f));
    BOOST_TEST(p[1] == -1.9f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(momentum_two_steps)
{
    auto c = config(optimizer_kind::momentum, 0.1f);
    std::vector<float> p{1.0f}, g{1.0f}, s(1);
    initialize_state(c, s);
    apply_update(c, p, g, s, 1);  // a = 1, p = 0.9
    apply_update(c, p, g, s, 2);  // a = 1.9, p = 0.71
    BOOST_TEST(s[0] == 1.9f, tt::tolerance(1e-6f));
    BOOST_TEST(p[0] == 0.71f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(adagrad_starts_from_point_one)
{
    auto c = config(optimizer_kind::adagrad, 0.5f);
    std::vector<float> p{1.0f}, g{2.0f}, s(1);
    initialize_state(c, s);
    BOOST_TEST(s[0] == 0.1f);
    apply_update(c, p, g, s, 1);  // a = 4.1, p = 1 - 0.5*2/sqrt(4.1)
    BOOST_TEST(s[0] == 4.1f, tt::tolerance(1e-6f));
    BOOST_TEST(p[0] == 1.0f - 1.0f / std::sqrt(4.1f), tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(adam_first_steps)
{
    auto c = config(optimizer_kind::adam, 0.001f);
    std::vector<float> p{1.0f}, g{0.5f}, s(2);
    initialize_state(c, s);
    apply_update(c, p, g, s, 1);
    // t=1: m = 0.05, v = 0.00025, lr_t = 0.001*sqrt(0.001)/0.1, step = lr_t*m/(sqrt(v)+eps) ~ 0.001
    BOOST_TEST(s[0] == 0.05f, tt::tolerance(1e-6f));
    BOOST_TEST(s[1] == 0.00025f, tt::tolerance(1e-4f));
    BOOST_TEST(p[0] == 0.999f, tt::tolerance(1e-6f));
    g[0] = -0.5f;
    apply_update(c, p, g, s, 2);
    // t=2: m = 0.9*0.05 - 0.05 = -0.005, v = 0.999*0.00025 + 0.00025
    double m = -0.005, v = 0.999 * 0.00025 + 0.001 * 0.25;
    double lr_t = 0.001 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.81);
    BOOST_TEST(p[0] == 0.999 - lr_t * m / (std::sqrt(v) + 1e-8), tt::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(names_and_slots)
{
    BOOST_TEST(state_slots(parse_optimizer("adam")) == 2);
    BOOST_TEST(state_slots(parse_optimizer("sgd")) == 0);
    BOOST_TEST(optimizer_name(parse_optimizer("momentum")) == "momentum");
    BOOST_CHECK_THROW(parse_optimizer("rmsprop"), pstrain::error);
}

BOOST_AUTO_TEST_CASE(mismatched_spans_are_an_error)
{
    std::vector<float> p(3), g(2), s;
    BOOST_CHECK_THROW(apply_update(config(optimizer_kind::sgd, 1), p, g, s, 1), pstrain::error);
}
