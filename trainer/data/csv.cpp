// CSV reader: "label,p0,...,pN" per line, optional header.
#include "trainer/data/dataset.hpp"

#include "pstrain/error.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>

#include <fmt/format.h>

namespace pstrain::data {

namespace {
// The largest class a label may name: the model has one output per class.
constexpr int max_label_value = 65535;
}  // namespace

dataset read_csv(const std::filesystem::path& file)
{
    std::ifstream in(file);
    if (!in) throw error(fmt::format("{}: cannot open: check --data-dir", file.string()));
    dataset d;
    std::string line;
    std::size_t line_no = 0;
    int max_label = -1;
    while (std::getline(in, line)) {
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) continue;
        if (line_no == 1) {  // a header: its first field is not a number
            float v = 0;
            const char* comma = std::find(line.data(), line.data() + line.size(), ',');
            auto [ptr, ec] = std::from_chars(line.data(), comma, v);
            if (ec != std::errc() || ptr != comma) continue;
        }
        std::size_t cols = 0;
        const char* p = line.data();
        const char* end = p + line.size();
        int label = -1;
        while (p <= end) {
            const char* comma = std::find(p, end, ',');
            float v = 0;
            auto [ptr, ec] = std::from_chars(p, comma, v);
            if (ec != std::errc() || ptr != comma)
                throw error(fmt::format("{}:{}: field {} '{}' is not a number", file.string(), line_no, cols + 1,
                                        std::string(p, comma)));
            if (cols == 0) {
                // In range first: converting 1e30 or NaN to int is undefined.
                if (!(v >= 0 && v <= max_label_value) || v != std::floor(v))
                    throw error(fmt::format("{}:{}: label '{}' is not a class number (0 to {})", file.string(), line_no,
                                            std::string(p, comma), max_label_value));
                label = static_cast<int>(v);
            } else {
                d.features.push_back(v * (1.0f / 255.0f));
            }
            ++cols;
            p = comma + 1;
        }
        if (cols < 2)
            throw error(
                fmt::format("{}:{}: expected label,pixel0,... but found {} field", file.string(), line_no, cols));
        if (d.rows == 0) d.cols = cols - 1;
        if (cols - 1 != d.cols)
            throw error(fmt::format("{}:{}: {} pixel columns, but the first example has {}", file.string(), line_no,
                                    cols - 1, d.cols));
        d.labels.push_back(label);
        max_label = std::max(max_label, label);
        ++d.rows;
    }
    if (d.rows == 0) throw error(fmt::format("{}: no examples", file.string()));
    d.num_classes = max_label + 1;
    return d;
}

}  // namespace pstrain::data
