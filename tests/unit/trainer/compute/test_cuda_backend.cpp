// The CUDA backend against the CPU oracle: forward/backward and a 200-step
// training run, compared with atol + rtol * |ref|.  Exits 77 (automake's
// SKIP) when no CUDA device is visible.  Run on a GPU node with
//   srun --gres=gpu:1 tests/unit/trainer/compute/test_cuda_backend
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include "trainer/compute/cpu_backend.hpp"
#include "trainer/compute/cuda_backend.hpp"
#include "trainer/data/sampler.hpp"
#include "trainer/model/model.hpp"
#include "library/ps/shard.hpp"
#include "tests/unit/trainer/helpers.hpp"

#include <cmath>
#include <random>

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

}  // namespace

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
