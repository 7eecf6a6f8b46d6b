// The embedding tables' checkpoint files: bytes a row takes on disk and
// the time of a full save, of an incremental one (a fraction of the rows
// changed) and of a restore of the chain, for one PS's table.
//
//   bench/table-checkpoint [--rows R] [--dim D] [--changed F] [--repeat N] [--dir DIR]
//
// DIR (default: a new directory under /tmp) should be on the filesystem
// checkpoints go to; every save is fsynced, as in training.
#include "pstrain/embedding.hpp"
#include "trainer/checkpoint/checkpoint.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

using namespace pstrain;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv)
{
    std::uint64_t rows = 1000000, repeat = 3;
    std::uint32_t dim = 16;
    double changed = 0.05;
    std::string dir;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--rows") rows = std::strtoull(argv[i + 1], nullptr, 10);
        else if (a == "--dim") dim = static_cast<std::uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
        else if (a == "--changed") changed = std::strtod(argv[i + 1], nullptr);
        else if (a == "--repeat") repeat = std::strtoull(argv[i + 1], nullptr, 10);
        else if (a == "--dir") dir = argv[i + 1];
        else {
            std::fprintf(stderr,
                         "table-checkpoint: unknown argument %s: use --rows, --dim, --changed, --repeat or --dir\n",
                         argv[i]);
            return 2;
        }
    }
    if (rows == 0 || dim == 0 || repeat == 0 || !(changed > 0 && changed <= 1)) {
        std::fprintf(stderr, "table-checkpoint: --rows, --dim and --repeat must be positive and --changed in (0, 1]\n");
        return 2;
    }
    bool made = false;
    if (dir.empty()) {
        char tmpl[] = "/tmp/pstrain-table-checkpoint-XXXXXX";
        if (!::mkdtemp(tmpl)) return 1;
        dir = tmpl;
        made = true;
    }
    ps::embedding_config c;
    c.dim = dim;
    std::vector<ps::embedding_table> tables;
    tables.emplace_back(c);
    auto& t = tables[0];
    {
        std::vector<std::uint64_t> keys(4096);
        std::vector<float> out(keys.size() * dim);
        for (std::uint64_t at = 0; at < rows; at += keys.size()) {
            const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(keys.size(), rows - at));
            for (std::size_t i = 0; i < n; ++i) keys[i] = (at + i) * 0x9e3779b97f4a7c15ull;
            t.pull(std::span(keys).first(n), std::span(out).first(n * dim), 1);
        }
    }
    std::vector<double> full_s, inc_s, restore_s;
    std::uint64_t full_bytes = 0, inc_bytes = 0, inc_rows = 0;
    const std::uint64_t touched =
        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(static_cast<double>(rows) * changed));
    for (std::uint64_t r = 0; r < repeat; ++r) {
        const std::uint64_t base = 10 * (r + 1);
        checkpoint::table_meta m;
        m.global_step = base;
        m.chain = {base};
        auto t0 = std::chrono::steady_clock::now();
        const auto full = checkpoint::write_tables(dir, m, tables);
        t.clear_changed();
        full_s.push_back(seconds_since(t0));
        full_bytes = full.bytes;
        // Pushes to a spread-out `changed` share of the rows.
        std::vector<std::uint64_t> keys;
        const std::uint64_t stride = rows / touched;
        for (std::uint64_t k = 0; k < touched; ++k) keys.push_back((k * stride + r) % rows * 0x9e3779b97f4a7c15ull);
        std::vector<float> g(keys.size() * dim, 0.01f);
        t.push(keys, g, base + 1);
        m.global_step = base + 1;
        m.full = false;
        m.chain = {base, base + 1};
        t0 = std::chrono::steady_clock::now();
        const auto inc = checkpoint::write_tables(dir, m, tables);
        t.clear_changed();
        inc_s.push_back(seconds_since(t0));
        inc_bytes = inc.bytes;
        inc_rows = keys.size();
        checkpoint::manifest man;
        man.global_step = base + 1;
        man.tables = checkpoint::layout_of(tables);
        man.table_files = {inc};
        std::vector<ps::embedding_table> back;
        back.emplace_back(c);
        t0 = std::chrono::steady_clock::now();
        checkpoint::load_tables(dir, man, 0, 1, back);
        restore_s.push_back(seconds_since(t0));
        if (back[0].rows() != t.rows()) {
            std::fprintf(stderr, "table-checkpoint: the restore gave %zu rows of %zu\n", back[0].rows(), t.rows());
            return 1;
        }
        std::filesystem::remove(dir + "/" + checkpoint::table_name(base, 0, 1));
        std::filesystem::remove(dir + "/" + checkpoint::table_name(base + 1, 0, 1));
    }
    fmt::print("rows {}  dim {}  adagrad  changed {} ({} rows)  medians of {}\n", rows, dim, changed, inc_rows, repeat);
    fmt::print("full save         {:>10.3f} s  {:>12} bytes  {:.1f} bytes/row  {:.2f} M rows/s\n", median(full_s),
               full_bytes, static_cast<double>(full_bytes) / static_cast<double>(rows),
               static_cast<double>(rows) / median(full_s) / 1e6);
    fmt::print("incremental save  {:>10.3f} s  {:>12} bytes  {:.1f} bytes/changed row\n", median(inc_s), inc_bytes,
               static_cast<double>(inc_bytes) / static_cast<double>(inc_rows));
    fmt::print("restore (full + incremental, every row)  {:.3f} s\n", median(restore_s));
    if (made) std::filesystem::remove_all(dir);
    return 0;
}
