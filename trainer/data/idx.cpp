// MNIST IDX reader (plain or gzip, through zlib's gzread).
#include "trainer/data/dataset.hpp"

#include "pstrain/error.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>

namespace pstrain::data {
namespace {

struct gz_closer {
    void operator()(gzFile f) const { gzclose(f); }
};
using gz_file = std::unique_ptr<gzFile_s, gz_closer>;

class idx_file {
public:
    explicit idx_file(const std::filesystem::path& path) : path_(path)
    {
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec))
            throw error(fmt::format("{}: no such file: check --data-dir", path.string()));
        file_size_ = std::filesystem::file_size(path, ec);
        file_.reset(gzopen(path.c_str(), "rb"));
        if (!file_) throw error(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
        gzbuffer(file_.get(), 1 << 20);
    }

    // The `bytes` bytes of data its header announced, `what` naming them.
    // A size from a header decides no allocation: a plain file must hold
    // them (its size says so before anything is allocated); a gzip file's
    // uncompressed size is not known in advance, so the buffer grows with
    // what was actually read, a chunk at a time.
    std::vector<unsigned char> read_data(std::uint64_t bytes, const char* what)
    {
        if (gzdirect(file_.get())) {
            const auto offset = gztell(file_.get());
            const std::uint64_t left = offset >= 0 && std::uint64_t(offset) <= file_size_ ? file_size_ - offset : 0;
            if (bytes > left)
                throw error(
                    fmt::format("{}: truncated: the file ends inside the {} ({} of the {} bytes its header announces): "
                                "download it again, or check --data-dir",
                                path_.string(), what, left, bytes));
        }
        constexpr std::size_t chunk = std::size_t(16) << 20;
        std::vector<unsigned char> out;
        while (out.size() < bytes) {
            const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(bytes - out.size(), chunk));
            if (out.capacity() < out.size() + n)
                out.reserve(static_cast<std::size_t>(
                    std::min<std::uint64_t>(bytes, std::max(2 * out.capacity(), out.size() + n))));
            const std::size_t at = out.size();
            out.resize(at + n);
            read(out.data() + at, n, what);
        }
        return out;
    }

    // Reads exactly n bytes; `what` names the part for the error.
    void read(void* out, std::size_t n, const char* what)
    {
        auto* p = static_cast<unsigned char*>(out);
        while (n > 0) {
            unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n, 1u << 30));
            int got = gzread(file_.get(), p, chunk);
            if (got < 0) {
                int code = 0;
                const char* msg = gzerror(file_.get(), &code);
                throw error(fmt::format("{}: corrupt ({}) while reading the {}", path_.string(), msg, what));
            }
            if (got == 0) throw error(fmt::format("{}: truncated: the file ends inside the {}", path_.string(), what));
            p += got;
            n -= static_cast<std::size_t>(got);
        }
    }

    std::uint32_t read_be32(const char* what)
    {
        std::array<unsigned char, 4> b{};
        read(b.data(), 4, what);
        return (std::uint32_t(b[0]) << 24) | (std::uint32_t(b[1]) << 16) | (std::uint32_t(b[2]) << 8) | b[3];
    }

    void expect_end()
    {
        unsigned char extra[64];
        int got = gzread(file_.get(), extra, sizeof extra);
        if (got > 0)
            throw error(
                fmt::format("{}: has bytes after the data its header announces: not an IDX file, or a wrong header",
                            path_.string()));
        if (got < 0) {
            int code = 0;
            throw error(fmt::format("{}: corrupt ({})", path_.string(), gzerror(file_.get(), &code)));
        }
    }

    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
    std::uint64_t file_size_ = 0;  // on disk (compressed, for a gzip file)
    gz_file file_;
};

// Magic: two zero bytes, the type (0x08 = unsigned byte), the rank.
void check_magic(idx_file& f, std::uint32_t want_rank)
{
    std::uint32_t magic = f.read_be32("header");
    if ((magic >> 8) != 0x08 || (magic & 0xff) != want_rank)
        throw error(fmt::format(
            "{}: bad magic number 0x{:08x} (expected 0x{:08x}, unsigned bytes of rank {}): not an IDX {} file",
            f.path().string(), magic, 0x800u | want_rank, want_rank, want_rank == 1 ? "label" : "image"));
}

}  // namespace

dataset read_idx_pair(const std::filesystem::path& images_path, const std::filesystem::path& labels_path)
{
    idx_file images(images_path);
    check_magic(images, 3);
    std::uint32_t n = images.read_be32("header");
    std::uint32_t h = images.read_be32("header");
    std::uint32_t w = images.read_be32("header");
    if (n == 0 || h == 0 || w == 0 || h > 4096 || w > 4096 || n > (1u << 28))
        throw error(fmt::format("{}: implausible dimensions {}x{}x{}", images_path.string(), n, h, w));

    idx_file labels(labels_path);
    check_magic(labels, 1);
    std::uint32_t nl = labels.read_be32("header");
    if (nl != n)
        throw error(fmt::format("{} holds {} images but {} holds {} labels: use matching files", images_path.string(),
                                n, labels_path.string(), nl));

    dataset d;
    d.rows = n;
    d.cols = std::size_t(h) * w;
    // A 3-D IDX file holds single-channel images.
    d.channels = 1;
    d.height = static_cast<int>(h);
    d.width = static_cast<int>(w);
    // At most 2^28 x 4096 x 4096 = 2^52 bytes: no 64-bit product wraps.
    const auto pixels = images.read_data(std::uint64_t(n) * h * w, "pixel data");
    images.expect_end();
    const auto raw_labels = labels.read_data(n, "label data");
    labels.expect_end();

    d.features.resize(pixels.size());
    for (std::size_t i = 0; i < pixels.size(); ++i) d.features[i] = pixels[i] * (1.0f / 255.0f);
    d.labels.resize(n);
    int max_label = 0;
    for (std::size_t i = 0; i < n; ++i) {
        d.labels[i] = raw_labels[i];
        max_label = std::max(max_label, int(raw_labels[i]));
    }
    d.num_classes = max_label + 1;
    return d;
}

}  // namespace pstrain::data
