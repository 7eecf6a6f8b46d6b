// libFuzzer target: the checkpoint shard reader (read_shard), whole and
// header only.  Input: one flag byte, then the file.  With the flag's low
// bit set the target writes the right crc32 into the file's last 4 bytes
// first, so that the fuzzer gets past the checksum to the values.  Only
// pstrain::error may come out.
#include "pstrain/error.hpp"
#include "tests/fuzz/memfile.hpp"
#include "trainer/checkpoint/shard_file.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <zlib.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static pstrain::fuzz::memfile file("shard");
    if (size < 1) return 0;
    const std::uint8_t flags = data[0];
    std::vector<std::uint8_t> bytes(data + 1, data + size);
    if ((flags & 1) && bytes.size() >= 4) {
        auto crc = static_cast<std::uint32_t>(crc32_z(0, bytes.data(), bytes.size() - 4));
        std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
    }
    file.assign(bytes.data(), bytes.size());
    for (bool header_only : {true, false}) {
        try {
            auto d = pstrain::checkpoint::read_shard(file.dir(), file.name(), header_only);
            const auto n = d.meta.range.size();
            if (!header_only && (d.values.size() != n || d.state.size() != n * std::size_t(d.meta.state_slots)))
                __builtin_trap();
        } catch (const pstrain::error&) {}
    }
    return 0;
}
