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

std::vector<std::string_view> split(std::string_view text, char sep)
{
    std::vector<std::string_view> items;
    std::size_t start = 0;
    for (;;) {
        std::size_t end = text.find(sep, start);
        items.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
        if (end == std::string_view::npos) return items;
        start = end + 1;
    }
}

}  // namespace pstrain
