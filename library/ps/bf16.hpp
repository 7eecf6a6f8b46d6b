// bfloat16 as the wire carries it (wire_precision.hpp): the rounding of
// common/bf16.hpp, over the byte buffers of messages (any alignment).
//
// Pure functions, any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/bf16.hpp"

namespace pstrain::ps::bf16 {

using pstrain::bf16::from_float;
using pstrain::bf16::to_float;

// `n` floats rounded into the `n` bfloat16 at `out` (2n bytes; any alignment).
inline void encode(const float* in, std::size_t n, void* out)
{
    auto* at = static_cast<std::byte*>(out);
    for (std::size_t k = 0; k < n; ++k) {
        const std::uint16_t h = from_float(in[k]);
        std::memcpy(at + 2 * k, &h, sizeof h);
    }
}

// The `n` bfloat16 at `in` (any alignment) widened into `out`.
inline void decode(const void* in, std::size_t n, float* out)
{
    const auto* at = static_cast<const std::byte*>(in);
    for (std::size_t k = 0; k < n; ++k) {
        std::uint16_t h;
        std::memcpy(&h, at + 2 * k, sizeof h);
        out[k] = to_float(h);
    }
}

// The `n` bfloat16 at the start of `buffer` widened in place into the `n`
// floats that then fill it (4n bytes: the buffer must hold them).  From
// the last element down, each read before its bytes are overwritten.
inline void widen_in_place(float* buffer, std::size_t n)
{
    const auto* halves = reinterpret_cast<const std::byte*>(buffer);
    for (std::size_t k = n; k-- > 0;) {
        std::uint16_t h;
        std::memcpy(&h, halves + 2 * k, sizeof h);
        const float f = to_float(h);
        std::memcpy(buffer + k, &f, sizeof f);
    }
}

}  // namespace pstrain::ps::bf16
