// --precision bf16 on a GPU: float32 to bf16 with common/bf16.hpp's
// rounding, bit for bit (to nearest, ties to even; a NaN stays a quiet
// NaN), so a GPU multiplies the operands the CPU would; and bf16 back to
// float32, which is exact.
#include "trainer/compute/cuda/check.cuh"
#include "trainer/compute/cuda/kernels.cuh"

namespace pstrain::compute::cuda {
namespace {

constexpr int block = 256;

__device__ std::uint16_t round_to_bf16(float f)
{
    const std::uint32_t bits = __float_as_uint(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
    return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__global__ void to_bf16_kernel(const float* in, std::uint16_t* out, std::size_t n)
{
    const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
    if (i < n) out[i] = round_to_bf16(in[i]);
}

__global__ void from_bf16_kernel(const std::uint16_t* in, float* out, std::size_t n)
{
    const std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x;
    if (i < n) out[i] = __uint_as_float(std::uint32_t(in[i]) << 16);
}

unsigned grid_for(std::size_t n) { return static_cast<unsigned>((n + block - 1) / block); }

}  // namespace

void launch_to_bf16(const float* in, std::uint16_t* out, std::size_t n, cudaStream_t stream)
{
    if (n == 0) return;
    to_bf16_kernel<<<grid_for(n), block, 0, stream>>>(in, out, n);
    check_launch("to_bf16_kernel");
}

void launch_from_bf16(const std::uint16_t* in, float* out, std::size_t n, cudaStream_t stream)
{
    if (n == 0) return;
    from_bf16_kernel<<<grid_for(n), block, 0, stream>>>(in, out, n);
    check_launch("from_bf16_kernel");
}

}  // namespace pstrain::compute::cuda
