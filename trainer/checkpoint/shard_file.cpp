#include "trainer/checkpoint/shard_file.hpp"

#include "trainer/checkpoint/file_io.hpp"

#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace pstrain::checkpoint {
namespace {

constexpr char shard_magic[8] = {'P', 'S', 'T', 'R', 'C', 'K', 'P', 'T'};
constexpr std::size_t fixed_header = framed_file::fixed_header;

nlohmann::json meta_to_json(const shard_meta& m)
{
    return {{"global_step", m.global_step},          {"ps_index", m.ps_index},         {"num_ps", m.num_ps},
            {"range", {m.range.begin, m.range.end}}, {"total_params", m.total_params}, {"optimizer", m.optimizer},
            {"state_slots", m.state_slots},          {"updates", m.updates},           {"worker_batches", m.positions}};
}

shard_meta meta_from_json(const nlohmann::json& j)
{
    shard_meta m;
    m.global_step = j.at("global_step").get<std::uint64_t>();
    m.ps_index = j.at("ps_index").get<int>();
    m.num_ps = j.at("num_ps").get<int>();
    m.range.begin = j.at("range").at(0).get<std::size_t>();
    m.range.end = j.at("range").at(1).get<std::size_t>();
    m.total_params = j.at("total_params").get<std::uint64_t>();
    m.optimizer = j.at("optimizer").get<std::string>();
    m.state_slots = j.at("state_slots").get<int>();
    m.updates = j.at("updates").get<std::uint64_t>();
    m.positions = j.at("worker_batches").get<std::vector<std::uint64_t>>();
    if (m.range.end < m.range.begin || m.range.end > m.total_params || m.state_slots < 0 || m.state_slots > 2)
        throw error("metadata out of range");
    return m;
}

}  // namespace

shard_entry write_shard(const std::string& dir, const shard_meta& meta, std::span<const float> values,
                        std::span<const float> state)
{
    if (values.size() != meta.range.size() ||
        state.size() != values.size() * static_cast<std::size_t>(meta.state_slots))
        throw error("internal error: shard sizes do not match their metadata");
    const std::string name = shard_name(meta.global_step, meta.ps_index, meta.num_ps);
    const auto receipt =
        write_framed(dir, name, shard_magic, format_version, meta_to_json(meta).dump(), [&](atomic_file& f) {
            f.write(values.data(), values.size_bytes());
            f.write(state.data(), state.size_bytes());
        });
    return {name, meta.range, receipt.bytes, receipt.crc32, meta.global_step};
}

shard_data read_shard(const std::string& dir, const std::string& file, bool header_only)
{
    auto f = read_framed(dir, file, shard_magic, format_version, "a pstrain checkpoint shard", header_only);
    const std::uint64_t size = f.size, json_bytes = f.json_bytes;
    const auto& bytes = f.bytes;
    shard_data d;
    try {
        d.meta = meta_from_json(nlohmann::json::parse(bytes.begin() + fixed_header,
                                                      bytes.begin() + fixed_header + json_bytes, integers_only));
    } catch (const std::exception& e) {
        throw error(fmt::format("{} has unreadable metadata ({})", file, e.what()));
    }
    const std::uint64_t n = d.meta.range.size();
    const std::uint64_t per_value = 4 * (1 + static_cast<std::uint64_t>(d.meta.state_slots));
    // A range from the metadata so large that its byte count would wrap
    // around 2^64 could otherwise match the file's size and reach resize().
    if (n > (std::numeric_limits<std::uint64_t>::max() - fixed_header - json_bytes - 4) / per_value)
        throw error(fmt::format("{} is truncated ({} bytes, its metadata names {} values)", file, size, n));
    check_framed_size(f, file, fixed_header + json_bytes + per_value * n + 4);
    if (header_only) return d;
    d.crc32 = check_framed_checksum(f, file);
    const char* p = bytes.data() + fixed_header + json_bytes;
    d.values.resize(n);
    d.state.resize(n * static_cast<std::size_t>(d.meta.state_slots));
    // memcpy from or to the null data() of an empty vector is undefined:
    // an empty range, or a shard whose optimizer keeps no state (sgd).
    if (n == 0) return d;
    std::memcpy(d.values.data(), p, n * 4);
    if (!d.state.empty()) std::memcpy(d.state.data(), p + n * 4, d.state.size() * 4);
    return d;
}

}  // namespace pstrain::checkpoint
