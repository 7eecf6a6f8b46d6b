// libFuzzer target: the checkpoint manifest reader (read_manifest).  Input:
// one flag byte, then the file.  With the flag's low bit set and the file
// a JSON object, the target sets its "crc32" to the right checksum first
// (as write_manifest computes it), so that the fuzzer gets past the
// checksum to the fields.  Only pstrain::error may come out.
#include "pstrain/error.hpp"
#include "tests/fuzz/memfile.hpp"
#include "trainer/checkpoint/manifest.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>
#include <zlib.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static pstrain::fuzz::memfile file("manifest");
    if (size < 1) return 0;
    const std::uint8_t flags = data[0];
    std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
    if (flags & 1) {
        auto j = nlohmann::json::parse(text, nullptr, false);
        if (j.is_object()) {
            j.erase("crc32");
            const auto body = j.dump();
            j["crc32"] =
                static_cast<std::uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(body.data()), body.size()));
            text = j.dump(2);
        }
    }
    file.assign(reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
    try {
        auto m = pstrain::checkpoint::read_manifest(file.dir(), file.name());
        if (m.shards.empty()) __builtin_trap();
    } catch (const pstrain::error&) {}
    return 0;
}
