#include "trainer/data/ctr.hpp"

#include "common/random.hpp"
#include "pstrain/error.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <system_error>

#include <fmt/format.h>

namespace pstrain::data {
namespace {

// 64 well-mixed bits of x: splitmix64's first output from seed x.
std::uint64_t mix(std::uint64_t x) { return random::splitmix64(x)(); }

// The key of categorical field f's value (blank: value ~0).
std::uint64_t field_key(int field, std::uint64_t value)
{
    return mix((static_cast<std::uint64_t>(field + 1) << 48) ^ mix(value));
}

}  // namespace

float ctr_numeric_value(double x) { return static_cast<float>(x >= 0 ? std::log1p(x) : -std::log1p(-x)); }

bool parse_ctr_line(std::string_view line, ctr_sample& out, std::string& why)
{
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out.keys.clear();
    out.field_begin[0] = 0;
    std::size_t field = 0, at = 0;
    const std::size_t fields = 1 + ctr_numeric_fields + ctr_categorical_fields;
    for (; field < fields; ++field) {
        if (at > line.size()) break;
        const std::size_t tab = std::min(line.find('\t', at), line.size());
        const std::string_view text = line.substr(at, tab - at);
        at = tab + 1;
        const char* b = text.data();
        const char* e = b + text.size();
        if (field == 0) {
            if (text != "0" && text != "1") {
                why = fmt::format("the label is '{}', not 0 or 1", text.substr(0, 20));
                return false;
            }
            out.label = text == "1" ? 1.0f : 0.0f;
        } else if (field <= ctr_numeric_fields) {
            auto& v = out.numeric[field - 1];
            if (text.empty()) {
                v = 0;
                continue;
            }
            long long x = 0;
            auto [p, ec] = std::from_chars(b, e, x);
            if (ec != std::errc() || p != e) {
                why = fmt::format("integer feature I{} is '{}', not an integer", field, text.substr(0, 20));
                return false;
            }
            v = ctr_numeric_value(static_cast<double>(x));
        } else {
            const int f = static_cast<int>(field - 1 - ctr_numeric_fields);
            if (text.empty()) {
                out.keys.push_back(field_key(f, ~std::uint64_t(0)));
            } else {
                // One hex id, or several separated by commas.
                std::size_t ids = 0;
                for (const char* id = b; id <= e; ++ids) {
                    const char* end = std::find(id, e, ',');
                    std::uint64_t x = 0;
                    auto [p, ec] = end - id >= 1 && end - id <= 16
                                       ? std::from_chars(id, end, x, 16)
                                       : std::from_chars_result{id, std::errc::invalid_argument};
                    if (ec != std::errc() || p != end) {
                        why =
                            end == e && id == b
                                ? fmt::format("categorical feature C{} is '{}', not a hex string of at most 16 digits "
                                              "(or several separated by commas)",
                                              f + 1, text.substr(0, 20))
                                : fmt::format(
                                      "categorical feature C{} is '{}': id {} of its list is '{}', not a hex string "
                                      "of at most 16 digits",
                                      f + 1, text.substr(0, 40), ids + 1,
                                      std::string_view(id, static_cast<std::size_t>(end - id)).substr(0, 20));
                        return false;
                    }
                    if (ids == ctr_max_bag) {
                        why = fmt::format("categorical feature C{} holds more than {} ids", f + 1, ctr_max_bag);
                        return false;
                    }
                    out.keys.push_back(field_key(f, x));
                    if (end == e) break;  // the last id: end + 1 would point past the field
                    id = end + 1;
                }
            }
            out.field_begin[static_cast<std::size_t>(f) + 1] = static_cast<std::uint32_t>(out.keys.size());
        }
    }
    if (field < fields || at <= line.size()) {
        // Count the fields for the message.
        const std::size_t have = static_cast<std::size_t>(std::count(line.begin(), line.end(), '\t')) + 1;
        why = fmt::format("{} tab-separated fields where a Criteo line has {} (label, I1-I13, C1-C26)", have, fields);
        return false;
    }
    return true;
}

double auc(std::span<const float> scores, std::span<const float> labels)
{
    if (scores.size() != labels.size())
        throw error(fmt::format("auc: {} scores for {} labels", scores.size(), labels.size()));
    std::vector<std::uint32_t> order(scores.size());
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](auto a, auto b) { return scores[a] < scores[b]; });
    // Mann-Whitney: the sum of the positives' ranks, ties given their mean rank.
    double rank_sum = 0, positives = 0;
    for (std::size_t i = 0; i < order.size();) {
        std::size_t j = i;
        while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
        const double mean_rank = (static_cast<double>(i) + static_cast<double>(j) + 1) / 2;  // 1-based
        for (std::size_t k = i; k < j; ++k)
            if (labels[order[k]] > 0.5f) {
                rank_sum += mean_rank;
                ++positives;
            }
        i = j;
    }
    const double negatives = static_cast<double>(order.size()) - positives;
    if (positives == 0 || negatives == 0) return 0.5;
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

}  // namespace pstrain::data
