#include "trainer/compute/bf16.hpp"

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

}  // namespace pstrain::compute
