#include "trainer/checkpoint/manifest.hpp"

#include "pstrain/error.hpp"
#include "trainer/checkpoint/file_io.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <regex>

#include <fmt/format.h>

namespace pstrain::checkpoint {
namespace {

// A manifest of thousands of shards and workers is a few MB.
constexpr std::size_t max_manifest_bytes = std::size_t(64) << 20;

std::string now_utc()
{
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

nlohmann::json manifest_body(const manifest& m)
{
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& s : m.shards)
        shards.push_back({{"file", s.file},
                          {"range", {s.range.begin, s.range.end}},
                          {"bytes", s.bytes},
                          {"crc32", s.crc32},
                          {"step", s.step}});
    nlohmann::json body = {{"format", "pstrain-checkpoint"},
                           {"version", format_version},
                           {"global_step", m.global_step},
                           {"created", m.created},
                           {"mode", m.mode},
                           {"model", {{"description", m.model}, {"num_params", m.num_params}, {"tensors", m.tensors}}},
                           {"compute", {{"precision", m.precision}}},
                           {"optimizer", {{"name", m.optimizer}, {"state_slots", m.state_slots}}},
                           {"data", {{"seed", m.seed}, {"batch_size", m.batch_size}, {"worker_batches", m.positions}}},
                           {"shards", shards}};
    if (!m.tables.empty() || !m.table_files.empty()) {
        nlohmann::json layout = nlohmann::json::array(), files = nlohmann::json::array();
        for (const auto& t : m.tables)
            layout.push_back({{"dim", t.dim}, {"optimizer", t.optimizer}, {"slots", t.slots}});
        for (const auto& f : m.table_files)
            files.push_back({{"file", f.file},
                             {"ps", f.ps},
                             {"num_ps", f.num_ps},
                             {"bytes", f.bytes},
                             {"crc32", f.crc32},
                             {"kind", f.full ? "full" : "incremental"},
                             {"base_step", f.base_step},
                             {"chain", f.chain}});
        body["tables"] = {{"layout", layout}, {"files", files}};
    }
    if (m.job)
        body["job"] = {{"cluster", m.job->cluster},
                       {"job_id", m.job->job_id},
                       {"submission", m.job->submission},
                       {"submit_time", m.job->submit_time}};
    // Milliseconds: every number of a manifest is an integer (integers_only).
    const double ms =
        std::isfinite(m.trained_seconds) && m.trained_seconds > 0 ? std::round(m.trained_seconds * 1000) : 0.0;
    body["trained"] = {{"milliseconds", static_cast<std::uint64_t>(ms)}, {"samples", m.trained_samples}};
    return body;
}

}  // namespace

std::string job_identity::describe() const
{
    std::string out;
    const auto add = [&](std::string part) { out += (out.empty() ? "" : ", ") + part; };
    if (!cluster.empty()) add("cluster " + cluster);
    add("job " + (job_id.empty() ? std::string("?") : job_id));
    if (!submission.empty()) add("submission " + submission);
    if (!submit_time.empty()) out += fmt::format(" (submitted {})", submit_time);
    return out;
}

std::string manifest_name(std::uint64_t step) { return fmt::format("ckpt-{:010}.json", step); }

std::string shard_name(std::uint64_t step, int ps_index, int num_ps)
{
    return fmt::format("ckpt-{:010}.shard-{}-of-{}", step, ps_index, num_ps);
}

std::string table_name(std::uint64_t step, int ps_index, int num_ps)
{
    return fmt::format("ckpt-{:010}.tables-{}-of-{}", step, ps_index, num_ps);
}

name_kind classify_name(const std::string& name)
{
    // Up to 19 digits: every such number fits a uint64_t, so stoull cannot throw.
    static const std::regex manifest_re(R"(ckpt-(\d{1,19})\.json)");
    static const std::regex shard_re(R"(ckpt-(\d{1,19})\.shard-\d+-of-\d+)");
    static const std::regex tables_re(R"(ckpt-(\d{1,19})\.tables-\d+-of-\d+)");
    static const std::regex temp_re(R"(ckpt-(\d{1,19})\..*\.tmp\.\d+)");
    std::smatch m;
    name_kind info;
    if (std::regex_match(name, m, manifest_re)) info.kind = name_kind::manifest;
    else if (std::regex_match(name, m, shard_re)) info.kind = name_kind::shard;
    else if (std::regex_match(name, m, tables_re)) info.kind = name_kind::tables;
    else if (std::regex_match(name, m, temp_re)) info.kind = name_kind::temp;
    else return info;
    info.step = std::stoull(m[1].str());
    return info;
}

void write_manifest(const std::string& dir, const manifest& m)
{
    auto body = manifest_body(m);
    if (m.created.empty()) body["created"] = now_utc();
    body["crc32"] = crc32_of(0, body.dump().data(), body.dump().size());
    const std::string text = body.dump(2) + "\n";
    atomic_file f(dir, manifest_name(m.global_step));
    f.write(text.data(), text.size());
    f.commit();
}

manifest read_manifest(const std::string& dir, const std::string& file)
{
    const auto too_large = [&] {
        return error(
            fmt::format("{}: larger than {} MiB, which no manifest pstrain writes is: not a checkpoint manifest", file,
                        max_manifest_bytes >> 20));
    };
    // It is read whole: its size first, then at most that much.
    std::error_code ec;
    if (const auto size = std::filesystem::file_size(path_of(dir, file), ec); !ec && size > max_manifest_bytes)
        throw too_large();
    auto bytes = read_file(path_of(dir, file), max_manifest_bytes + 1);
    if (bytes.size() > max_manifest_bytes) throw too_large();
    manifest m;
    try {
        auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), integers_only);
        if (j.value("format", "") != "pstrain-checkpoint") throw error("not a pstrain checkpoint manifest");
        if (j.at("version").get<int>() != format_version)
            throw error(fmt::format("format version {}, this pstrain reads version {}", j.at("version").get<int>(),
                                    format_version));
        const auto stored = j.at("crc32").get<std::uint32_t>();
        j.erase("crc32");
        const auto text = j.dump();
        if (crc32_of(0, text.data(), text.size()) != stored)
            throw error("checksum mismatch (the manifest was changed or is corrupt)");
        m.global_step = j.at("global_step").get<std::uint64_t>();
        m.created = j.at("created").get<std::string>();
        m.mode = j.at("mode").get<std::string>();
        m.model = j.at("model").at("description").get<std::string>();
        m.num_params = j.at("model").at("num_params").get<std::uint64_t>();
        m.tensors = j.at("model").at("tensors");
        if (j.contains("compute")) {
            m.precision = j.at("compute").at("precision").get<std::string>();
            if (m.precision != "fp32" && m.precision != "bf16")
                throw error(
                    fmt::format("it names the precision '{}', where pstrain computes in fp32 or bf16", m.precision));
        }
        m.optimizer = j.at("optimizer").at("name").get<std::string>();
        m.state_slots = j.at("optimizer").at("state_slots").get<int>();
        // A size decides an allocation only once it is what can be true:
        // a restore allocates state_slots copies of its range.
        if (m.state_slots < 0 || m.state_slots > 2)
            throw error(fmt::format("it names {} optimizer state slots, where an optimizer has 0 to 2", m.state_slots));
        m.seed = j.at("data").at("seed").get<std::uint64_t>();
        m.batch_size = j.at("data").at("batch_size").get<int>();
        m.positions = j.at("data").at("worker_batches").get<std::vector<std::uint64_t>>();
        for (const auto& s : j.at("shards")) {
            shard_entry e;
            e.file = s.at("file").get<std::string>();
            if (e.file.find('/') != std::string::npos) throw error("a shard name holds a '/'");
            e.range.begin = s.at("range").at(0).get<std::size_t>();
            e.range.end = s.at("range").at(1).get<std::size_t>();
            if (e.range.begin > e.range.end || e.range.end > m.num_params)
                throw error(fmt::format("{} holds the range [{}, {}), which is not inside the model's {} parameters",
                                        e.file, e.range.begin, e.range.end, m.num_params));
            e.bytes = s.at("bytes").get<std::uint64_t>();
            e.crc32 = s.at("crc32").get<std::uint32_t>();
            e.step = s.at("step").get<std::uint64_t>();
            m.shards.push_back(e);
        }
        if (m.shards.empty()) throw error("it names no shard");
        if (j.contains("tables")) {
            const auto& t = j.at("tables");
            for (const auto& l : t.at("layout")) {
                table_layout tl;
                tl.dim = l.at("dim").get<std::uint32_t>();
                tl.optimizer = l.at("optimizer").get<std::string>();
                tl.slots = l.at("slots").get<std::uint32_t>();
                if (tl.dim == 0 || tl.slots > 2)
                    throw error(fmt::format("an embedding table of dim {} with {} optimizer slots", tl.dim, tl.slots));
                m.tables.push_back(tl);
            }
            for (const auto& f : t.at("files")) {
                table_entry e;
                e.file = f.at("file").get<std::string>();
                if (e.file.find('/') != std::string::npos) throw error("a table file name holds a '/'");
                e.ps = f.at("ps").get<int>();
                e.num_ps = f.at("num_ps").get<int>();
                e.bytes = f.at("bytes").get<std::uint64_t>();
                e.crc32 = f.at("crc32").get<std::uint32_t>();
                const auto kind = f.at("kind").get<std::string>();
                if (kind != "full" && kind != "incremental")
                    throw error(fmt::format("{} has kind {}, not full or incremental", e.file, kind));
                e.full = kind == "full";
                e.base_step = f.at("base_step").get<std::uint64_t>();
                e.chain = f.at("chain").get<std::vector<std::uint64_t>>();
                if (e.chain.empty() || e.chain.front() != e.base_step || e.chain.back() != m.global_step ||
                    !std::is_sorted(e.chain.begin(), e.chain.end()) || e.ps < 0 || e.ps >= e.num_ps ||
                    e.file != table_name(m.global_step, e.ps, e.num_ps) || e.full != (e.chain.size() == 1))
                    throw error(fmt::format("{}'s entry is inconsistent (its chain, step or PS)", e.file));
                m.table_files.push_back(e);
            }
            if (m.tables.empty() || m.table_files.empty())
                throw error("it names embedding tables but no table layout or no table file");
        }
        if (j.contains("job")) {
            const auto& w = j.at("job");
            m.job = job_identity{w.at("cluster").get<std::string>(), w.at("job_id").get<std::string>(),
                                 w.at("submission").get<std::string>(), w.at("submit_time").get<std::string>()};
        }
        if (j.contains("trained")) {
            const auto& t = j.at("trained");
            m.trained_seconds = static_cast<double>(t.at("milliseconds").get<std::uint64_t>()) / 1000;
            m.trained_samples = t.at("samples").get<std::uint64_t>();
        }
    } catch (const error& e) {
        throw error(fmt::format("{}: {}", file, e.what()));
    } catch (const std::exception& e) {
        throw error(fmt::format("{}: unreadable ({})", file, e.what()));
    }
    return m;
}

}  // namespace pstrain::checkpoint
