#include "trainer/app/tensorboard.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "trainer/app/tensorboard_event.pb.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <boost/crc.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

namespace pstrain::trainer::tensorboard {

std::uint32_t crc32c(std::string_view data)
{
    // CRC-32C: polynomial 0x1EDC6F41, reflected, initial and final XOR all ones.
    boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
    crc.process_bytes(data.data(), data.size());
    return crc.checksum();
}

std::uint32_t masked_crc32c(std::string_view data)
{
    const std::uint32_t crc = crc32c(data);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

namespace {

void put_le(std::string& out, std::uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

double now_seconds()
{
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string serialized(const tfevent::Event& e)
{
    std::string out;
    if (!e.SerializeToString(&out)) throw error("cannot encode a TensorBoard event");
    return out;
}

}  // namespace

std::string record(std::string_view data)
{
    std::string out;
    out.reserve(data.size() + 16);
    put_le(out, data.size(), 8);
    put_le(out, masked_crc32c(out), 4);
    out.append(data);
    put_le(out, masked_crc32c(data), 4);
    return out;
}

std::string version_event(double wall_time)
{
    tfevent::Event e;
    e.set_wall_time(wall_time);
    e.set_file_version("brain.Event:2");
    return serialized(e);
}

std::string scalars_event(double wall_time, std::int64_t step, std::span<const scalar> values)
{
    tfevent::Event e;
    e.set_wall_time(wall_time);
    e.set_step(step);
    auto* summary = e.mutable_summary();
    for (const auto& v : values) {
        auto* value = summary->add_value();
        value->set_tag(v.tag);
        value->set_simple_value(static_cast<float>(v.value));
    }
    return serialized(e);
}

std::string session_start_event(double wall_time, std::int64_t step, const std::string& checkpoint)
{
    tfevent::Event e;
    e.set_wall_time(wall_time);
    e.set_step(step);
    auto* log = e.mutable_session_log();
    log->set_status(tfevent::SessionLog::START);
    log->set_checkpoint_path(checkpoint);
    return serialized(e);
}

event_writer::event_writer(const std::string& dir, const std::string& flag)
{
    const std::string fix = fmt::format("give {} a directory this job can write", flag);
    if (dir.empty()) throw error(fmt::format("{} is empty: {}", flag, fix));
    // Private, as the checkpoints beside it are (chmod to share).
    std::error_code ec;
    if (std::filesystem::create_directories(dir, ec) && !ec)
        std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
    if (ec) throw error(fmt::format("{} {}: cannot create it: {}: {}", flag, dir, ec.message(), fix));
    if (!std::filesystem::is_directory(dir, ec)) throw error(fmt::format("{} {}: not a directory: {}", flag, dir, fix));
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const double t = now_seconds();
    // A new file, never another run's (the same second and pid: a suffix).
    const auto base =
        fmt::format("{}/events.out.tfevents.{}.{}.{}.pstrain", dir, static_cast<long long>(t), host, ::getpid());
    int fd = -1;
    for (int n = 0; fd < 0; ++n) {
        path_ = n == 0 ? base : fmt::format("{}.{}", base, n);
        fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && (errno != EEXIST || n >= 1000))
            throw error(fmt::format("{} {}: cannot create {}: {}: {}", flag, dir, path_, std::strerror(errno), fix));
    }
    file_.reset(::fdopen(fd, "wb"));
    if (!file_) {
        ::close(fd);
        throw error(fmt::format("{} {}: cannot open {}: {}: {}", flag, dir, path_, std::strerror(errno), fix));
    }
    if (!append(version_event(t)))
        throw error(fmt::format("{} {}: cannot write {}: {}: {}", flag, dir, path_, std::strerror(errno), fix));
}

void event_writer::write(std::int64_t step, std::span<const scalar> values)
{
    if (!file_ || values.empty()) return;
    if (append(scalars_event(now_seconds(), step, values))) return;
    log::warn("cannot write the TensorBoard events file {}: {}: no more events go there", path_, std::strerror(errno));
    file_.reset();
}

void event_writer::session_start(std::int64_t step, const std::string& checkpoint)
{
    if (!file_) return;
    if (append(session_start_event(now_seconds(), step, checkpoint))) return;
    log::warn("cannot write the TensorBoard events file {}: {}: no more events go there", path_, std::strerror(errno));
    file_.reset();
}

bool event_writer::append(const std::string& event)
{
    const auto r = record(event);
    return std::fwrite(r.data(), 1, r.size(), file_.get()) == r.size() && std::fflush(file_.get()) == 0;
}

}  // namespace pstrain::trainer::tensorboard
