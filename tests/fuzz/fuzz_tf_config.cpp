// libFuzzer target: TF_CONFIG (parse_tf_config).  Only pstrain::error may
// come out; a TF_CONFIG it accepts, written again by tf_config_json, must
// parse to the same cluster and task.
#include "common/cluster_spec.hpp"
#include "pstrain/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    pstrain::tf_config c;
    try {
        c = pstrain::parse_tf_config(text);
    } catch (const pstrain::error&) {
        return 0;
    }
    if (c.task.index < 0) __builtin_trap();
    // An evaluator is written outside the cluster: the round trip holds
    // for the other tasks.
    if (c.task.role == pstrain::role::evaluator) return 0;
    try {
        auto again = pstrain::parse_tf_config(pstrain::tf_config_json(c.cluster, c.task));
        if (!(again.task == c.task) || again.cluster.ps != c.cluster.ps || again.cluster.worker != c.cluster.worker ||
            again.cluster.chief != c.cluster.chief)
            __builtin_trap();
    } catch (const pstrain::error&) {
        __builtin_trap();
    }
    return 0;
}
