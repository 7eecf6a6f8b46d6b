#include "trainer/checkpoint/file_io.hpp"

#include "pstrain/error.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <fmt/format.h>

namespace pstrain::checkpoint {

std::string path_of(const std::string& dir, const std::string& name) { return dir + "/" + name; }

std::uint32_t crc32_of(std::uint32_t crc, const void* data, std::size_t bytes)
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

atomic_file::atomic_file(const std::string& dir, const std::string& name)
    : dir_(dir), final_(path_of(dir, name)), temp_(fmt::format("{}.tmp.{}", final_, ::getpid()))
{
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ < 0) fail("cannot create", errno);
}

atomic_file::~atomic_file()
{
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
}

void atomic_file::write(const void* data, std::size_t bytes)
{
    crc_ = crc32_of(crc_, data, bytes);
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

void atomic_file::commit()
{
    if (::fsync(fd_) != 0) fail("cannot sync", errno);
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) fail("cannot close", errno);
    if (::rename(temp_.c_str(), final_.c_str()) != 0) fail("cannot rename into place", errno);
    committed_ = true;
    fsync_directory(dir_);
}

void atomic_file::fail(const char* what, int e)
{
    // The fix the error calls for: room, write access, or another place.
    const char* fix = e == ENOSPC || e == EDQUOT ? "free space there or choose another --checkpoint-dir"
                      : e == EROFS               ? "remount it read-write or choose another --checkpoint-dir"
                      : e == EACCES || e == EPERM
                          ? "give this user write access there or choose another --checkpoint-dir"
                          : "choose another --checkpoint-dir";
    throw error(fmt::format("{} {}: {}: {}; the previous checkpoint is intact", what, temp_, std::strerror(e), fix));
}

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

framed_file read_framed(const std::string& dir, const std::string& file, const char (&magic)[8], std::uint32_t version,
                        const char* kind, bool header_only)
{
    const std::string path = path_of(dir, file);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
        throw missing_file(fmt::format("{} is missing ({})", file, std::strerror(errno)));
    framed_file f;
    f.size = static_cast<std::uint64_t>(st.st_size);
    constexpr std::size_t fixed = framed_file::fixed_header;
    const auto head = read_file(path, fixed);
    if (head.size() < fixed || std::memcmp(head.data(), magic, sizeof magic) != 0)
        throw error(fmt::format("{} is not {} (bad magic number)", file, kind));
    std::uint32_t found = 0;
    std::memcpy(&found, head.data() + 8, 4);
    std::memcpy(&f.json_bytes, head.data() + 12, 4);
    if (found != version)
        throw error(fmt::format("{} has format version {}, this pstrain reads version {}", file, found, version));
    if (fixed + f.json_bytes + 4 > f.size)
        throw error(fmt::format("{} is truncated ({} bytes, shorter than its own header)", file, f.size));
    f.bytes = read_file(path, header_only ? fixed + f.json_bytes : f.size);
    if (f.bytes.size() < fixed + f.json_bytes) throw error(fmt::format("{} changed while it was read", file));
    return f;
}

framed_receipt write_framed(const std::string& dir, const std::string& name, const char (&magic)[8],
                            std::uint32_t version, const std::string& json,
                            const std::function<void(atomic_file&)>& body)
{
    const std::uint32_t json_bytes = static_cast<std::uint32_t>(json.size());
    atomic_file f(dir, name);
    f.write(magic, sizeof magic);
    f.write(&version, sizeof version);
    f.write(&json_bytes, sizeof json_bytes);
    f.write(json.data(), json.size());
    body(f);
    const std::uint32_t crc = f.crc();
    f.write(&crc, sizeof crc);
    f.commit();
    return {f.size(), crc};
}

void check_framed_size(const framed_file& f, const std::string& file, std::uint64_t expected)
{
    if (f.size != expected)
        throw error(fmt::format("{} is {} ({} of {} bytes)", file, f.size < expected ? "truncated" : "too long", f.size,
                                expected));
}

std::uint32_t check_framed_checksum(const framed_file& f, const std::string& file)
{
    if (f.bytes.size() != f.size) throw error(fmt::format("{} changed while it was read", file));
    std::uint32_t stored = 0;
    std::memcpy(&stored, f.bytes.data() + f.size - 4, 4);
    if (crc32_of(0, f.bytes.data(), f.size - 4) != stored)
        throw error(fmt::format("{} is corrupt (checksum mismatch)", file));
    return stored;
}

void retry_while_missing(const std::string& dir, std::chrono::milliseconds patience, const std::function<void()>& read)
{
    const auto deadline = std::chrono::steady_clock::now() + patience;
    auto pause = std::chrono::milliseconds(20);
    for (;;) {
        try {
            read();
            return;
        } catch (const missing_file&) {
            if (std::chrono::steady_clock::now() + pause > deadline) throw;
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(1000));
        // Reading the directory refreshes an NFS client's cached view of it.
        std::error_code ec;
        for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
             it.increment(ec)) {}
    }
}

}  // namespace pstrain::checkpoint
