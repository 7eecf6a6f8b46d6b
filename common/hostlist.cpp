#include "common/hostlist.hpp"

#include "pstrain/error.hpp"
#include "common/parse.hpp"

#include <fmt/format.h>

namespace pstrain {
namespace {

constexpr std::size_t max_hosts = 1u << 20;

// Splits on commas that are outside brackets.
std::vector<std::string_view> split_top_level(std::string_view expr, std::string_view whole)
{
    std::vector<std::string_view> items;
    int depth = 0;
    std::size_t start = 0;
    for (std::size_t i = 0; i < expr.size(); ++i) {
        char c = expr[i];
        if (c == '[') {
            if (++depth > 1) throw error(fmt::format("hostlist '{}': nested '[' is not allowed", whole));
        } else if (c == ']') {
            if (--depth < 0) throw error(fmt::format("hostlist '{}': ']' without '['", whole));
        } else if (c == ',' && depth == 0) {
            items.push_back(expr.substr(start, i - start));
            start = i + 1;
        }
    }
    if (depth != 0) throw error(fmt::format("hostlist '{}': '[' is not closed", whole));
    items.push_back(expr.substr(start));
    return items;
}

// Expands the bracket body "1-3,07,10-11" into zero-padded suffixes.
std::vector<std::string> expand_ranges(std::string_view body, std::string_view whole)
{
    std::vector<std::string> out;
    for (std::string_view range : split(body, ',')) {
        std::size_t dash = range.find('-');
        std::string_view lo_text = range.substr(0, dash);
        std::string_view hi_text = dash == std::string_view::npos ? lo_text : range.substr(dash + 1);
        auto lo = parse_count(lo_text, 0, 999999999);
        auto hi = parse_count(hi_text, 0, 999999999);
        if (!lo || !hi || *hi < *lo)
            throw error(fmt::format("hostlist '{}': bad range '{}' (expected N or N-M with N <= M)", whole, range));
        if (out.size() + static_cast<std::size_t>(*hi - *lo + 1) > max_hosts)
            throw error(fmt::format("hostlist '{}': more than {} hosts", whole, max_hosts));
        std::size_t width = lo_text.size();
        for (auto v = *lo; v <= *hi; ++v) {
            std::string digits = std::to_string(v);
            if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
            out.push_back(std::move(digits));
        }
    }
    return out;
}

// Expands one item, which may hold several bracket groups ("r[1-2]n[1-2]").
void expand_item(std::string_view item, std::string_view whole, std::string prefix, std::vector<std::string>& out)
{
    std::size_t open = item.find('[');
    if (open == std::string_view::npos) {
        out.push_back(prefix.append(item));
        return;
    }
    std::size_t close = item.find(']', open);
    std::string_view head = item.substr(0, open);
    std::string_view body = item.substr(open + 1, close - open - 1);
    std::string_view rest = item.substr(close + 1);
    for (const auto& suffix : expand_ranges(body, whole)) {
        expand_item(rest, whole, prefix + std::string(head) + suffix, out);
        if (out.size() > max_hosts) throw error(fmt::format("hostlist '{}': more than {} hosts", whole, max_hosts));
    }
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view expr)
{
    if (expr.empty()) throw error("hostlist is empty");
    std::vector<std::string> hosts;
    for (auto item : split_top_level(expr, expr)) {
        if (item.empty()) throw error(fmt::format("hostlist '{}': empty host name", expr));
        for (char c : item) {
            if (c == ' ' || c == '\t' || c == '\n')
                throw error(fmt::format("hostlist '{}': white space in a host name", expr));
            // Host names go into JSON (PSTRAIN_CLUSTER, TF_CONFIG), which
            // refuses bytes that are not UTF-8: only printable ASCII.
            if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e)
                throw error(fmt::format("hostlist: byte 0x{:02x} in a host name: host names are printable ASCII",
                                        static_cast<unsigned char>(c)));
        }
        expand_item(item, expr, std::string(), hosts);
    }
    return hosts;
}

std::vector<int> expand_task_counts(std::string_view expr)
{
    std::vector<int> counts;
    if (expr.empty()) throw error("task count list is empty");
    for (std::string_view item : split(expr, ',')) {
        std::int64_t repeat = 1;
        std::size_t paren = item.find('(');
        if (paren != std::string_view::npos) {
            if (item.size() < paren + 4 || item[paren + 1] != 'x' || item.back() != ')')
                throw error(fmt::format("task counts '{}': bad item '{}' (expected N or N(xK))", expr, item));
            auto r = parse_count(item.substr(paren + 2, item.size() - paren - 3), 1, 1 << 20);
            if (!r) throw error(fmt::format("task counts '{}': bad repeat in '{}'", expr, item));
            repeat = *r;
            item = item.substr(0, paren);
        }
        auto n = parse_count(item, 0, 1 << 20);
        if (!n) throw error(fmt::format("task counts '{}': bad count '{}'", expr, item));
        if (counts.size() + static_cast<std::size_t>(repeat) > max_hosts)
            throw error(fmt::format("task counts '{}': too many nodes", expr));
        counts.insert(counts.end(), static_cast<std::size_t>(repeat), static_cast<int>(*n));
    }
    return counts;
}

}  // namespace pstrain
