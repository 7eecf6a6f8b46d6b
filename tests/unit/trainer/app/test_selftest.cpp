// pstrain selftest's checks: on this CPU every kernel passes against the
// oracle and the small CNN learns; a kernel that computes one element wrong
// fails its check, naming the element, and only that check.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE selftest
#include <boost/test/unit_test.hpp>

#include "trainer/app/selftest.hpp"
#include "trainer/compute/cpu_backend.hpp"
#include "trainer/compute/layers.hpp"
#include "tests/unit/trainer/forwarding_backend.hpp"

#include <string>

using namespace pstrain;
using namespace pstrain::trainer;

namespace {

// The CPU backend with one wrong gradient element: dw[3] of every dense
// backward pass off by 0.01, as a miscompiled or broken kernel would be.
class one_wrong_element final : public testing::forwarding_backend {
public:
    std::string name() const override { return "cpu, dw[3] wrong"; }
    void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, int rows,
                         int in, int out) override
    {
        cpu_.linear_backward(x, w, dy, dx, dw, db, rows, in, out);
        if (in * out > 3) dw[3] += 0.01f;
    }
};

}  // namespace

BOOST_AUTO_TEST_CASE(every_kernel_of_this_cpu_passes_against_the_oracle)
{
    compute::cpu_backend cpu(1);
    const auto outs = check_kernels(cpu, compute::precision::fp32);
    BOOST_TEST(outs.size() >= 50u);
    for (const auto& o : outs) BOOST_TEST(o.passed, o.what << ": " << o.detail);
}

BOOST_AUTO_TEST_CASE(the_small_cnn_learns_on_this_cpu)
{
    compute::cpu_backend cpu(1);
    const auto outs = check_training(cpu, 300);
    BOOST_TEST_REQUIRE(outs.size() == 1u);  // no second device to compare with
    BOOST_TEST(outs[0].passed, outs[0].detail);
}

// A GPU's path without one: memory that is not the host's makes the checks
// copy in and out, compare dropout's masks with the CPU's and the first
// training step's loss with the CPU's.
BOOST_AUTO_TEST_CASE(on_memory_that_is_not_the_hosts_the_device_checks_run_and_pass)
{
    testing::device_memory_backend device;
    const auto outs = check_kernels(device, compute::precision::fp32);
    bool masks = false;
    for (const auto& o : outs) {
        BOOST_TEST(o.passed, o.what << ": " << o.detail);
        masks = masks || o.what == "dropout 0.4: the CPU's mask";
    }
    BOOST_TEST(masks, "the masks were compared with the CPU's");
    BOOST_TEST(device.copies_in > 0);
    BOOST_TEST(device.copies_out > 0);
    const auto trained = check_training(device, 300);
    BOOST_TEST_REQUIRE(trained.size() == 2u);
    for (const auto& o : trained) BOOST_TEST(o.passed, o.what << ": " << o.detail);
    BOOST_TEST(trained[1].what.find("as on the cpu") != std::string::npos, trained[1].what);
}

BOOST_AUTO_TEST_CASE(too_few_steps_do_not_pass_the_training_check)
{
    compute::cpu_backend cpu(1);
    const auto outs = check_training(cpu, 10);
    BOOST_TEST_REQUIRE(outs.size() == 1u);
    BOOST_TEST(!outs[0].passed, outs[0].detail);
}

BOOST_AUTO_TEST_CASE(a_wrong_element_fails_its_check_and_names_the_element)
{
    one_wrong_element broken;
    const auto outs = check_kernels(broken, compute::precision::fp32);
    int failed = 0;
    for (const auto& o : outs) {
        if (o.passed) continue;
        ++failed;
        BOOST_TEST(o.what.find("backward dw") != std::string::npos, o.what);
        BOOST_TEST(o.detail.find("[3] is ") == 0, o.detail);
    }
    BOOST_TEST(failed == 2);  // the two dense shapes
}
