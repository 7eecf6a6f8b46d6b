// MNIST IDX reader (plain or gzip, through zlib's gzread).
#include "trainer/data/dataset.hpp"

#include "pstrain/error.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>

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
        file_.reset(gzopen(path.c_str(), "rb"));
        if (!file_) throw error(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
        gzbuffer(file_.get(), 1 << 20);
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
            throw error(fmt::format("{}: has bytes after the data its header announces: not an IDX file, or a wrong header",
                                    path_.string()));
        if (got < 0) {
            int code = 0;
            throw error(fmt::format("{}: corrupt ({})", path_.string(), gzerror(file_.get(), &code)));
        }
    }

    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
    gz_file file_;
};

// Magic: two zero bytes, the type (0x08 = unsigned byte), the rank.
void check_magic(idx_file& f, std::uint32_t want_rank)
{
    std::uint32_t magic = f.read_be32("header");
    if ((magic >> 8) != 0x08 || (magic & 0xff) != want_rank)
        throw error(fmt::format("{}: bad magic number 0x{:08x} (expected 0x{:08x}, unsigned bytes of rank {}): not an IDX {} file",
                                f.path().string(), magic, 0x800u | want_rank, want_rank,
                                want_rank == 1 ? "label" : "image"));
}

// Reads n bytes into `out`, growing it as they arrive: a header that claims
// more than the file holds fails as truncated having allocated only what
// the file held (plus a chunk), never what the header claims.
void read_growing(idx_file& f, std::vector<unsigned char>& out, std::size_t n, const char* what)
{
    constexpr std::size_t chunk = std::size_t(64) << 20;
    out.clear();
    while (out.size() < n) {
        const std::size_t at = out.size(), part = std::min(n - at, chunk);
        out.resize(at + part);
        f.read(out.data() + at, part, what);
    }
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
        throw error(fmt::format("{} holds {} images but {} holds {} labels: use matching files", images_path.string(), n,
                                labels_path.string(), nl));

    dataset d;
    d.rows = n;
    d.cols = std::size_t(h) * w;
    std::vector<unsigned char> pixels;
    read_growing(images, pixels, d.rows * d.cols, "pixel data");
    images.expect_end();
    std::vector<unsigned char> raw_labels;
    read_growing(labels, raw_labels, n, "label data");
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
