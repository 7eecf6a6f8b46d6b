#include "trainer/compute/bf16.hpp"

#include <algorithm>

namespace pstrain::compute {

// A loop the compiler vectorizes; the clone for AVX-512 converts 16 floats
// an instruction group on the CPUs --precision bf16 runs on.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "default")))
#endif
void to_bf16(const float* src, bf16* dst, std::size_t count)
{
    for (std::size_t i = 0; i < count; ++i) dst[i] = to_bf16(src[i]);
}

// In tiles of 16 x 16, so that both the reads and the writes stay within a
// few cache lines at a time.
void to_bf16_transposed(const float* src, bf16* dst, std::size_t rows, std::size_t cols)
{
    constexpr std::size_t tile = 16;
    for (std::size_t r0 = 0; r0 < rows; r0 += tile)
        for (std::size_t c0 = 0; c0 < cols; c0 += tile) {
            const std::size_t r1 = std::min(rows, r0 + tile), c1 = std::min(cols, c0 + tile);
            for (std::size_t c = c0; c < c1; ++c)
                for (std::size_t r = r0; r < r1; ++r) dst[c * rows + r] = to_bf16(src[r * cols + c]);
        }
}

}  // namespace pstrain::compute
