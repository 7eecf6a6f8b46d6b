#include "trainer/data/ctr.hpp"

#include "common/random.hpp"
#include "pstrain/error.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <random>
#include <system_error>

#include <fmt/format.h>

namespace pstrain::data {
namespace {

// 64 well-mixed bits of x: splitmix64's first output from seed x.
std::uint64_t mix(std::uint64_t x) { return random::splitmix64(x)(); }

// The key of categorical field f's value (blank: value ~0).
std::uint64_t field_key(int field, std::uint64_t value) { return mix((static_cast<std::uint64_t>(field + 1) << 48) ^ mix(value)); }

float squash(double x) { return static_cast<float>(x >= 0 ? std::log1p(x) : -std::log1p(-x)); }

// A bijection of 32-bit ids (odd multiplier, xor-shifts): the hex strings
// of the generated data, one per id, no collisions.
std::uint32_t scramble(std::uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

}  // namespace

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
            v = squash(static_cast<double>(x));
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
                    auto [p, ec] = end - id >= 1 && end - id <= 16 ? std::from_chars(id, end, x, 16)
                                                                  : std::from_chars_result{id, std::errc::invalid_argument};
                    if (ec != std::errc() || p != end) {
                        why = end == e && id == b
                                  ? fmt::format("categorical feature C{} is '{}', not a hex string of at most 16 digits "
                                                "(or several separated by commas)", f + 1, text.substr(0, 20))
                                  : fmt::format("categorical feature C{} is '{}': id {} of its list is '{}', not a hex string "
                                                "of at most 16 digits", f + 1, text.substr(0, 40), ids + 1,
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

std::vector<std::filesystem::path> ctr_train_files(const std::filesystem::path& path)
{
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) return {path};
    if (!std::filesystem::is_directory(path, ec))
        throw error(fmt::format("--data-dir {}: no such file or directory: give --data-dir a folder of Criteo-style .tsv "
                                "click-through files (make some with `pstrain datagen ctr DIR`)", path.string()));
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
        const auto ext = e.path().extension();
        if (e.is_regular_file() && (ext == ".tsv" || ext == ".txt") && e.path().filename() != "test.tsv")
            files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty())
        throw error(fmt::format("{}: no .tsv or .txt files (test.tsv is the held-out part): make some with `pstrain datagen "
                                "ctr {}`", path.string(), path.string()));
    return files;
}

ctr_reader::ctr_reader(std::vector<std::filesystem::path> files, std::size_t shard, std::size_t num_shards, bool skip)
    : files_(std::move(files)), shard_(shard), num_shards_(num_shards), skip_(skip)
{
    if (num_shards_ == 0 || shard_ >= num_shards_)
        throw error(fmt::format("ctr_reader: shard {} of {} does not exist", shard_, num_shards_));
    if (files_.empty()) throw error("ctr_reader: no files to read");
    rewind();
}

void ctr_reader::rewind()
{
    file_ = 0;
    line_ = 0;
    in_.close();
    in_.clear();
    in_.open(files_[0]);
    file_line_ = 0;
    if (!in_) throw error(fmt::format("{}: cannot open: check its permissions", files_[0].string()));
}

bool ctr_reader::open_next_file()
{
    if (++file_ >= files_.size()) return false;
    in_.close();
    in_.clear();
    in_.open(files_[file_]);
    file_line_ = 0;
    if (!in_) throw error(fmt::format("{}: cannot open: check its permissions", files_[file_].string()));
    return true;
}

bool ctr_reader::next(ctr_sample& out)
{
    for (;;) {
        if (!std::getline(in_, text_)) {
            if (in_.bad()) throw error(fmt::format("{}: read error after line {}", files_[file_].string(), file_line_));
            if (!open_next_file()) return false;
            continue;
        }
        ++file_line_;
        if (text_.empty() || (text_.size() == 1 && text_[0] == '\r')) continue;
        if (line_++ % num_shards_ != shard_) continue;
        std::string why;
        if (parse_ctr_line(text_, out, why)) return true;
        if (!skip_)
            throw error(fmt::format("{}:{}: {}: fix the line, or pass --skip-bad-lines to count and skip such lines",
                                    files_[file_].string(), file_line_, why));
        ++bad_lines_;
    }
}

double auc(std::span<const float> scores, std::span<const float> labels)
{
    if (scores.size() != labels.size()) throw error(fmt::format("auc: {} scores for {} labels", scores.size(), labels.size()));
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

ctr_generated generate_ctr(const std::filesystem::path& dir, const ctr_generator_options& o)
{
    if (o.samples < 2) throw error("datagen ctr: --samples must be at least 2");
    if (!(o.test_fraction > 0 && o.test_fraction < 1))
        throw error(fmt::format("datagen ctr: --test-fraction {} must be between 0 and 1", o.test_fraction));
    if (o.lines_per_file == 0) throw error("datagen ctr: --lines-per-file must be positive");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw error(fmt::format("{}: cannot make the directory: {}", dir.string(), ec.message()));

    // The teacher: per field a vocabulary size and a salt; per (field, id)
    // a weight and `factors` latent values, drawn from the seed and the id.
    const int k = std::max(1, o.factors);
    std::array<std::uint64_t, ctr_categorical_fields> vocab{};
    static constexpr std::uint64_t sizes[] = {8, 60, 500, 3000, 20000, 150000, 1000000};
    for (int f = 0; f < ctr_categorical_fields; ++f) vocab[static_cast<std::size_t>(f)] = sizes[f % 7];
    const auto gauss = [&](std::uint64_t h) {  // a normal(0, 1) from a hash (Box-Muller)
        const double u1 = (static_cast<double>(mix(h) >> 11) + 0.5) * 0x1.0p-53;
        const double u2 = static_cast<double>(mix(h ^ 0x5bd1e995) >> 11) * 0x1.0p-53;
        return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
    };
    const std::uint64_t teacher = mix(o.seed ^ 0x7465616368657221ull);
    std::array<double, ctr_numeric_fields> numeric_weight{};
    for (int j = 0; j < ctr_numeric_fields; ++j) numeric_weight[static_cast<std::size_t>(j)] = 0.15 * gauss(teacher + 1000 + j);

    std::mt19937_64 rng(o.seed);
    std::uniform_real_distribution<double> unit(0, 1);
    const double s = o.zipf;
    const auto zipf_id = [&](std::uint64_t v) {  // continuous power-law inverse, floored: Zipf-like over [0, v)
        const double u = unit(rng);
        const double a = 1 - s;
        const double x = std::abs(a) < 1e-9 ? std::exp(u * std::log(static_cast<double>(v) + 1))
                                            : std::pow(u * (std::pow(static_cast<double>(v) + 1, a) - 1) + 1, 1 / a);
        return std::min<std::uint64_t>(v - 1, static_cast<std::uint64_t>(x) - 1);
    };

    const std::uint64_t test = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(static_cast<double>(o.samples) * o.test_fraction));
    const std::uint64_t train = o.samples - test;
    ctr_generated g;
    g.train_samples = train;
    g.test_samples = test;
    std::vector<float> test_p, test_y;
    test_p.reserve(test);
    test_y.reserve(test);
    std::ofstream out;
    std::filesystem::path current;
    double clicks = 0, logloss = 0;
    std::vector<double> sum(static_cast<std::size_t>(k)), sum_sq(static_cast<std::size_t>(k));
    for (std::uint64_t i = 0; i < o.samples; ++i) {
        if (i == train || (i < train && i % o.lines_per_file == 0)) {
            if (out.is_open()) {
                out.close();
                if (!out) throw error(fmt::format("{}: write failed: is the disk full?", current.string()));
            }
            current = i == train ? dir / "test.tsv" : dir / fmt::format("train-{:05}.tsv", i / o.lines_per_file);
            out.open(current, std::ios::trunc);
            if (!out) throw error(fmt::format("{}: cannot write: check the directory's permissions", current.string()));
            g.files.push_back(current);
        }
        double logit = -1.3;  // about one click in four
        std::fill(sum.begin(), sum.end(), 0.0);
        std::fill(sum_sq.begin(), sum_sq.end(), 0.0);
        std::string fields;
        for (int j = 0; j < ctr_numeric_fields; ++j) {
            fields += '\t';
            if (unit(rng) < 0.1) continue;  // blank
            const auto x = static_cast<std::int64_t>(std::floor(std::exp(unit(rng) * (2 + j % 5)))) - (j == 1 ? 2 : 0);
            fields += std::to_string(x);
            logit += numeric_weight[static_cast<std::size_t>(j)] * squash(static_cast<double>(x));
        }
        for (int f = 0; f < ctr_categorical_fields; ++f) {
            fields += '\t';
            if (unit(rng) < 0.03 * (f % 4)) continue;  // blank in some fields
            const std::uint64_t id = zipf_id(vocab[static_cast<std::size_t>(f)]);
            const std::uint32_t hex = scramble(static_cast<std::uint32_t>(id) ^ static_cast<std::uint32_t>(mix(f + 1)));
            fields += fmt::format("{:08x}", hex);
            const std::uint64_t h = teacher ^ (static_cast<std::uint64_t>(f + 1) << 40) ^ id;
            logit += 0.15 * gauss(h);
            for (int c = 0; c < k; ++c) {
                const double v = 0.15 * gauss(h * 31 + static_cast<std::uint64_t>(c) + 7);
                sum[static_cast<std::size_t>(c)] += v;
                sum_sq[static_cast<std::size_t>(c)] += v * v;
            }
        }
        for (int c = 0; c < k; ++c)
            logit += 0.5 * (sum[static_cast<std::size_t>(c)] * sum[static_cast<std::size_t>(c)] - sum_sq[static_cast<std::size_t>(c)]);
        const double p = 1 / (1 + std::exp(-std::clamp(logit, -30.0, 30.0)));
        const bool click = unit(rng) < p;
        clicks += click;
        out.put(click ? '1' : '0');
        out.write(fields.data(), static_cast<std::streamsize>(fields.size()));
        out.put('\n');
        if (i >= train) {
            test_p.push_back(static_cast<float>(p));
            test_y.push_back(click ? 1.0f : 0.0f);
            logloss -= click ? std::log(std::max(p, 1e-15)) : std::log(std::max(1 - p, 1e-15));
        }
    }
    out.close();
    if (!out) throw error(fmt::format("{}: write failed: is the disk full?", current.string()));
    g.oracle_auc = auc(test_p, test_y);
    g.oracle_logloss = logloss / static_cast<double>(test);
    g.click_rate = clicks / static_cast<double>(o.samples);
    const auto oracle = dir / "oracle.json";
    std::ofstream j(oracle, std::ios::trunc);
    j << fmt::format("{{\"oracle_auc\":{:.6f},\"oracle_logloss\":{:.6f},\"click_rate\":{:.6f},\"train_samples\":{},"
                     "\"test_samples\":{},\"seed\":{},\"zipf\":{},\"factors\":{},\"generator\":\"pstrain datagen ctr\"}}\n",
                     g.oracle_auc, g.oracle_logloss, g.click_rate, train, test, o.seed, o.zipf, k);
    j.close();
    if (!j) throw error(fmt::format("{}: cannot write", oracle.string()));
    return g;
}

}  // namespace pstrain::data
