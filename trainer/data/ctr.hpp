// Click-through data in Criteo's TSV format: a label, 13 integer features
// and 26 categorical ones as hex strings, any of them blank.  One line
// parsed into a sample, and the AUC that measures a model of such data.
// Reading files of them: ctr_reader.hpp; making some: ctr_generator.hpp.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pstrain::data {

inline constexpr int ctr_numeric_fields = 13;
inline constexpr int ctr_categorical_fields = 26;

struct ctr_sample {
    float label = 0;  // 0 or 1
    // log(1 + x) of each integer feature (negative values: -log(1 - x)); 0 when blank.
    std::array<float, ctr_numeric_fields> numeric{};
    // The 64-bit keys of every categorical field, field after field: each
    // the field and one id hashed together (a blank is an id of its own), so
    // fields never share keys.  A field holds one id, or several separated
    // by commas (a multi-hot field: an embedding bag).
    std::vector<std::uint64_t> keys;
    // Field f's keys are keys[field_begin[f] .. field_begin[f + 1]).
    std::array<std::uint32_t, ctr_categorical_fields + 1> field_begin{};

    std::span<const std::uint64_t> field(int f) const
    {
        const auto i = static_cast<std::size_t>(f);
        return std::span<const std::uint64_t>(keys).subspan(field_begin[i], field_begin[i + 1] - field_begin[i]);
    }
};

// The most ids one multi-hot field may hold.
inline constexpr std::size_t ctr_max_bag = 1024;

// Parses one line (without its newline).  False, with `why` naming the
// field and what is wrong, when it is not a Criteo line.
bool parse_ctr_line(std::string_view line, ctr_sample& out, std::string& why);

// An integer feature as a sample holds it: log(1 + x), -log(1 - x) for a
// negative x.
float ctr_numeric_value(double x);

// Area under the ROC curve of `scores` for `labels` (0/1); ties count one
// half.  0.5 when one class is missing.
double auc(std::span<const float> scores, std::span<const float> labels);

}  // namespace pstrain::data
