#include "common/parse.hpp"

#include <charconv>

namespace pstrain {

std::optional<std::int64_t> parse_count(std::string_view text, std::int64_t lo, std::int64_t hi)
{
    if (text.empty() || text.size() > 18) return std::nullopt;
    for (char c : text)
        if (c < '0' || c > '9') return std::nullopt;
    std::int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    if (value < lo || value > hi) return std::nullopt;
    return value;
}

}  // namespace pstrain
