// libFuzzer target: PSTRAIN_CLUSTER (parse_cluster_spec).  Only
// pstrain::error may come out; a spec it accepts must come back the same
// through to_json, and every address must split into host and port.
#include "common/cluster_spec.hpp"
#include "pstrain/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace {

bool same(const pstrain::cluster_spec& a, const pstrain::cluster_spec& b)
{
    return a.chief == b.chief && a.evaluator == b.evaluator && a.ps == b.ps && a.worker == b.worker;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    pstrain::cluster_spec spec;
    try {
        spec = pstrain::parse_cluster_spec(text);
    } catch (const pstrain::error&) {
        return 0;
    }
    for (auto r : {pstrain::role::chief, pstrain::role::evaluator, pstrain::role::ps, pstrain::role::worker})
        for (const auto& address : spec.tasks(r)) {
            auto [host, port] = pstrain::split_host_port(address);
            if (port < 0 || port > 65535) __builtin_trap();
        }
    if (!same(pstrain::parse_cluster_spec(pstrain::to_json(spec)), spec)) __builtin_trap();
    return 0;
}
