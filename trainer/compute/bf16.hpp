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

// dst[c * rows + r] = to_bf16(src[r * cols + c]): src (rows x cols,
// row-major) rounded and transposed in one pass.
void to_bf16_transposed(const float* src, bf16* dst, std::size_t rows, std::size_t cols);

}  // namespace pstrain::compute
