// libFuzzer target: the IDX reader (read_idx_pair) on an image file and a
// label file, plain or gzip.  Input: a 2-byte little-endian split point
// (modulo the rest's length), then the bytes, split there into the image
// file and the label file.  Only pstrain::error may come out.
#include "pstrain/error.hpp"
#include "tests/fuzz/memfile.hpp"
#include "trainer/data/dataset.hpp"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static pstrain::fuzz::memfile images("idx-images"), labels("idx-labels");
    if (size < 2) return 0;
    std::size_t split = data[0] | (std::size_t(data[1]) << 8);
    data += 2;
    size -= 2;
    split = size == 0 ? 0 : split % (size + 1);
    images.assign(data, split);
    labels.assign(data + split, size - split);
    try {
        auto d = pstrain::data::read_idx_pair(images.path(), labels.path());
        if (d.features.size() != d.rows * d.cols || d.labels.size() != d.rows || d.num_classes < 1) __builtin_trap();
    } catch (const pstrain::error&) {}
    return 0;
}
