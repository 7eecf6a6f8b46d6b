// libFuzzer target: the Criteo TSV reader (ctr_reader over one file, every
// line through parse_ctr_line), the input being the file, read strictly and
// with skipping.  Only pstrain::error may come out, and what it reads must
// be consistent: labels 0 or 1, finite features.
#include "pstrain/error.hpp"
#include "tests/fuzz/memfile.hpp"
#include "trainer/data/ctr_reader.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static pstrain::fuzz::memfile file("ctr");
    file.assign(data, size);
    for (bool skip : {false, true}) {
        try {
            pstrain::data::ctr_reader r({file.path()}, 0, 1, skip);
            pstrain::data::ctr_sample s;
            while (r.next(s)) {
                if (s.label != 0.0f && s.label != 1.0f) __builtin_trap();
                for (float x : s.numeric)
                    if (!std::isfinite(x)) __builtin_trap();
            }
        } catch (const pstrain::error&) {
            if (skip) __builtin_trap();  // skipping bad lines, nothing is an error
        }
    }
    return 0;
}
