// Launchers of the CUDA kernels: each sizes its grid, takes a stream and
// checks the launch.  The backend calls these, never <<<>>> directly.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace pstrain::compute::cuda {

void launch_add_bias(float* y, const float* b, int rows, int cols, cudaStream_t stream);
void launch_relu_forward(const float* z, float* a, std::size_t n, cudaStream_t stream);
void launch_relu_backward(const float* z, const float* da, float* dz, std::size_t n, cudaStream_t stream);
void launch_column_sum(const float* x, float* sums, int rows, int cols, cudaStream_t stream);
void launch_softmax_xent(const float* logits, const std::int32_t* labels, float* dlogits, float* row_loss,
                         std::int32_t* row_hit, int rows, int classes, cudaStream_t stream);
void launch_squared_error(const float* pred, const float* target, float* dpred, float* row_loss, int rows,
                          cudaStream_t stream);

}  // namespace pstrain::compute::cuda
