// A memory-backed file for fuzz targets whose parser takes a path: an
// anonymous memfd, named /proc/self/fd/N, rewritten with each input.  The
// parser opens, stats and reads it like any regular file, and nothing
// touches the disk.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

namespace pstrain::fuzz {

class memfile {
public:
    explicit memfile(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC))
    {
        if (fd_ < 0) {
            std::perror("memfd_create");
            std::abort();
        }
    }
    memfile(const memfile&) = delete;
    memfile& operator=(const memfile&) = delete;
    ~memfile() { ::close(fd_); }

    // Replaces the file's bytes with [data, data + size).
    void assign(const std::uint8_t* data, std::size_t size)
    {
        if (::ftruncate(fd_, 0) != 0) std::abort();
        std::size_t done = 0;
        while (done < size) {
            ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
            if (n <= 0) std::abort();
            done += static_cast<std::size_t>(n);
        }
    }

    std::string dir() const { return "/proc/self/fd"; }
    std::string name() const { return std::to_string(fd_); }
    std::string path() const { return dir() + "/" + name(); }

private:
    int fd_;
};

}  // namespace pstrain::fuzz
