#include "trainer/checkpoint/checkpoint.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <regex>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <fmt/format.h>

namespace pstrain::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr char shard_magic[8] = {'P', 'S', 'T', 'R', 'C', 'K', 'P', 'T'};
constexpr std::size_t fixed_header = 16;  // magic, version, metadata length

std::string path_of(const std::string& dir, const std::string& name) { return dir + "/" + name; }

std::string now_utc()
{
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::uint32_t crc_of(std::uint32_t crc, const void* data, std::size_t bytes)
{
    if (bytes == 0) return crc;  // zlib answers a null buffer with the initial value
    return static_cast<std::uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}

void fsync_directory(const std::string& dir)
{
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw error(fmt::format("cannot open {} to sync it: {}", dir, std::strerror(errno)));
    int rc = ::fsync(fd);
    int e = errno;
    ::close(fd);
    if (rc != 0) throw error(fmt::format("cannot sync directory {}: {}", dir, std::strerror(e)));
}

// A file written under a temporary name and renamed into place by
// commit(); destroyed without commit(), it leaves nothing behind.
class atomic_file {
public:
    atomic_file(const std::string& dir, const std::string& name)
        : dir_(dir), final_(path_of(dir, name)), temp_(fmt::format("{}.tmp.{}", final_, ::getpid()))
    {
        fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd_ < 0) fail("cannot create", errno);
    }
    atomic_file(const atomic_file&) = delete;
    atomic_file& operator=(const atomic_file&) = delete;
    ~atomic_file()
    {
        if (fd_ >= 0) ::close(fd_);
        if (!committed_) ::unlink(temp_.c_str());
    }

    void write(const void* data, std::size_t bytes)
    {
        crc_ = crc_of(crc_, data, bytes);
        const char* p = static_cast<const char*>(data);
        while (bytes > 0) {
            ssize_t n = ::write(fd_, p, std::min<std::size_t>(bytes, 1 << 30));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) fail("cannot write", errno);
            p += n;
            bytes -= static_cast<std::size_t>(n);
            size_ += static_cast<std::uint64_t>(n);
        }
    }

    void commit()
    {
        if (::fsync(fd_) != 0) fail("cannot sync", errno);
        int rc = ::close(fd_);
        fd_ = -1;
        if (rc != 0) fail("cannot close", errno);
        if (::rename(temp_.c_str(), final_.c_str()) != 0) fail("cannot rename into place", errno);
        committed_ = true;
        fsync_directory(dir_);
    }

    std::uint32_t crc() const { return crc_; }
    std::uint64_t size() const { return size_; }

private:
    [[noreturn]] void fail(const char* what, int e)
    {
        throw error(fmt::format("{} {}: {}: free space there or choose another --checkpoint-dir; the previous "
                                "checkpoint is intact",
                                what, temp_, std::strerror(e)));
    }

    std::string dir_, final_, temp_;
    int fd_ = -1;
    bool committed_ = false;
    std::uint32_t crc_ = 0;
    std::uint64_t size_ = 0;
};

std::vector<char> read_file(const std::string& path, std::size_t max_bytes)
{
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw error(fmt::format("{}: {}", path, std::strerror(errno)));
    std::vector<char> out;
    char buf[1 << 16];
    for (;;) {
        std::size_t want = std::min(sizeof buf, max_bytes - out.size());
        if (want == 0) break;
        ssize_t n = ::read(fd, buf, want);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int e = errno;
            ::close(fd);
            throw error(fmt::format("{}: {}", path, std::strerror(e)));
        }
        if (n == 0) break;
        out.insert(out.end(), buf, buf + n);
    }
    ::close(fd);
    return out;
}

nlohmann::json meta_to_json(const shard_meta& m)
{
    return {{"global_step", m.global_step}, {"ps_index", m.ps_index},   {"num_ps", m.num_ps},
            {"range", {m.range.begin, m.range.end}},                  {"total_params", m.total_params},
            {"optimizer", m.optimizer},       {"state_slots", m.state_slots}, {"updates", m.updates},
            {"worker_batches", m.worker_batches}};
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
    m.worker_batches = j.at("worker_batches").get<std::vector<std::uint64_t>>();
    if (m.range.end < m.range.begin || m.range.end > m.total_params || m.state_slots < 0 || m.state_slots > 2)
        throw error("metadata out of range");
    return m;
}

nlohmann::json manifest_body(const manifest& m)
{
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& s : m.shards)
        shards.push_back({{"file", s.file}, {"range", {s.range.begin, s.range.end}}, {"bytes", s.bytes}, {"crc32", s.crc32},
                          {"step", s.step}});
    return {{"format", "pstrain-checkpoint"},
            {"version", format_version},
            {"global_step", m.global_step},
            {"created", m.created},
            {"mode", m.mode},
            {"model", {{"description", m.model}, {"num_params", m.num_params}, {"tensors", m.tensors}}},
            {"optimizer", {{"name", m.optimizer}, {"state_slots", m.state_slots}}},
            {"data", {{"seed", m.seed}, {"batch_size", m.batch_size}, {"worker_batches", m.worker_batches}}},
            {"shards", shards}};
}

struct name_info {
    enum { manifest, shard, temp, other } kind = other;
    std::uint64_t step = 0;
};

name_info classify(const std::string& name)
{
    static const std::regex manifest_re(R"(ckpt-(\d{1,19})\.json)");
    static const std::regex shard_re(R"(ckpt-(\d{1,19})\.shard-\d+-of-\d+)");
    static const std::regex temp_re(R"(ckpt-(\d{1,19})\..*\.tmp\.\d+)");
    std::smatch m;
    name_info info;
    if (std::regex_match(name, m, manifest_re)) info.kind = name_info::manifest;
    else if (std::regex_match(name, m, shard_re)) info.kind = name_info::shard;
    else if (std::regex_match(name, m, temp_re)) info.kind = name_info::temp;
    else return info;
    info.step = std::stoull(m[1].str());
    return info;
}

// Empty when the checkpoint is whole; else what is wrong, naming the file.
std::string check(const std::string& dir, const manifest& m, bool verify)
{
    std::size_t covered = 0;
    for (const auto& s : m.shards) {
        if (s.range.begin != covered) return fmt::format("{} does not continue at parameter {}", s.file, covered);
        covered = s.range.end;
        struct stat st{};
        if (::stat(path_of(dir, s.file).c_str(), &st) != 0) return fmt::format("{} is missing ({})", s.file, std::strerror(errno));
        if (static_cast<std::uint64_t>(st.st_size) != s.bytes)
            return fmt::format("{} is {} ({} of {} bytes)", s.file, static_cast<std::uint64_t>(st.st_size) < s.bytes ? "truncated" : "too long",
                               st.st_size, s.bytes);
        if (!verify) continue;
        try {
            auto d = read_shard(dir, s.file);
            if (d.meta.range.begin != s.range.begin || d.meta.range.end != s.range.end)
                return fmt::format("{} holds another range than its manifest names", s.file);
            if (d.crc32 != s.crc32) return fmt::format("{} is not the file its manifest names (another checksum)", s.file);
        } catch (const error& e) {
            return e.what();
        }
    }
    if (covered != m.num_params) return fmt::format("the shards cover {} of {} parameters", covered, m.num_params);
    return {};
}

}  // namespace

std::string manifest_name(std::uint64_t step) { return fmt::format("ckpt-{:010}.json", step); }

std::string shard_name(std::uint64_t step, int ps_index, int num_ps)
{
    return fmt::format("ckpt-{:010}.shard-{}-of-{}", step, ps_index, num_ps);
}

void prepare_directory(const std::string& dir)
{
    const std::string fix = "choose a --checkpoint-dir on a shared filesystem this job can write";
    if (dir.empty()) throw error("--checkpoint-dir is empty: " + fix);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        int e = errno;
        if (e == ENOENT)
            throw error(fmt::format("cannot create checkpoint directory {}: its parent does not exist: create it or {}", dir, fix));
        throw error(fmt::format("cannot create checkpoint directory {}: {}: {}", dir, std::strerror(e), fix));
    }
    struct stat st{};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw error(fmt::format("checkpoint directory {} is not a directory: {}", dir, fix));
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::string probe = path_of(dir, fmt::format(".pstrain-probe-{}-{}", host, ::getpid()));
    int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw error(fmt::format("checkpoint directory {} is not writable: {}: {}", dir, std::strerror(errno), fix));
    const bool ok = ::write(fd, "pstrain\n", 8) == 8 && ::fsync(fd) == 0;
    int e = errno;
    ::close(fd);
    ::unlink(probe.c_str());
    if (!ok) throw error(fmt::format("checkpoint directory {} is not writable: {}: {}", dir, std::strerror(e), fix));
}

shard_entry write_shard(const std::string& dir, const shard_meta& meta, std::span<const float> values,
                        std::span<const float> state)
{
    if (values.size() != meta.range.size() || state.size() != values.size() * static_cast<std::size_t>(meta.state_slots))
        throw error("internal error: shard sizes do not match their metadata");
    const std::string name = shard_name(meta.global_step, meta.ps_index, meta.num_ps);
    const std::string json = meta_to_json(meta).dump();
    const std::uint32_t version = format_version, json_bytes = static_cast<std::uint32_t>(json.size());
    atomic_file f(dir, name);
    f.write(shard_magic, sizeof shard_magic);
    f.write(&version, sizeof version);
    f.write(&json_bytes, sizeof json_bytes);
    f.write(json.data(), json.size());
    f.write(values.data(), values.size_bytes());
    f.write(state.data(), state.size_bytes());
    const std::uint32_t crc = f.crc();
    f.write(&crc, sizeof crc);
    f.commit();
    return {name, meta.range, f.size(), crc, meta.global_step};
}

shard_data read_shard(const std::string& dir, const std::string& file, bool header_only)
{
    const std::string path = path_of(dir, file);
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) throw missing_file(fmt::format("{} is missing ({})", file, std::strerror(errno)));
    const auto size = static_cast<std::uint64_t>(st.st_size);
    auto head = read_file(path, fixed_header);
    if (head.size() < fixed_header || std::memcmp(head.data(), shard_magic, sizeof shard_magic) != 0)
        throw error(fmt::format("{} is not a pstrain checkpoint shard (bad magic number)", file));
    std::uint32_t version = 0, json_bytes = 0;
    std::memcpy(&version, head.data() + 8, 4);
    std::memcpy(&json_bytes, head.data() + 12, 4);
    if (version != format_version)
        throw error(fmt::format("{} has format version {}, this pstrain reads version {}", file, version, format_version));
    if (fixed_header + json_bytes + 4 > size)
        throw error(fmt::format("{} is truncated ({} bytes, shorter than its own header)", file, size));
    auto bytes = read_file(path, header_only ? fixed_header + json_bytes : size);
    shard_data d;
    try {
        d.meta = meta_from_json(nlohmann::json::parse(bytes.begin() + fixed_header, bytes.begin() + fixed_header + json_bytes));
    } catch (const std::exception& e) {
        throw error(fmt::format("{} has unreadable metadata ({})", file, e.what()));
    }
    const std::uint64_t n = d.meta.range.size();
    const std::uint64_t expected = fixed_header + json_bytes + 4 * (n + n * static_cast<std::uint64_t>(d.meta.state_slots)) + 4;
    if (size != expected)
        throw error(fmt::format("{} is {} ({} of {} bytes)", file, size < expected ? "truncated" : "too long", size, expected));
    if (header_only) return d;
    if (bytes.size() != size) throw error(fmt::format("{} changed while it was read", file));
    std::uint32_t stored = 0;
    std::memcpy(&stored, bytes.data() + size - 4, 4);
    if (crc_of(0, bytes.data(), size - 4) != stored) throw error(fmt::format("{} is corrupt (checksum mismatch)", file));
    d.crc32 = stored;
    const char* p = bytes.data() + fixed_header + json_bytes;
    d.values.resize(n);
    std::memcpy(d.values.data(), p, n * 4);
    d.state.resize(n * static_cast<std::size_t>(d.meta.state_slots));
    std::memcpy(d.state.data(), p + n * 4, d.state.size() * 4);
    return d;
}

shard_data read_new_shard(const std::string& dir, const std::string& file, std::chrono::milliseconds patience)
{
    const auto deadline = std::chrono::steady_clock::now() + patience;
    auto pause = std::chrono::milliseconds(20);
    for (;;) {
        try {
            return read_shard(dir, file, true);
        } catch (const missing_file&) {
            if (std::chrono::steady_clock::now() + pause > deadline) throw;
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(1000));
        std::error_code ec;
        for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
        }
    }
}

void write_manifest(const std::string& dir, const manifest& m)
{
    auto body = manifest_body(m);
    if (m.created.empty()) body["created"] = now_utc();
    body["crc32"] = crc_of(0, body.dump().data(), body.dump().size());
    const std::string text = body.dump(2) + "\n";
    atomic_file f(dir, manifest_name(m.global_step));
    f.write(text.data(), text.size());
    f.commit();
}

manifest read_manifest(const std::string& dir, const std::string& file)
{
    auto bytes = read_file(path_of(dir, file), std::size_t(64) << 20);
    manifest m;
    try {
        auto j = nlohmann::json::parse(bytes.begin(), bytes.end());
        if (j.value("format", "") != "pstrain-checkpoint") throw error("not a pstrain checkpoint manifest");
        if (j.at("version").get<int>() != format_version)
            throw error(fmt::format("format version {}, this pstrain reads version {}", j.at("version").get<int>(), format_version));
        const auto stored = j.at("crc32").get<std::uint32_t>();
        j.erase("crc32");
        const auto text = j.dump();
        if (crc_of(0, text.data(), text.size()) != stored) throw error("checksum mismatch (the manifest was changed or is corrupt)");
        m.global_step = j.at("global_step").get<std::uint64_t>();
        m.created = j.at("created").get<std::string>();
        m.mode = j.at("mode").get<std::string>();
        m.model = j.at("model").at("description").get<std::string>();
        m.num_params = j.at("model").at("num_params").get<std::uint64_t>();
        m.tensors = j.at("model").at("tensors");
        m.optimizer = j.at("optimizer").at("name").get<std::string>();
        m.state_slots = j.at("optimizer").at("state_slots").get<int>();
        m.seed = j.at("data").at("seed").get<std::uint64_t>();
        m.batch_size = j.at("data").at("batch_size").get<int>();
        m.worker_batches = j.at("data").at("worker_batches").get<std::vector<std::uint64_t>>();
        for (const auto& s : j.at("shards")) {
            shard_entry e;
            e.file = s.at("file").get<std::string>();
            if (e.file.find('/') != std::string::npos) throw error("a shard name holds a '/'");
            e.range.begin = s.at("range").at(0).get<std::size_t>();
            e.range.end = s.at("range").at(1).get<std::size_t>();
            e.bytes = s.at("bytes").get<std::uint64_t>();
            e.crc32 = s.at("crc32").get<std::uint32_t>();
            e.step = s.at("step").get<std::uint64_t>();
            m.shards.push_back(e);
        }
        if (m.shards.empty()) throw error("it names no shard");
    } catch (const error& e) {
        throw error(fmt::format("{}: {}", file, e.what()));
    } catch (const std::exception& e) {
        throw error(fmt::format("{}: unreadable ({})", file, e.what()));
    }
    return m;
}

std::vector<listing_entry> list(const std::string& dir, bool verify)
{
    std::map<std::uint64_t, listing_entry, std::greater<>> found;
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) throw error(fmt::format("cannot read checkpoint directory {}: {}", dir, ec.message()));
    for (const auto& entry : it) {
        const auto name = entry.path().filename().string();
        const auto info = classify(name);
        if (info.kind == name_info::manifest) {
            auto& e = found[info.step];
            e.step = info.step;
            e.manifest_file = name;
        } else if (info.kind == name_info::shard) {
            found[info.step].step = info.step;
        }
    }
    std::vector<listing_entry> out;
    for (auto& [step, e] : found) {
        if (e.manifest_file.empty()) {
            e.problem = "interrupted: shard files without a manifest";
        } else {
            try {
                e.m = read_manifest(dir, e.manifest_file);
                if (e.m->global_step != step) e.problem = fmt::format("{} records global step {}", e.manifest_file, e.m->global_step);
                else e.problem = check(dir, *e.m, verify);
            } catch (const error& err) {
                e.problem = err.what();
            }
        }
        out.push_back(std::move(e));
    }
    return out;
}

std::optional<manifest> find_latest(const std::string& dir)
{
    auto entries = list(dir, false);
    std::vector<std::string> skipped;
    for (auto& e : entries) {
        if (e.manifest_file.empty()) {
            log::debug("ignoring shard files of global step {} without a manifest (an interrupted checkpoint)", e.step);
            continue;
        }
        if (e.problem.empty()) e.problem = check(dir, *e.m, true);
        if (e.problem.empty()) {
            for (const auto& s : skipped) log::warn("{}", s);
            return e.m;
        }
        skipped.push_back(fmt::format("skipping the checkpoint at global step {} in {}: {}; using an older one", e.step, dir, e.problem));
    }
    if (!skipped.empty())
        throw error(fmt::format("no usable checkpoint in {}: {}: move the directory away to start from scratch", dir,
                                skipped.front().substr(std::string("skipping ").size())));
    return std::nullopt;
}

range_data load_range(const std::string& dir, const manifest& m, ps::shard_range range)
{
    const std::size_t n = range.size(), slots = static_cast<std::size_t>(m.state_slots);
    if (range.end > m.num_params) throw error("internal error: range beyond the checkpoint's parameters");
    range_data out;
    out.values.resize(n);
    out.state.resize(n * slots);
    for (const auto& s : m.shards) {
        const std::size_t b = std::max(range.begin, s.range.begin), e = std::min(range.end, s.range.end);
        if (b >= e) continue;
        auto d = read_shard(dir, s.file);
        if (d.meta.range.begin != s.range.begin || d.meta.range.end != s.range.end || d.meta.state_slots != m.state_slots)
            throw error(fmt::format("{} does not hold what its manifest names", s.file));
        if (s.range.begin <= range.begin && range.begin < s.range.end) out.updates = d.meta.updates;
        const std::size_t sn = s.range.size();
        std::copy(d.values.begin() + static_cast<std::ptrdiff_t>(b - s.range.begin),
                  d.values.begin() + static_cast<std::ptrdiff_t>(e - s.range.begin),
                  out.values.begin() + static_cast<std::ptrdiff_t>(b - range.begin));
        for (std::size_t k = 0; k < slots; ++k)
            std::copy(d.state.begin() + static_cast<std::ptrdiff_t>(k * sn + (b - s.range.begin)),
                      d.state.begin() + static_cast<std::ptrdiff_t>(k * sn + (e - s.range.begin)),
                      out.state.begin() + static_cast<std::ptrdiff_t>(k * n + (b - range.begin)));
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
    std::error_code ec;
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir, ec)) names.push_back(entry.path().filename().string());
    // Manifests first: a crash halfway leaves shards without a manifest,
    // never a manifest without its shards.
    for (int pass = 0; pass < 2; ++pass) {
        for (const auto& name : names) {
            const auto info = classify(name);
            if (info.kind == name_info::other || info.step >= oldest_kept) continue;
            if ((pass == 0) != (info.kind == name_info::manifest)) continue;
            if (::unlink(path_of(dir, name).c_str()) != 0 && errno != ENOENT)
                log::warn("cannot remove old checkpoint file {}: {}", path_of(dir, name), std::strerror(errno));
        }
    }
}

int inspect(const std::string& dir)
{
    std::vector<listing_entry> entries;
    try {
        entries = list(dir, true);
    } catch (const error& e) {
        log::error("{}", e.what());
        return 1;
    }
    if (entries.empty()) {
        fmt::print("no checkpoints in {}\n", dir);
        return 0;
    }
    fmt::print("checkpoints in {} (newest first):\n", dir);
    fmt::print("  {:>12}  {:<20}  {:>3}  {:>10}  {:<10}  {}\n", "global_step", "created", "ps", "params", "optimizer", "status");
    const listing_entry* newest = nullptr;
    for (const auto& e : entries) {
        const bool ok = e.problem.empty();
        if (ok && !newest) newest = &e;
        fmt::print("  {:>12}  {:<20}  {:>3}  {:>10}  {:<10}  {}\n", e.step, e.m ? e.m->created : "-",
                   e.m ? std::to_string(e.m->shards.size()) : "-", e.m ? std::to_string(e.m->num_params) : "-",
                   e.m ? e.m->optimizer : "-", ok ? "complete, checksums good" : e.problem);
    }
    if (!newest) {
        const bool any_manifest = std::any_of(entries.begin(), entries.end(), [](auto& e) { return !e.manifest_file.empty(); });
        if (!any_manifest) {
            fmt::print("no complete checkpoint: a job started with --checkpoint-dir {} starts from scratch\n", dir);
            return 0;
        }
        fmt::print("no complete checkpoint: a job started with --checkpoint-dir {} fails; move it away to start from scratch\n", dir);
        return 1;
    }
    fmt::print("newest complete: {} (global step {}, {}, {})\n", newest->manifest_file, newest->step, newest->m->model,
               newest->m->mode);
    return 0;
}

}  // namespace pstrain::checkpoint
