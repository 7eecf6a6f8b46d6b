// bfloat16: the top 16 bits of an IEEE float32 (sign, the 8 exponent bits,
// 7 of the 23 mantissa bits), what --precision bf16's matrix products take
// and what --wire-precision bf16 sends.  A float becomes bf16 by rounding to
// nearest, ties to even (as the CPUs' vcvtneps2bf16 and CUDA's
// __float2bfloat16 do); infinities and zeros keep their sign, a NaN stays a
// NaN (made quiet, its sign kept), and a float whose magnitude rounds past
// bf16's largest finite value becomes an infinity, as IEEE rounding does.
// Subnormal floats are rounded as any other.  Widening is exact, so every
// float with at most 8 significant bits survives the round trip unchanged.
//
// Pure functions, any thread.
#pragma once

#include <bit>
#include <cstdint>

namespace pstrain::bf16 {

// The bfloat16 nearest `f` (ties to even).
inline std::uint16_t from_float(float f)
{
    const auto bits = std::bit_cast<std::uint32_t>(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // NaN, quiet
    return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// The float `h` is (exactly).
inline float to_float(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }

}  // namespace pstrain::bf16
