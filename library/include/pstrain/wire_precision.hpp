// What gradients and values travel as between a worker and its PS tasks:
// 32-bit floats, or bfloat16 (the top half of a float: half the bytes, 8
// bits of mantissa).  The PS keeps its master weights, its optimizer state
// and its sums in FP32 whatever travels: it widens what it receives and
// rounds (to nearest, ties to even) what it sends.
//
// Dense pushes, values replies, row pushes and row pulls travel in it; the
// chief's init and the replies to its init and restore stay FP32 (master
// weights and the chief's values start exact), and so do the exchanges
// through a worker's buffers that a PS on its host maps (shared memory:
// nothing crosses a wire there).  Every worker's hello says its
// precision; a PS refuses a worker whose precision is not its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pstrain::ps {

enum class wire_precision : std::uint8_t { fp32 = 0, bf16 = 1 };

// "fp32" or "bf16".
inline const char* name_of(wire_precision p) { return p == wire_precision::bf16 ? "bf16" : "fp32"; }

// The precision `name` names ("fp32" or "bf16"), or nothing.
inline std::optional<wire_precision> wire_precision_named(std::string_view name)
{
    if (name == "fp32") return wire_precision::fp32;
    if (name == "bf16") return wire_precision::bf16;
    return std::nullopt;
}

}  // namespace pstrain::ps
