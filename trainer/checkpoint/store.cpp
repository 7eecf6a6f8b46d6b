#include "trainer/checkpoint/store.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "trainer/checkpoint/file_io.hpp"
#include "trainer/checkpoint/table_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

namespace pstrain::checkpoint {
namespace {

namespace fs = std::filesystem;

}  // namespace

void prepare_directory(const std::string& dir)
{
    const std::string fix = "choose a --checkpoint-dir on a shared filesystem this job can write";
    if (dir.empty()) throw error("--checkpoint-dir is empty: " + fix);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        int e = errno;
        if (e == ENOENT)
            throw error(fmt::format("cannot create checkpoint directory {}: its parent does not exist: create it or {}",
                                    dir, fix));
        throw error(fmt::format("cannot create checkpoint directory {}: {}: {}", dir, std::strerror(e), fix));
    }
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw error(fmt::format("checkpoint directory {} is not a directory: {}", dir, fix));
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::string probe = path_of(dir, fmt::format(".pstrain-probe-{}-{}", host, ::getpid()));
    int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        throw error(fmt::format("checkpoint directory {} is not writable: {}: {}", dir, std::strerror(errno), fix));
    const bool ok = ::write(fd, "pstrain\n", 8) == 8 && ::fsync(fd) == 0;
    int e = errno;
    ::close(fd);
    ::unlink(probe.c_str());
    if (!ok) throw error(fmt::format("checkpoint directory {} is not writable: {}: {}", dir, std::strerror(e), fix));
}

shard_data read_new_shard(const std::string& dir, const std::string& file, std::chrono::milliseconds patience)
{
    shard_data d;
    retry_while_missing(dir, patience, [&] { d = read_shard(dir, file, true); });
    return d;
}

std::uint64_t enter_snapshot_files(const std::string& dir, manifest& m, std::span<const shard_receipt> receipts,
                                   bool tables, std::chrono::milliseconds patience)
{
    const int num_ps = static_cast<int>(receipts.size());
    std::uint64_t bytes = 0;
    for (int p = 0; p < num_ps; ++p) {
        shard_entry e;
        e.file = shard_name(m.global_step, p, num_ps);
        const auto d = read_new_shard(dir, e.file, patience);
        if (d.meta.ps_index != p || d.meta.num_ps != num_ps || d.meta.global_step != m.global_step)
            throw error(fmt::format("{} says it is shard {} of {} at global step {}: another job writes into {}",
                                    e.file, d.meta.ps_index, d.meta.num_ps, d.meta.global_step, dir));
        if (p == 0) m.positions = d.meta.positions;
        e.range = d.meta.range;
        e.bytes = receipts[static_cast<std::size_t>(p)].bytes;
        e.crc32 = receipts[static_cast<std::size_t>(p)].crc32;
        e.step = receipts[static_cast<std::size_t>(p)].step;
        bytes += e.bytes;
        m.shards.push_back(std::move(e));
    }
    if (!tables) return bytes;
    for (int p = 0; p < num_ps; ++p) {
        const auto file = table_name(m.global_step, p, num_ps);
        auto e = read_new_table_entry(dir, file, patience);
        if (p == 0) m.tables = read_tables(dir, file, true).meta.tables;
        bytes += e.bytes;
        m.table_files.push_back(std::move(e));
    }
    return bytes;
}

std::string check_size(const std::string& dir, const shard_entry& s)
{
    struct stat st {};
    if (::stat(path_of(dir, s.file).c_str(), &st) != 0)
        return fmt::format("{} is missing ({})", s.file, std::strerror(errno));
    if (static_cast<std::uint64_t>(st.st_size) != s.bytes)
        return fmt::format("{} is {} ({} of {} bytes)", s.file,
                           static_cast<std::uint64_t>(st.st_size) < s.bytes ? "truncated" : "too long", st.st_size,
                           s.bytes);
    return {};
}

std::string check_complete(const std::string& dir, const manifest& m, bool verify)
{
    std::size_t covered = 0;
    for (const auto& s : m.shards) {
        if (s.range.begin != covered) return fmt::format("{} does not continue at parameter {}", s.file, covered);
        covered = s.range.end;
        if (auto problem = check_size(dir, s); !problem.empty()) return problem;
        if (!verify) continue;
        try {
            auto d = read_shard(dir, s.file);
            if (d.meta.range.begin != s.range.begin || d.meta.range.end != s.range.end)
                return fmt::format("{} holds another range than its manifest names", s.file);
            if (d.crc32 != s.crc32)
                return fmt::format("{} is not the file its manifest names (another checksum)", s.file);
        } catch (const error& e) {
            return e.what();
        }
    }
    if (covered != m.num_params) return fmt::format("the shards cover {} of {} parameters", covered, m.num_params);
    return check_table_chains(dir, m, verify);
}

std::string check_table_chains(const std::string& dir, const manifest& m, bool verify)
{
    // One table file per PS task that wrote the checkpoint, in PS order.
    for (std::size_t p = 0; p < m.table_files.size(); ++p)
        if (m.table_files[p].ps != static_cast<int>(p) ||
            m.table_files[p].num_ps != static_cast<int>(m.table_files.size()))
            return fmt::format("{} is not table file {} of {}: the manifest's table files do not match its PS tasks",
                               m.table_files[p].file, p, m.table_files.size());
    for (const auto& t : m.table_files) {
        for (const auto step : t.chain) {
            const std::string file = table_name(step, t.ps, t.num_ps);
            try {
                const auto d = read_tables(dir, file, !verify);
                if (d.meta.full != (step == t.base_step) || d.meta.chain.back() != step ||
                    d.meta.chain.size() > t.chain.size() ||
                    !std::equal(d.meta.chain.begin(), d.meta.chain.end(), t.chain.begin()))
                    return fmt::format("{} does not continue the chain of {} from the full save at step {}", file,
                                       t.file, t.base_step);
                if (d.meta.tables != m.tables)
                    return fmt::format("{} holds another table layout than its manifest names", file);
                if (step == m.global_step && d.bytes != t.bytes)
                    return fmt::format("{} is {} bytes, its manifest names {}", file, d.bytes, t.bytes);
                if (step == m.global_step && verify && d.crc32 != t.crc32)
                    return fmt::format("{} is not the file its manifest names (another checksum)", file);
            } catch (const error& e) {
                return e.what();
            }
        }
    }
    return {};
}

std::vector<std::string> chain_files(const manifest& m)
{
    std::vector<std::string> out;
    for (const auto& t : m.table_files)
        for (const auto step : t.chain) out.push_back(table_name(step, t.ps, t.num_ps));
    return out;
}

std::vector<listing_entry> list(const std::string& dir, bool verify)
{
    std::map<std::uint64_t, listing_entry, std::greater<>> found;
    std::set<std::uint64_t> with_shards;
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) throw error(fmt::format("cannot read checkpoint directory {}: {}", dir, ec.message()));
    for (const auto& entry : it) {
        const auto name = entry.path().filename().string();
        const auto info = classify_name(name);
        if (info.kind == name_kind::manifest) {
            auto& e = found[info.step];
            e.step = info.step;
            e.manifest_file = name;
        } else if (info.kind == name_kind::shard || info.kind == name_kind::tables) {
            found[info.step].step = info.step;
            if (info.kind == name_kind::shard) with_shards.insert(info.step);
        }
    }
    std::vector<listing_entry> out;
    for (auto& [step, e] : found) {
        if (e.manifest_file.empty()) {
            e.problem = with_shards.count(step)
                            ? "interrupted: shard files without a manifest"
                            : "table files without a manifest (a newer checkpoint's chain may build on them)";
        } else {
            try {
                e.m = read_manifest(dir, e.manifest_file);
                if (e.m->global_step != step)
                    e.problem = fmt::format("{} records global step {}", e.manifest_file, e.m->global_step);
                else e.problem = check_complete(dir, *e.m, verify);
            } catch (const error& err) {
                e.problem = err.what();
            }
        }
        out.push_back(std::move(e));
    }
    return out;
}

void prune(const std::string& dir, int keep)
{
    std::vector<listing_entry> entries;
    try {
        entries = list(dir, false);
    } catch (const error& e) {
        log::warn("not removing old checkpoints: {}", e.what());
        return;
    }
    int kept = 0;
    std::uint64_t oldest_kept = 0;
    bool any_kept = false;
    for (const auto& e : entries) {
        if (e.problem.empty() && kept < keep) {
            ++kept;
            oldest_kept = e.step;
            any_kept = true;
        }
    }
    if (!any_kept) return;
    // The table files the kept checkpoints' chains go back to.
    std::set<std::string> needed;
    kept = 0;
    for (const auto& e : entries) {
        if (!e.problem.empty() || kept >= keep) continue;
        ++kept;
        for (auto& f : chain_files(*e.m)) needed.insert(std::move(f));
    }
    std::error_code ec;
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir, ec)) names.push_back(entry.path().filename().string());
    // Manifests first: a crash halfway leaves shards without a manifest,
    // never a manifest without its shards.
    for (int pass = 0; pass < 2; ++pass) {
        for (const auto& name : names) {
            const auto info = classify_name(name);
            if (info.kind == name_kind::other || info.step >= oldest_kept || needed.count(name)) continue;
            if ((pass == 0) != (info.kind == name_kind::manifest)) continue;
            if (::unlink(path_of(dir, name).c_str()) != 0 && errno != ENOENT)
                log::warn("cannot remove old checkpoint file {}: {}", path_of(dir, name), std::strerror(errno));
        }
    }
}

}  // namespace pstrain::checkpoint
