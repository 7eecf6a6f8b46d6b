// Bias, ReLU and column-sum kernels, then their launchers.
#include "trainer/compute/cuda/kernels.cuh"
#include "trainer/compute/cuda/check.cuh"
#include "trainer/compute/elementwise.hpp"

namespace pstrain::compute::cuda {
namespace {

constexpr int block = 256;

__global__ void add_bias_kernel(float* y, const float* b, int rows, int cols)
{
    std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
    if (i < std::size_t(rows) * cols) y[i] += b[i % cols];
}

__global__ void relu_forward_kernel(const float* z, float* a, std::size_t n)
{
    std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
    if (i < n) a[i] = relu(z[i]);
}

__global__ void relu_backward_kernel(const float* z, const float* da, float* dz, std::size_t n)
{
    std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
    if (i < n) dz[i] = relu_grad(z[i], da[i]);
}

// One thread per column: adjacent threads read adjacent addresses.
__global__ void column_sum_kernel(const float* x, float* sums, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.0f;
    for (int r = 0; r < rows; ++r) s += x[std::size_t(r) * cols + c];
    sums[c] = s;
}

unsigned grid_for(std::size_t n) { return static_cast<unsigned>((n + block - 1) / block); }

}  // namespace

void launch_add_bias(float* y, const float* b, int rows, int cols, cudaStream_t stream)
{
    std::size_t n = std::size_t(rows) * cols;
    if (n == 0) return;
    add_bias_kernel<<<grid_for(n), block, 0, stream>>>(y, b, rows, cols);
    check_launch("add_bias_kernel");
}

void launch_relu_forward(const float* z, float* a, std::size_t n, cudaStream_t stream)
{
    if (n == 0) return;
    relu_forward_kernel<<<grid_for(n), block, 0, stream>>>(z, a, n);
    check_launch("relu_forward_kernel");
}

void launch_relu_backward(const float* z, const float* da, float* dz, std::size_t n, cudaStream_t stream)
{
    if (n == 0) return;
    relu_backward_kernel<<<grid_for(n), block, 0, stream>>>(z, da, dz, n);
    check_launch("relu_backward_kernel");
}

void launch_column_sum(const float* x, float* sums, int rows, int cols, cudaStream_t stream)
{
    if (cols == 0) return;
    column_sum_kernel<<<grid_for(std::size_t(cols)), block, 0, stream>>>(x, sums, rows, cols);
    check_launch("column_sum_kernel");
}

}  // namespace pstrain::compute::cuda
