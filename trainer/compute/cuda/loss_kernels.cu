// Softmax cross-entropy and squared-error kernels, then their launchers.
// Each writes a per-row loss (and hit) that the backend sums on the host.
#include "trainer/compute/cuda/kernels.cuh"
#include "trainer/compute/cuda/check.cuh"
#include "trainer/compute/elementwise.hpp"

namespace pstrain::compute::cuda {
namespace {

constexpr int block = 128;

// One thread per row: the class count is small (10 for MNIST).
__global__ void softmax_xent_kernel(const float* logits, const std::int32_t* labels, float* dlogits, float* row_loss,
                                    std::int32_t* row_hit, int rows, int classes, float scale)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = logits + std::size_t(r) * classes;
    const int label = labels[r];
    const float m = row_max(row, classes);
    const float s = row_sum_exp(row, classes, m);
    row_loss[r] = xent_loss(row, classes, label, m, s);
    row_hit[r] = row_argmax(row, classes) == label;
    if (dlogits) {
        float* g = dlogits + std::size_t(r) * classes;
        for (int c = 0; c < classes; ++c) g[c] = xent_grad(row[c], m, s, c == label, scale);
    }
}

__global__ void squared_error_kernel(const float* pred, const float* target, float* dpred, float* row_loss, int rows,
                                     float scale)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float d = pred[r] - target[r];
    row_loss[r] = d * d;
    if (dpred) dpred[r] = 2.0f * d * scale;
}

}  // namespace

void launch_softmax_xent(const float* logits, const std::int32_t* labels, float* dlogits, float* row_loss,
                         std::int32_t* row_hit, int rows, int classes, cudaStream_t stream)
{
    if (rows == 0) return;
    softmax_xent_kernel<<<(rows + block - 1) / block, block, 0, stream>>>(
        logits, labels, dlogits, row_loss, row_hit, rows, classes, 1.0f / static_cast<float>(rows));
    check_launch("softmax_xent_kernel");
}

void launch_squared_error(const float* pred, const float* target, float* dpred, float* row_loss, int rows,
                          cudaStream_t stream)
{
    if (rows == 0) return;
    squared_error_kernel<<<(rows + block - 1) / block, block, 0, stream>>>(pred, target, dpred, row_loss, rows,
                                                                           1.0f / static_cast<float>(rows));
    check_launch("squared_error_kernel");
}

}  // namespace pstrain::compute::cuda
