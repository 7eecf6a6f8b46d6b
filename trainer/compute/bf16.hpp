// bfloat16: the top 16 bits of an IEEE float32 (sign, the 8 exponent bits,
// 7 of the 23 mantissa bits), the operand type of --precision bf16's matrix
// products.  A float becomes bf16 by rounding to nearest, ties to even (as
// the CPUs' vcvtneps2bf16 and CUDA's __float2bfloat16 do); infinities stay
// infinities, a NaN stays a NaN (made quiet, its sign kept), and a float
// whose magnitude rounds past bf16's largest finite value becomes an
// infinity.  Subnormal floats are rounded as any other (the instruction
// would flush them to zero; weights and activations that small do not
// matter to a product accumulated in float32).  A bf16 widens to float
// exactly, so every float with at most 8 significant bits survives the
// round trip unchanged.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace pstrain::compute {

using bf16 = std::uint16_t;  // the bits; arithmetic only after widening

inline bf16 to_bf16(float f)
{
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const std::uint32_t quiet_nan = (u >> 16) | 0x40u;
    return static_cast<bf16>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float from_bf16(bf16 h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }

// dst[i] = to_bf16(src[i]) for i < count.
void to_bf16(const float* src, bf16* dst, std::size_t count);

}  // namespace pstrain::compute
