// pstrain selftest's checks: on this CPU every kernel passes against the
// oracle and the small CNN learns; a kernel that computes one element wrong
// fails its check, naming the element, and only that check.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE selftest
#include <boost/test/unit_test.hpp>

#include "trainer/app/selftest.hpp"
#include "trainer/compute/cpu_backend.hpp"
#include "trainer/compute/layers.hpp"

#include <string>

using namespace pstrain;
using namespace pstrain::trainer;

namespace {

// The CPU backend with one wrong gradient element: dw[3] of every dense
// backward pass off by 0.01, as a miscompiled or broken kernel would be.
class one_wrong_element final : public compute::backend {
public:
    std::string name() const override { return "cpu, dw[3] wrong"; }
    bool host_memory() const override { return true; }
    void* allocate(std::size_t bytes) override { return cpu_.allocate(bytes); }
    void release(void* p) noexcept override { cpu_.release(p); }
    void* allocate_host(std::size_t bytes) override { return cpu_.allocate_host(bytes); }
    void release_host(void* p) noexcept override { cpu_.release_host(p); }
    bool pin_host(void* p, std::size_t bytes) override { return cpu_.pin_host(p, bytes); }
    void unpin_host(void* p) noexcept override { cpu_.unpin_host(p); }
    void copy_to_device(void* dst, const void* src, std::size_t bytes) override
    {
        cpu_.copy_to_device(dst, src, bytes);
    }
    void copy_to_host(void* dst, const void* src, std::size_t bytes) override { cpu_.copy_to_host(dst, src, bytes); }
    void synchronize() override {}
    void linear_forward(const float* x, const float* w, const float* b, float* y, int rows, int in, int out) override
    {
        cpu_.linear_forward(x, w, b, y, rows, in, out);
    }
    void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, int rows,
                         int in, int out) override
    {
        cpu_.linear_backward(x, w, dy, dx, dw, db, rows, in, out);
        if (in * out > 3) dw[3] += 0.01f;
    }
    void relu_forward(const float* z, float* a, std::size_t n) override { cpu_.relu_forward(z, a, n); }
    void relu_backward(const float* z, const float* da, float* dz, std::size_t n) override
    {
        cpu_.relu_backward(z, da, dz, n);
    }
    loss_sums softmax_xent(const float* logits, const std::int32_t* labels, float* dlogits, int rows,
                           int classes) override
    {
        return cpu_.softmax_xent(logits, labels, dlogits, rows, classes);
    }
    loss_sums squared_error(const float* pred, const float* target, float* dpred, int rows) override
    {
        return cpu_.squared_error(pred, target, dpred, rows);
    }
    std::unique_ptr<compute::layer_kernels> make_layer_kernels() override { return cpu_.make_layer_kernels(); }

private:
    compute::cpu_backend cpu_{1};
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
