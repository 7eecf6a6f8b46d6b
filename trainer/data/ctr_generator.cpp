#include "trainer/data/ctr_generator.hpp"

#include "common/random.hpp"
#include "pstrain/error.hpp"
#include "trainer/data/ctr.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <random>
#include <system_error>

#include <fmt/format.h>

namespace pstrain::data {
namespace {

// 64 well-mixed bits of x: splitmix64's first output from seed x.
std::uint64_t mix(std::uint64_t x) { return random::splitmix64(x)(); }

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
    for (int j = 0; j < ctr_numeric_fields; ++j)
        numeric_weight[static_cast<std::size_t>(j)] = 0.15 * gauss(teacher + 1000 + j);

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

    const std::uint64_t test =
        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(static_cast<double>(o.samples) * o.test_fraction));
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
            logit += numeric_weight[static_cast<std::size_t>(j)] * ctr_numeric_value(static_cast<double>(x));
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
            logit += 0.5 * (sum[static_cast<std::size_t>(c)] * sum[static_cast<std::size_t>(c)] -
                            sum_sq[static_cast<std::size_t>(c)]);
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
    j << fmt::format(
        "{{\"oracle_auc\":{:.6f},\"oracle_logloss\":{:.6f},\"click_rate\":{:.6f},\"train_samples\":{},"
        "\"test_samples\":{},\"seed\":{},\"zipf\":{},\"factors\":{},\"generator\":\"pstrain datagen ctr\"}}\n",
        g.oracle_auc, g.oracle_logloss, g.click_rate, train, test, o.seed, o.zipf, k);
    j.close();
    if (!j) throw error(fmt::format("{}: cannot write", oracle.string()));
    return g;
}

}  // namespace pstrain::data
