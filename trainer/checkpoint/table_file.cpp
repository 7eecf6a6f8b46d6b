#include "trainer/checkpoint/table_file.hpp"

#include "pstrain/error.hpp"
#include "trainer/checkpoint/file_io.hpp"
#include "trainer/checkpoint/shard_file.hpp"

#include <cerrno>
#include <cstring>
#include <limits>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

namespace pstrain::checkpoint {
namespace {

constexpr char table_magic[8] = {'P', 'S', 'T', 'R', 'T', 'A', 'B', 'L'};
constexpr std::size_t fixed_header = framed_file::fixed_header;
constexpr std::uint64_t row_header = 32;  // key, last_seen, count, updates

std::uint64_t row_bytes(const table_layout& t) { return row_header + 4ull * t.dim * (1ull + t.slots); }

nlohmann::json meta_to_json(const table_meta& m)
{
    nlohmann::json tables = nlohmann::json::array();
    for (std::size_t i = 0; i < m.tables.size(); ++i)
        tables.push_back({{"dim", m.tables[i].dim},
                          {"optimizer", m.tables[i].optimizer},
                          {"slots", m.tables[i].slots},
                          {"rows", m.rows[i]},
                          {"removed", m.removed[i]}});
    return {{"global_step", m.global_step},
            {"ps_index", m.ps_index},
            {"num_ps", m.num_ps},
            {"kind", m.full ? "full" : "incremental"},
            {"chain", m.chain},
            {"tables", tables}};
}

table_meta meta_from_json(const nlohmann::json& j)
{
    table_meta m;
    m.global_step = j.at("global_step").get<std::uint64_t>();
    m.ps_index = j.at("ps_index").get<int>();
    m.num_ps = j.at("num_ps").get<int>();
    const auto kind = j.at("kind").get<std::string>();
    if (kind != "full" && kind != "incremental") throw error(fmt::format("kind {} is not full or incremental", kind));
    m.full = kind == "full";
    m.chain = j.at("chain").get<std::vector<std::uint64_t>>();
    if (m.chain.empty() || m.chain.back() != m.global_step || m.full != (m.chain.size() == 1))
        throw error("its chain does not end at its own step");
    for (const auto& t : j.at("tables")) {
        table_layout l;
        l.dim = t.at("dim").get<std::uint32_t>();
        l.optimizer = t.at("optimizer").get<std::string>();
        l.slots = t.at("slots").get<std::uint32_t>();
        if (l.dim == 0 || l.dim > (1u << 20) || l.slots > 2)
            throw error("a table's dim or optimizer slots out of range");
        m.tables.push_back(l);
        m.rows.push_back(t.at("rows").get<std::uint64_t>());
        m.removed.push_back(t.at("removed").get<std::uint64_t>());
    }
    return m;
}

// Rows go out through a buffer: one write call per row would cost a
// system call each.
class buffered {
public:
    explicit buffered(atomic_file& f) : f_(f) { buf_.reserve(capacity); }
    void put(const void* p, std::size_t n)
    {
        if (buf_.size() + n > capacity) flush();
        const char* c = static_cast<const char*>(p);
        buf_.insert(buf_.end(), c, c + n);
    }
    void flush()
    {
        if (!buf_.empty()) f_.write(buf_.data(), buf_.size());
        buf_.clear();
    }

private:
    static constexpr std::size_t capacity = std::size_t(1) << 20;
    atomic_file& f_;
    std::vector<char> buf_;
};

}  // namespace

std::vector<table_layout> layout_of(std::span<const ps::embedding_table> tables)
{
    std::vector<table_layout> out;
    for (const auto& t : tables)
        out.push_back({t.config().dim, ps::row_optimizer_name(t.config().optimizer), t.slots()});
    return out;
}

table_entry write_tables(const std::string& dir, table_meta meta, std::span<const ps::embedding_table> tables)
{
    if (meta.chain.empty() || meta.chain.back() != meta.global_step || meta.full != (meta.chain.size() == 1))
        throw error("internal error: a table file's chain does not end at its step");
    meta.tables = layout_of(tables);
    meta.rows.clear();
    meta.removed.clear();
    std::vector<std::vector<std::uint64_t>> removed;
    for (const auto& t : tables) {
        std::uint64_t n = 0;
        if (meta.full) n = t.rows();
        else t.for_each_changed([&](const ps::embedding_row&) { ++n; });
        meta.rows.push_back(n);
        removed.push_back(meta.full ? std::vector<std::uint64_t>{} : t.removed_keys());
        meta.removed.push_back(removed.back().size());
    }
    const std::string name = table_name(meta.global_step, meta.ps_index, meta.num_ps);
    const auto receipt =
        write_framed(dir, name, table_magic, format_version, meta_to_json(meta).dump(), [&](atomic_file& f) {
            buffered out(f);
            for (std::size_t i = 0; i < tables.size(); ++i) {
                std::uint64_t written = 0;
                const auto put_row = [&](const ps::embedding_row& r) {
                    const std::uint64_t head[4] = {r.key, r.last_seen, r.count, r.updates};
                    out.put(head, sizeof head);
                    out.put(r.values.data(), r.values.size_bytes());
                    out.put(r.state.data(), r.state.size_bytes());
                    ++written;
                };
                if (meta.full) tables[i].for_each(put_row);
                else tables[i].for_each_changed(put_row);
                if (written != meta.rows[i]) throw error("internal error: a table changed while it was saved");
                out.put(removed[i].data(), removed[i].size() * sizeof(std::uint64_t));
            }
            out.flush();
        });
    table_entry e;
    e.file = name;
    e.ps = meta.ps_index;
    e.num_ps = meta.num_ps;
    e.bytes = receipt.bytes;
    e.crc32 = receipt.crc32;
    e.full = meta.full;
    e.base_step = meta.chain.front();
    e.chain = meta.chain;
    return e;
}

table_data read_tables(const std::string& dir, const std::string& file, bool header_only,
                       const std::function<void(std::size_t, const ps::embedding_row&)>& on_row,
                       const std::function<void(std::size_t, std::uint64_t)>& on_removed)
{
    auto f = read_framed(dir, file, table_magic, format_version, "a pstrain embedding table file", header_only);
    const std::uint64_t size = f.size, json_bytes = f.json_bytes;
    const auto& bytes = f.bytes;
    table_data d;
    d.bytes = size;
    try {
        d.meta = meta_from_json(nlohmann::json::parse(bytes.begin() + fixed_header,
                                                      bytes.begin() + fixed_header + json_bytes, integers_only));
    } catch (const std::exception& e) {
        throw error(fmt::format("{} has unreadable metadata ({})", file, e.what()));
    }
    // Every count is bounded by the file's size before it is multiplied,
    // so no product wraps around 2^64.
    std::uint64_t expected = fixed_header + json_bytes + 4;
    for (std::size_t i = 0; i < d.meta.tables.size(); ++i) {
        if (d.meta.rows[i] > size / row_header || d.meta.removed[i] > size / 8)
            throw error(
                fmt::format("{} is truncated ({} bytes, its metadata names {} rows)", file, size, d.meta.rows[i]));
        expected += d.meta.rows[i] * row_bytes(d.meta.tables[i]) + 8 * d.meta.removed[i];
        if (expected > size) break;
    }
    check_framed_size(f, file, expected);
    if (header_only) return d;
    d.crc32 = check_framed_checksum(f, file);
    const char* p = bytes.data() + fixed_header + json_bytes;
    std::vector<float> floats;
    for (std::size_t i = 0; i < d.meta.tables.size(); ++i) {
        const auto& t = d.meta.tables[i];
        const std::size_t nv = t.dim, ns = static_cast<std::size_t>(t.dim) * t.slots;
        floats.resize(nv + ns);
        for (std::uint64_t r = 0; r < d.meta.rows[i]; ++r) {
            std::uint64_t h[4];
            std::memcpy(h, p, sizeof h);
            std::memcpy(floats.data(), p + sizeof h, (nv + ns) * 4);
            p += row_bytes(t);
            if (!on_row) continue;
            ps::embedding_row row;
            row.key = h[0];
            row.last_seen = h[1];
            row.count = h[2];
            row.updates = h[3];
            row.values = {floats.data(), nv};
            row.state = {floats.data() + nv, ns};
            on_row(i, row);
        }
        for (std::uint64_t r = 0; r < d.meta.removed[i]; ++r) {
            std::uint64_t key;
            std::memcpy(&key, p, 8);
            p += 8;
            if (on_removed) on_removed(i, key);
        }
    }
    return d;
}

table_entry read_new_table_entry(const std::string& dir, const std::string& file, std::chrono::milliseconds patience)
{
    table_data d;
    retry_while_missing(dir, patience, [&] { d = read_tables(dir, file, true); });
    table_entry e;
    e.file = file;
    e.ps = d.meta.ps_index;
    e.num_ps = d.meta.num_ps;
    e.bytes = d.bytes;
    // The checksum is the file's last 4 bytes.
    const int fd = ::open(path_of(dir, file).c_str(), O_RDONLY | O_CLOEXEC);
    const bool ok = fd >= 0 && ::pread(fd, &e.crc32, 4, static_cast<off_t>(d.bytes - 4)) == 4;
    if (fd >= 0) ::close(fd);
    if (!ok) throw error(fmt::format("{}: cannot read its checksum: {}", file, std::strerror(errno)));
    e.full = d.meta.full;
    e.base_step = d.meta.chain.front();
    e.chain = d.meta.chain;
    return e;
}

}  // namespace pstrain::checkpoint
