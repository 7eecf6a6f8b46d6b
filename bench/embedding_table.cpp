// embedding-table: the PS's sparse table (pstrain::ps::embedding_table,
// Abseil's flat_hash_map index) beside the same rows behind a plain
// std::unordered_map, and both against this machine's memory bandwidth, in
// one run: pulls (lookups and copies of existing rows) and pushes (Adagrad
// updates) of batches of Zipf-distributed keys over a table of R rows.
// Rounds alternate; medians.  One JSON line per measurement.
//   bench/embedding-table [--rows R] [--dim D] [--batch B] [--zipf S] [--repeat N]
#include "pstrain/embedding.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0)
{
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Keys 0..rows-1 scrambled, drawn with Zipf(s) popularity: the ids of real
// click logs, where a few features are everywhere.
std::vector<std::uint64_t> zipf_keys(std::size_t n, std::size_t rows, double s, std::uint64_t seed)
{
    std::vector<double> cdf(rows);
    double sum = 0;
    for (std::size_t k = 0; k < rows; ++k) cdf[k] = sum += 1.0 / std::pow(static_cast<double>(k + 1), s);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0, sum);
    std::vector<std::uint64_t> keys(n);
    for (auto& k : keys) {
        const auto rank = static_cast<std::uint64_t>(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
        k = rank * 0x9E3779B97F4A7C15ull;  // spread: not sequential
    }
    return keys;
}

// The same rows behind std::unordered_map: the baseline.
struct plain_table {
    std::uint32_t dim;
    std::unordered_map<std::uint64_t, std::uint32_t> index;
    std::vector<float> rows;  // embedding and Adagrad's accumulator

    void pull(const std::vector<std::uint64_t>& keys, std::vector<float>& out)
    {
        for (std::size_t i = 0; i < keys.size(); ++i) {
            auto [it, fresh] = index.try_emplace(keys[i], static_cast<std::uint32_t>(index.size()));
            if (fresh) rows.resize(rows.size() + 2 * dim, 0.01f);
            const float* w = rows.data() + static_cast<std::size_t>(it->second) * 2 * dim;
            std::memcpy(out.data() + i * dim, w, dim * sizeof(float));
        }
    }
    void push(const std::vector<std::uint64_t>& keys, const std::vector<float>& grads, float lr)
    {
        for (std::size_t i = 0; i < keys.size(); ++i) {
            auto it = index.find(keys[i]);
            if (it == index.end()) continue;
            float* w = rows.data() + static_cast<std::size_t>(it->second) * 2 * dim;
            float* a = w + dim;
            const float* g = grads.data() + i * dim;
            for (std::uint32_t d = 0; d < dim; ++d) {
                a[d] += g[d] * g[d];
                w[d] -= lr * g[d] / std::sqrt(a[d]);
            }
        }
    }
};

// Read bandwidth: sum over a buffer far larger than the caches.
double read_gbytes_per_s(std::size_t bytes)
{
    std::vector<std::uint64_t> buf(bytes / 8, 1);
    volatile std::uint64_t sink = 0;
    std::vector<double> rates;
    for (int r = 0; r < 5; ++r) {
        const auto t0 = clock_type::now();
        std::uint64_t s = 0;
        for (auto x : buf) s += x;
        sink = sink + s;
        rates.push_back(static_cast<double>(bytes) / seconds_since(t0) / 1e9);
    }
    return median(rates);
}

// Random reads of `row_bytes` from a buffer of `rows` rows, 16 in flight
// (prefetched in groups, as the table does): what the memory system gives
// a lookup that does nothing else, for the same key stream.
double random_rows_per_s(const std::vector<std::uint64_t>& keys, std::size_t rows, std::size_t row_bytes,
                         std::size_t dim)
{
    const std::size_t stride = (row_bytes + 15) / 16 * 16;
    std::vector<float> buf(rows * stride / sizeof(float), 1.0f);
    std::vector<float> out(16 * dim);
    std::vector<double> rates;
    for (int r = 0; r < 3; ++r) {
        const auto t0 = clock_type::now();
        for (std::size_t at = 0; at + 16 <= keys.size(); at += 16) {
            std::size_t slot[16];
            for (std::size_t i = 0; i < 16; ++i) {
                slot[i] = (keys[at + i] * 0x9E3779B97F4A7C15ull >> 20) % rows;
                __builtin_prefetch(buf.data() + slot[i] * (stride / sizeof(float)));
            }
            for (std::size_t i = 0; i < 16; ++i)
                std::memcpy(out.data() + i * dim, buf.data() + slot[i] * (stride / sizeof(float)), dim * sizeof(float));
        }
        rates.push_back(static_cast<double>(keys.size() / 16 * 16) / seconds_since(t0));
    }
    volatile float sink = out[0];
    (void)sink;
    return median(rates);
}

}  // namespace

int main(int argc, char** argv)
{
    std::size_t rows = 1 << 22, batch = 4096, repeat = 5;
    std::uint32_t dim = 16;
    double zipf = 1.05;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--rows") rows = std::strtoull(argv[i + 1], nullptr, 10);
        else if (a == "--dim") dim = static_cast<std::uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
        else if (a == "--batch") batch = std::strtoull(argv[i + 1], nullptr, 10);
        else if (a == "--zipf") zipf = std::strtod(argv[i + 1], nullptr);
        else if (a == "--repeat") repeat = std::strtoull(argv[i + 1], nullptr, 10);
        else {
            std::fprintf(stderr,
                         "embedding-table: unknown argument %s: use --rows, --dim, --batch, --zipf or --repeat\n",
                         a.c_str());
            return 2;
        }
    }
    if (rows == 0 || dim == 0 || batch == 0 || repeat == 0) {
        std::fprintf(stderr, "embedding-table: --rows, --dim, --batch and --repeat must be positive\n");
        return 2;
    }
    const std::size_t batches = 200;
    const auto keys = zipf_keys(batch * batches, rows, zipf, 1);
    pstrain::ps::embedding_config cfg;
    cfg.dim = dim;
    pstrain::ps::embedding_table table(cfg);
    plain_table plain{dim, {}, {}};
    // Every key a row first (the measurement is of lookups, not of making rows).
    {
        std::vector<std::uint64_t> all(rows);
        for (std::size_t k = 0; k < rows; ++k) all[k] = k * 0x9E3779B97F4A7C15ull;
        std::vector<float> out(rows * dim);
        table.pull(all, out, 0);
        plain.pull(all, out);
    }
    std::vector<float> out(batch * dim), grads(batch * dim, 0.001f);
    std::vector<std::uint64_t> b(batch);
    std::vector<double> pull_table, pull_plain, push_table, push_plain;
    for (std::size_t r = 0; r < repeat; ++r) {
        auto t0 = clock_type::now();
        for (std::size_t i = 0; i < batches; ++i) {
            std::copy_n(keys.begin() + static_cast<long>(i * batch), batch, b.begin());
            table.pull(b, out, r + 1);
        }
        pull_table.push_back(static_cast<double>(batch * batches) / seconds_since(t0));
        t0 = clock_type::now();
        for (std::size_t i = 0; i < batches; ++i) {
            std::copy_n(keys.begin() + static_cast<long>(i * batch), batch, b.begin());
            plain.pull(b, out);
        }
        pull_plain.push_back(static_cast<double>(batch * batches) / seconds_since(t0));
        t0 = clock_type::now();
        for (std::size_t i = 0; i < batches; ++i) {
            std::copy_n(keys.begin() + static_cast<long>(i * batch), batch, b.begin());
            table.push(b, grads, r + 1);
        }
        push_table.push_back(static_cast<double>(batch * batches) / seconds_since(t0));
        t0 = clock_type::now();
        for (std::size_t i = 0; i < batches; ++i) {
            std::copy_n(keys.begin() + static_cast<long>(i * batch), batch, b.begin());
            plain.push(b, grads, 0.05f);
        }
        push_plain.push_back(static_cast<double>(batch * batches) / seconds_since(t0));
    }
    const double gbs = read_gbytes_per_s(std::size_t(1) << 30);
    // Bandwidth bound: a pull reads at least a row's embedding and its
    // index entry, a cache line each.
    const double row_bytes = std::max<double>(64.0, dim * sizeof(float)) + 64.0;
    const double bound = gbs * 1e9 / row_bytes;
    // Latency bound: random reads of a row's size, 16 in flight, nothing else.
    const double reads = random_rows_per_s(keys, rows, static_cast<std::size_t>(table.bytes_per_row()), dim);
    std::printf("{\"rows\":%zu,\"dim\":%u,\"batch\":%zu,\"zipf\":%.2f,\"bytes_per_row\":%.1f,\"read_gb_per_s\":%.2f,"
                "\"rows_per_s_bandwidth_bound\":%.0f,\"random_row_reads_per_s\":%.0f}\n",
                rows, dim, batch, zipf, table.bytes_per_row(), gbs, bound, reads);
    std::printf("{\"op\":\"pull\",\"table_keys_per_s\":%.0f,\"unordered_map_keys_per_s\":%.0f,\"ratio\":%.2f,"
                "\"of_bandwidth_bound\":%.2f,\"of_random_reads\":%.2f}\n",
                median(pull_table), median(pull_plain), median(pull_table) / median(pull_plain),
                median(pull_table) / bound, median(pull_table) / reads);
    std::printf("{\"op\":\"push\",\"table_keys_per_s\":%.0f,\"unordered_map_keys_per_s\":%.0f,\"ratio\":%.2f}\n",
                median(push_table), median(push_plain), median(push_table) / median(push_plain));
    return 0;
}
