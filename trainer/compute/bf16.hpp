// bfloat16 as --precision bf16's matrix products take it: the bits of
// common/bf16.hpp's rounding, and a loop over arrays.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/bf16.hpp"

namespace pstrain::compute {

using bf16 = std::uint16_t;  // the bits; arithmetic only after widening

inline bf16 to_bf16(float f) { return pstrain::bf16::from_float(f); }

inline float from_bf16(bf16 h) { return pstrain::bf16::to_float(h); }

// dst[i] = to_bf16(src[i]) for i < count.
void to_bf16(const float* src, bf16* dst, std::size_t count);

}  // namespace pstrain::compute
