// Each optimizer's step against values computed by hand.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE optimizer
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "pstrain/optimizer.hpp"
#include "library/ps/update_rules.hpp"

#include <cmath>
#include <cstring>
#include <random>
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

// The update runs in the clone for this CPU's widest vectors (AVX-512 here
// and on most PS nodes); every element must get the bits of the rule
// applied one element at a time (update_rules.hpp, this file compiled
// without fused multiply-add), whatever the length (vector bodies and
// remainders) and whether the output is the input.
BOOST_AUTO_TEST_CASE(every_element_gets_the_bits_of_the_rule_one_element_at_a_time)
{
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto kind : {optimizer_kind::sgd, optimizer_kind::momentum, optimizer_kind::adagrad, optimizer_kind::adam})
        for (std::size_t n : {1u, 15u, 16u, 17u, 1000u, 4099u})
            for (bool in_place : {true, false}) {
                auto c = config(kind, 0.01f);
                const std::size_t slots = static_cast<std::size_t>(state_slots(kind));
                std::vector<float> p(n), out(n), g(n), s(n * slots), want_p(n), want_s;
                for (auto& x : p) x = normal(rng);
                initialize_state(c, s);
                want_p = p;
                want_s = s;
                for (std::uint64_t step = 1; step <= 5; ++step) {
                    for (auto& x : g) x = 1e-3f * normal(rng);
                    if (in_place) apply_update_to(c, p, p, g, s, step);
                    else {
                        apply_update_to(c, p, out, g, s, step);
                        p = out;
                    }
                    const double t = static_cast<double>(step);
                    const float lr_t = static_cast<float>(c.learning_rate * std::sqrt(1.0 - std::pow(c.beta2, t)) /
                                                          (1.0 - std::pow(c.beta1, t)));
                    for (std::size_t i = 0; i < n; ++i) switch (kind) {
                        case optimizer_kind::sgd: sgd_update(want_p[i], g[i], c.learning_rate); break;
                        case optimizer_kind::momentum:
                            momentum_update(want_p[i], want_s[i], g[i], c.learning_rate, c.momentum);
                            break;
                        case optimizer_kind::adagrad:
                            adagrad_update(want_p[i], want_s[i], g[i], c.learning_rate);
                            break;
                        case optimizer_kind::adam:
                            adam_update(want_p[i], want_s[i], want_s[n + i], g[i], lr_t, c.beta1, c.beta2, c.epsilon);
                            break;
                        }
                }
                BOOST_TEST_INFO(optimizer_name(kind) << ", " << n << " elements" << (in_place ? ", in place" : ""));
                BOOST_TEST(std::memcmp(p.data(), want_p.data(), n * sizeof(float)) == 0);
                BOOST_TEST((s.empty() || std::memcmp(s.data(), want_s.data(), s.size() * sizeof(float)) == 0));
            }
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
