// libFuzzer target: the CSV reader (read_csv), the input being the file.
// Only pstrain::error may come out, and what it reads must be consistent.
#include "pstrain/error.hpp"
#include "tests/fuzz/memfile.hpp"
#include "trainer/data/dataset.hpp"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static pstrain::fuzz::memfile file("csv");
    file.assign(data, size);
    try {
        auto d = pstrain::data::read_csv(file.path());
        if (d.rows == 0 || d.features.size() != d.rows * d.cols || d.labels.size() != d.rows) __builtin_trap();
        for (auto l : d.labels)
            if (l < 0 || l >= d.num_classes) __builtin_trap();
    } catch (const pstrain::error&) {}
    return 0;
}
