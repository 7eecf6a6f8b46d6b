// The layer models' kernels that cuDNN does not provide: activations from
// their outputs, dropout, the one-hot squared error, the moving averages'
// steps, the batch variance from cuDNN's saved 1 / std, and the copies
// that give cuDNN TensorFlow's asymmetric "same" padding.  The formulas are
// elementwise.hpp's, which the CPU kernels run too.
#include "trainer/compute/cuda/check.cuh"
#include "trainer/compute/cuda/kernels.cuh"
#include "trainer/compute/elementwise.hpp"

namespace pstrain::compute::cuda {
namespace {

constexpr int block = 256;

unsigned grid_for(std::size_t n) { return static_cast<unsigned>((n + block - 1) / block); }

__device__ std::size_t thread_index() { return blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; }

__global__ void activation_forward_kernel(activation kind, const float* x, float* y, std::size_t n)
{
    const std::size_t i = thread_index();
    if (i >= n) return;
    y[i] = kind == activation::relu ? relu(x[i]) : kind == activation::tanh ? tanhf(x[i]) : sigmoid(x[i]);
}

__global__ void activation_backward_kernel(activation kind, const float* y, const float* dy, float* dx, std::size_t n)
{
    const std::size_t i = thread_index();
    if (i >= n) return;
    dx[i] = kind == activation::relu   ? relu_grad(y[i], dy[i])
            : kind == activation::tanh ? tanh_grad(y[i], dy[i])
                                       : sigmoid_grad(y[i], dy[i]);
}

__global__ void dropout_forward_kernel(const float* x, float* y, float* mask, std::size_t n, std::uint64_t seed,
                                       std::uint32_t threshold, float scale)
{
    const std::size_t i = thread_index();
    if (i >= n) return;
    mask[i] = dropout_factor(seed, i, threshold, scale);
    y[i] = x[i] * mask[i];
}

__global__ void multiply_kernel(const float* a, const float* b, float* out, std::size_t n)
{
    const std::size_t i = thread_index();
    if (i < n) out[i] = a[i] * b[i];
}

// One thread per row, as the CPU: the loss in double, the gradient scaled
// for the mean over rows and classes.
__global__ void mse_onehot_kernel(const float* pred, const std::int32_t* labels, float* dpred, double* row_loss,
                                  std::int32_t* row_hit, int rows, int classes, float scale)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* p = pred + std::size_t(r) * classes;
    double sum = 0;
    for (int c = 0; c < classes; ++c) {
        const float d = p[c] - (c == labels[r] ? 1.0f : 0.0f);
        sum += double(d) * d;
        if (dpred) dpred[std::size_t(r) * classes + c] = scale * d;
    }
    row_loss[r] = sum / classes;
    row_hit[r] = row_argmax(p, classes) == labels[r];
}

__global__ void moving_average_delta_kernel(const float* batch, const float* moving, float* delta, int count,
                                            float momentum)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) delta[i] = (1.0f - momentum) * (batch[i] - moving[i]);
}

__global__ void variance_from_inv_std_kernel(const float* inv_std, float* var, int count, float eps)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    // Rounding in 1 / std can put a constant channel's 0 just below zero.
    const double s = inv_std[i];
    var[i] = static_cast<float>(fmax(1.0 / (s * s) - double(eps), 0.0));
}

// xp[plane, H + top + bottom, W + left + right]: x inside, `fill` around.
__global__ void pad_kernel(const float* x, float* xp, std::size_t planes, int h, int w, int top, int left, int hp,
                           int wp, float fill)
{
    const std::size_t i = thread_index();
    if (i >= planes * hp * wp) return;
    const int ix = static_cast<int>(i % wp) - left;
    const int iy = static_cast<int>((i / wp) % hp) - top;
    const std::size_t plane = i / (std::size_t(hp) * wp);
    xp[i] = iy >= 0 && iy < h && ix >= 0 && ix < w ? x[(plane * h + iy) * w + ix] : fill;
}

// The adjoint of pad_kernel's copy: the inside of dxp.
__global__ void crop_kernel(const float* dxp, float* dx, std::size_t planes, int h, int w, int top, int left, int hp,
                            int wp)
{
    const std::size_t i = thread_index();
    if (i >= planes * h * w) return;
    const int ix = static_cast<int>(i % w);
    const int iy = static_cast<int>((i / w) % h);
    const std::size_t plane = i / (std::size_t(h) * w);
    dx[i] = dxp[(plane * hp + iy + top) * wp + ix + left];
}

// out[i] = in[i] * factor[i % plane]
__global__ void scale_planes_kernel(const float* in, const float* factor, float* out, std::size_t n, int plane)
{
    const std::size_t i = thread_index();
    if (i < n) out[i] = in[i] * factor[i % plane];
}

}  // namespace

void launch_activation_forward(activation kind, const float* x, float* y, std::size_t n, cudaStream_t stream)
{
    if (n == 0) return;
    activation_forward_kernel<<<grid_for(n), block, 0, stream>>>(kind, x, y, n);
    check_launch("activation_forward_kernel");
}

void launch_activation_backward(activation kind, const float* y, const float* dy, float* dx, std::size_t n,
                                cudaStream_t stream)
{
    if (n == 0) return;
    activation_backward_kernel<<<grid_for(n), block, 0, stream>>>(kind, y, dy, dx, n);
    check_launch("activation_backward_kernel");
}

void launch_dropout_forward(const float* x, float* y, float* mask, std::size_t n, float rate, std::uint64_t seed,
                            cudaStream_t stream)
{
    if (n == 0) return;
    dropout_forward_kernel<<<grid_for(n), block, 0, stream>>>(x, y, mask, n, seed, dropout_threshold(rate),
                                                              1.0f / (1.0f - rate));
    check_launch("dropout_forward_kernel");
}

void launch_multiply(const float* a, const float* b, float* out, std::size_t n, cudaStream_t stream)
{
    if (n == 0) return;
    multiply_kernel<<<grid_for(n), block, 0, stream>>>(a, b, out, n);
    check_launch("multiply_kernel");
}

void launch_mse_onehot(const float* pred, const std::int32_t* labels, float* dpred, double* row_loss,
                       std::int32_t* row_hit, int rows, int classes, cudaStream_t stream)
{
    if (rows == 0) return;
    const float scale = 2.0f / (static_cast<float>(rows) * static_cast<float>(classes));
    mse_onehot_kernel<<<grid_for(std::size_t(rows)), block, 0, stream>>>(pred, labels, dpred, row_loss, row_hit, rows,
                                                                         classes, scale);
    check_launch("mse_onehot_kernel");
}

void launch_moving_average_delta(const float* batch, const float* moving, float* delta, int count, float momentum,
                                 cudaStream_t stream)
{
    if (count == 0) return;
    moving_average_delta_kernel<<<grid_for(std::size_t(count)), block, 0, stream>>>(batch, moving, delta, count,
                                                                                    momentum);
    check_launch("moving_average_delta_kernel");
}

void launch_variance_from_inv_std(const float* inv_std, float* var, int count, float eps, cudaStream_t stream)
{
    if (count == 0) return;
    variance_from_inv_std_kernel<<<grid_for(std::size_t(count)), block, 0, stream>>>(inv_std, var, count, eps);
    check_launch("variance_from_inv_std_kernel");
}

void launch_pad(const float* x, float* xp, std::size_t planes, int h, int w, int top, int left, int hp, int wp,
                float fill, cudaStream_t stream)
{
    const std::size_t n = planes * hp * wp;
    if (n == 0) return;
    pad_kernel<<<grid_for(n), block, 0, stream>>>(x, xp, planes, h, w, top, left, hp, wp, fill);
    check_launch("pad_kernel");
}

void launch_crop(const float* dxp, float* dx, std::size_t planes, int h, int w, int top, int left, int hp, int wp,
                 cudaStream_t stream)
{
    const std::size_t n = planes * h * w;
    if (n == 0) return;
    crop_kernel<<<grid_for(n), block, 0, stream>>>(dxp, dx, planes, h, w, top, left, hp, wp);
    check_launch("crop_kernel");
}

void launch_scale_planes(const float* in, const float* factor, float* out, std::size_t n, int plane,
                         cudaStream_t stream)
{
    if (n == 0) return;
    scale_planes_kernel<<<grid_for(n), block, 0, stream>>>(in, factor, out, n, plane);
    check_launch("scale_planes_kernel");
}

}  // namespace pstrain::compute::cuda
