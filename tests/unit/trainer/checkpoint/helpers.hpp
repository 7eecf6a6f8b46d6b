// Helpers of the checkpoint tests: a scratch directory, a checkpoint of
// known contents, and ways to damage a file.
#pragma once

#include "pstrain/error.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "pstrain/partition.hpp"  // make_partition: the PS tasks' own cut of the vector

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace pstrain::testing {

struct temp_dir {
    temp_dir()
    {
        char tmpl[] = "/tmp/pstrain-test-checkpoint-XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~temp_dir() { std::filesystem::remove_all(path); }
    std::string path;
};

// A model of `n` parameters with Adam state, cut into the given ranges (one
// shard file each, PS p with updates `step + p * updates_step`), written at
// `step`; values[i] = step + i, state slot k of i = -(i + k * n).
inline checkpoint::manifest write_checkpoint(const std::string& dir, std::uint64_t step, std::size_t n,
                                             const std::vector<ps::shard_range>& ranges, std::uint64_t updates_step = 0)
{
    checkpoint::manifest m;
    m.global_step = step;
    m.mode = "sync";
    m.model = "test model";
    m.num_params = n;
    m.optimizer = "adam";
    m.state_slots = 2;
    m.seed = 1;
    m.batch_size = 10;
    m.positions = {step, step};
    for (const auto& r : ranges) {
        checkpoint::shard_meta meta;
        meta.global_step = step;
        meta.ps_index = static_cast<int>(m.shards.size());
        meta.num_ps = static_cast<int>(ranges.size());
        meta.range = r;
        meta.total_params = n;
        meta.optimizer = "adam";
        meta.state_slots = 2;
        meta.updates = step + static_cast<std::uint64_t>(meta.ps_index) * updates_step;
        meta.positions = m.positions;
        std::vector<float> values(r.size()), state(2 * r.size());
        for (std::size_t i = r.begin; i < r.end; ++i) {
            values[i - r.begin] = static_cast<float>(step + i);
            state[i - r.begin] = -static_cast<float>(i);
            state[r.size() + i - r.begin] = -static_cast<float>(i + n);
        }
        m.shards.push_back(checkpoint::write_shard(dir, meta, values, state));
    }
    checkpoint::write_manifest(dir, m);
    return m;
}

// The same as `num_ps` equal shards, as the PS tasks cut it.
inline checkpoint::manifest write_checkpoint(const std::string& dir, std::uint64_t step, std::size_t n, int num_ps)
{
    return write_checkpoint(dir, step, n, ps::make_partition(n, num_ps));
}

inline void flip_byte(const std::string& path, std::streamoff at)
{
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    char c = 0;
    f.get(c);
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x01));
}

inline std::string read_text(const std::string& path)
{
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

inline void write_text(const std::string& path, const std::string& text)
{
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
}

// The message of the pstrain::error `f` throws; "no error" when it returns.
// Changes the step a checkpoint's manifest names without fixing its crc32,
// as a bad disk or a hand edit would; returns the manifest's path.
inline std::string change_manifest_step(const std::string& dir, std::uint64_t step)
{
    const auto path = dir + "/" + checkpoint::manifest_name(step);
    std::string text = read_text(path);
    const auto from = "\"global_step\": " + std::to_string(step);
    const auto at = text.find(from);
    if (at == std::string::npos) throw std::runtime_error("test helper: no global_step in " + path);
    text.replace(at, from.size(), "\"global_step\": " + std::to_string(step + 1));
    write_text(path, text);
    return path;
}

inline std::string error_of(const std::function<void()>& f)
{
    try {
        f();
    } catch (const error& e) {
        return e.what();
    }
    return "no error";
}

// The names in `dir`, sorted.
inline std::vector<std::string> names_in(const std::string& dir)
{
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace pstrain::testing
