// Launchers of the CUDA kernels: each sizes its grid, takes a stream and
// checks the launch.  The backend calls these, never <<<>>> directly.
#pragma once

#include "trainer/compute/layers.hpp"

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

// --precision bf16 (bf16_kernels.cu): out = in rounded as common/bf16.hpp
// rounds, bit for bit; and widened back, exactly.
void launch_to_bf16(const float* in, std::uint16_t* out, std::size_t n, cudaStream_t stream);
void launch_from_bf16(const std::uint16_t* in, float* out, std::size_t n, cudaStream_t stream);

// Layer models (layer_kernels.cu).
void launch_activation_forward(activation kind, const float* x, float* y, std::size_t n, cudaStream_t stream);
void launch_activation_backward(activation kind, const float* y, const float* dy, float* dx, std::size_t n,
                                cudaStream_t stream);
void launch_dropout_forward(const float* x, float* y, float* mask, std::size_t n, float rate, std::uint64_t seed,
                            cudaStream_t stream);
void launch_multiply(const float* a, const float* b, float* out, std::size_t n, cudaStream_t stream);
void launch_mse_onehot(const float* pred, const std::int32_t* labels, float* dpred, double* row_loss,
                       std::int32_t* row_hit, int rows, int classes, cudaStream_t stream);
void launch_moving_average_delta(const float* batch, const float* moving, float* delta, int count, float momentum,
                                 cudaStream_t stream);
void launch_variance_from_inv_std(const float* inv_std, float* var, int count, float eps, cudaStream_t stream);
// xp = x of `planes` h x w planes inside (hp x wp) planes, `top` rows and
// `left` columns in, the rest `fill`; crop is its adjoint's copy back.
void launch_pad(const float* x, float* xp, std::size_t planes, int h, int w, int top, int left, int hp, int wp,
                float fill, cudaStream_t stream);
void launch_crop(const float* dxp, float* dx, std::size_t planes, int h, int w, int top, int left, int hp, int wp,
                 cudaStream_t stream);
// out[i] = in[i] * factor[i % plane]
void launch_scale_planes(const float* in, const float* factor, float* out, std::size_t n, int plane,
                         cudaStream_t stream);

}  // namespace pstrain::compute::cuda
