// Bytes on the checkpoint directory's filesystem, whatever they mean: a
// file written whole or not at all, a bounded read, and the crc32 that both
// kinds of checkpoint file end with.  The shard file and the manifest write
// through atomic_file; the store lists, waits for and removes what it leaves.
#pragma once

#include "pstrain/error.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pstrain::checkpoint {

std::string path_of(const std::string& dir, const std::string& name);

// zlib's crc32 of `bytes` bytes, continuing `crc` (0 starts a new one).
std::uint32_t crc32_of(std::uint32_t crc, const void* data, std::size_t bytes);

// fsync on the directory itself: without it a rename into the directory can
// be lost in a crash although the file's data was synced.
void fsync_directory(const std::string& dir);

// A file written under a temporary name, "<name>.tmp.<pid>" (the pid keeps
// two writers apart; name_kind::temp recognises the pattern), with mode
// 0600.  commit() fsyncs it, renames it into place and fsyncs the
// directory; destroyed without commit() it leaves nothing behind, so a
// reader sees the old file or the whole new one, never part of one.
// Every failure throws pstrain::error naming the call, the temporary file
// and strerror (a full disk shows up as ENOSPC from write, fsync or close).
class atomic_file {
public:
    atomic_file(const std::string& dir, const std::string& name);
    atomic_file(const atomic_file&) = delete;
    atomic_file& operator=(const atomic_file&) = delete;
    ~atomic_file();

    void write(const void* data, std::size_t bytes);
    void commit();

    std::uint32_t crc() const { return crc_; }    // crc32 of every byte written so far
    std::uint64_t size() const { return size_; }  // bytes written so far

private:
    [[noreturn]] void fail(const char* what, int e);

    std::string dir_, final_, temp_;
    int fd_ = -1;
    bool committed_ = false;
    std::uint32_t crc_ = 0;
    std::uint64_t size_ = 0;
};

// The first `max_bytes` bytes of the file at `path` (fewer when it is
// shorter).  The caller bounds `max_bytes` by what it may hold, so a size
// read from a file never decides an allocation.  Throws pstrain::error
// "<path>: <strerror>".
std::vector<char> read_file(const std::string& path, std::size_t max_bytes);

// A file of a checkpoint is not there (or not yet visible from this node).
class missing_file : public error {
public:
    using error::error;
};

// The frame both kinds of data file share: an 8-byte magic, a uint32 format
// version, a uint32 J, J bytes of JSON metadata, what the kind puts after
// them, and a uint32 crc32 at the end.
struct framed_file {
    std::uint64_t size = 0;        // the file's size on disk
    std::uint32_t json_bytes = 0;  // J
    std::vector<char> bytes;       // the magic to the metadata's end (header_only), else the whole file
    static constexpr std::size_t fixed_header = 16;  // magic, version, J
};

// Reads `file` under `dir` and checks its magic against `magic`, its version
// against `version` and that the frame fits the file's size, all before any
// allocation that a number from the file decides.  `kind` names such a file
// in the error ("a pstrain checkpoint shard").  Throws missing_file when it
// cannot stat the file, pstrain::error naming the file otherwise.
framed_file read_framed(const std::string& dir, const std::string& file, const char (&magic)[8], std::uint32_t version,
                        const char* kind, bool header_only);

// Writes `name` under `dir` atomically (atomic_file) as a framed file: the
// magic, `version`, the length of `json` and `json`, then what `body`
// writes, then the crc32 of every byte before it.  Returns its size and
// that checksum.  Throws pstrain::error as atomic_file does.
struct framed_receipt {
    std::uint64_t bytes = 0;
    std::uint32_t crc32 = 0;
};
framed_receipt write_framed(const std::string& dir, const std::string& name, const char (&magic)[8],
                            std::uint32_t version, const std::string& json,
                            const std::function<void(atomic_file&)>& body);

// Refuses a framed file `file` whose size is not `expected`, the size its
// metadata implies ("truncated" or "too long", both sizes).
void check_framed_size(const framed_file& f, const std::string& file, std::uint64_t expected);

// The checksum at the end of a framed file read whole, after checking it
// against the bytes before it.  Throws pstrain::error when the file
// changed while it was read or the checksum does not match.
std::uint32_t check_framed_checksum(const framed_file& f, const std::string& file);

// Runs `read` until it no longer throws missing_file.  On NFS a file
// another node has just written can take a moment to appear (attribute and
// lookup caches), so it is looked for again, re-reading `dir`, with pauses
// from 20 ms doubling up to 1 s, for up to `patience`; then the last
// missing_file is thrown.  Other errors go through at once.
void retry_while_missing(const std::string& dir, std::chrono::milliseconds patience, const std::function<void()>& read);

// A parser callback for nlohmann::json::parse: every number of the manifest
// and of a shard's metadata is an integer, and get<int>() of a float out of
// int's range (1e300) is undefined behaviour, so a float is refused at once
// (nlohmann::json::out_of_range, which the readers turn into their error).
inline bool integers_only(int, nlohmann::json::parse_event_t event, nlohmann::json& value)
{
    if (event == nlohmann::json::parse_event_t::value && value.is_number_float())
        throw nlohmann::json::out_of_range::create(406, "a number that is not an integer", &value);
    return true;
}

}  // namespace pstrain::checkpoint
