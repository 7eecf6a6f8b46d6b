// Strict parsing of numbers given by users (flags, environment, files).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace pstrain {

// A whole decimal number in [lo, hi]: digits only (no sign, no spaces, no
// trailing text).  std::nullopt for anything else, including overflow.
std::optional<std::int64_t> parse_count(std::string_view text, std::int64_t lo, std::int64_t hi);

// Splits on `sep`, keeping empty items: "a,,b" -> {"a", "", "b"}, "" -> {""}.
// The views point into `text`.
std::vector<std::string_view> split(std::string_view text, char sep);

}  // namespace pstrain
