// bfloat16 as the wire carries it (wire_precision.hpp): a float's top 16
// bits.  A float rounds to the nearest bfloat16, ties to even; a NaN stays
// a NaN (quiet), infinities and zeros keep their sign; a float too large
// for bfloat16's finite range rounds to infinity, as IEEE rounding does.
// Widening is exact.
//
// Pure functions, any thread.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pstrain::ps::bf16 {

// The bfloat16 nearest `f` (ties to even).
inline std::uint16_t from_float(float f)
{
    const auto bits = std::bit_cast<std::uint32_t>(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // NaN, quiet
    const std::uint32_t round = 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<std::uint16_t>((bits + round) >> 16);
}

// The float `h` is (exactly).
inline float to_float(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }

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
