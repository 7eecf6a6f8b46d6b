// The CPU's layer kernels behind the device-neutral interface: the
// functions of cpu_layers.cpp, with the convolution of conv2d.hpp and the
// pooling layers' argmax kept in their objects.
#include "trainer/compute/conv2d.hpp"
#include "trainer/compute/cpu_layers.hpp"

#include <cstring>
#include <vector>

namespace pstrain::compute::cpu {
namespace {

class maxpool final : public pool2d {
public:
    maxpool(const window2d& w, int max_batch)
        : w_(w), argmax_(std::size_t(std::max(max_batch, 1)) * w.channels * w.out_h * w.out_w)
    {}
    void forward(const float* x, float* y, int n) override
    {
        reserve(n);
        maxpool_forward(x, y, argmax_.data(), n, w_);
    }
    void backward(const float*, const float*, const float* dy, float* dx, int n) override
    {
        maxpool_backward(dy, argmax_.data(), dx, n, w_);
    }

private:
    void reserve(int n)
    {
        const std::size_t want = std::size_t(n) * w_.channels * w_.out_h * w_.out_w;
        if (want > argmax_.size()) argmax_.resize(want);
    }
    window2d w_;
    std::vector<std::int32_t> argmax_;
};

class avgpool final : public pool2d {
public:
    explicit avgpool(const window2d& w) : w_(w) {}
    void forward(const float* x, float* y, int n) override { avgpool_forward(x, y, n, w_); }
    void backward(const float*, const float*, const float* dy, float* dx, int n) override
    {
        avgpool_backward(dy, dx, n, w_);
    }

private:
    window2d w_;
};

class cpu_layer_kernels final : public layer_kernels {
public:
    explicit cpu_layer_kernels(precision p) : precision_(p) {}

    std::unique_ptr<compute::conv2d> make_conv2d(const window2d& w, int filters, int max_batch) override
    {
        return cpu::make_conv2d(w, filters, max_batch, cpu::conv2d_impl::automatic, precision_);
    }
    std::unique_ptr<pool2d> make_maxpool(const window2d& w, int max_batch) override
    {
        return std::make_unique<maxpool>(w, max_batch);
    }
    std::unique_ptr<pool2d> make_avgpool(const window2d& w, int) override { return std::make_unique<avgpool>(w); }

    void copy(float* dst, const float* src, std::size_t count) override
    {
        if (dst != src) std::memcpy(dst, src, count * sizeof(float));
    }
    void activation_forward(activation a, const float* x, float* y, std::size_t count) override
    {
        cpu::activation_forward(a, x, y, count);
    }
    void activation_backward(activation a, const float* y, const float* dy, float* dx, std::size_t count) override
    {
        cpu::activation_backward(a, y, dy, dx, count);
    }
    void softmax_forward(const float* x, float* y, int rows, int classes) override
    {
        cpu::softmax_forward(x, y, rows, classes);
    }
    void softmax_backward(const float* y, const float* dy, float* dx, int rows, int classes) override
    {
        cpu::softmax_backward(y, dy, dx, rows, classes);
    }
    backend::loss_sums mse_onehot(const float* pred, const std::int32_t* labels, float* dpred, int rows,
                                  int classes) override
    {
        return cpu::mse_onehot(pred, labels, dpred, rows, classes);
    }
    void dropout_forward(const float* x, float* y, float* mask, std::size_t count, float rate,
                         std::uint64_t seed) override
    {
        cpu::dropout_forward(x, y, mask, count, rate, seed);
    }
    void dropout_backward(const float* dy, const float* mask, float* dx, std::size_t count) override
    {
        cpu::dropout_backward(dy, mask, dx, count);
    }
    void batchnorm_forward_train(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                 float* var, float* inv_std, int n, int channels, int inner, float eps) override
    {
        cpu::batchnorm_forward_train(x, gamma, beta, y, mean, var, inv_std, n, channels, inner, eps);
    }
    void batchnorm_forward_eval(const float* x, const float* gamma, const float* beta, const float* moving_mean,
                                const float* moving_var, float* y, int n, int channels, int inner, float eps) override
    {
        cpu::batchnorm_forward_eval(x, gamma, beta, moving_mean, moving_var, y, n, channels, inner, eps);
    }
    void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* inv_std,
                            const float* dy, float* dx, float* dgamma, float* dbeta, int n, int channels, int inner,
                            float) override
    {
        cpu::batchnorm_backward(x, gamma, mean, inv_std, dy, dx, dgamma, dbeta, n, channels, inner);
    }
    void moving_average_delta(const float* batch, const float* moving, float* delta, int count, float momentum) override
    {
        cpu::moving_average_delta(batch, moving, delta, count, momentum);
    }

private:
    precision precision_;  // of the convolutions' products
};

}  // namespace

std::unique_ptr<layer_kernels> make_layer_kernels(precision p) { return std::make_unique<cpu_layer_kernels>(p); }

}  // namespace pstrain::compute::cpu
