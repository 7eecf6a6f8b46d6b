// Splits a fuzz input into lines, for targets whose inputs are several
// strings: line i, or "" past the last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::fuzz {

inline std::vector<std::string> lines(const std::uint8_t* data, std::size_t size, std::size_t at_least)
{
    std::vector<std::string> out(1);
    for (std::size_t i = 0; i < size; ++i) {
        if (data[i] == '\n') out.emplace_back();
        else out.back() += static_cast<char>(data[i]);
    }
    if (out.size() < at_least) out.resize(at_least);
    return out;
}

}  // namespace pstrain::fuzz
