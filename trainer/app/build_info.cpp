#include "trainer/app/build_info.hpp"

#include "common/log.hpp"
#include "config.h"
#include "trainer/compute/cuda_module.hpp"

#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

namespace pstrain::trainer {
namespace {

std::string or_not_built(std::string_view version)
{
    return version.empty() ? std::string("not in this build") : std::string(version);
}

std::string cuda_line(const std::string& module, const std::string& looked_in)
{
    const std::string_view cuda = PSTRAIN_BUILT_WITH_CUDA, cudnn = PSTRAIN_BUILT_WITH_CUDNN;
    if (cuda.empty()) return "not in this build (configured without CUDA): --device cpu only";
    const std::string built =
        fmt::format("CUDA {}, {}", cuda, cudnn.empty() ? std::string("no cuDNN") : fmt::format("cuDNN {}", cudnn));
    if (module.empty())
        return fmt::format(
            "{}; not installed on this node (looked in {}): install pstrain-cuda, or this build's make install", built,
            looked_in);
    return fmt::format("{}; {}", built, module);
}

}  // namespace

std::string version_text(const std::string& cuda_module, const std::string& looked_in)
{
    std::string out = fmt::format("pstrain {}\n", PACKAGE_VERSION);
    out += fmt::format("  CUDA module: {}\n", cuda_line(cuda_module, looked_in));
    out += fmt::format("  oneDNN:      {}\n", or_not_built(PSTRAIN_BUILT_WITH_DNNL));
    out += fmt::format("  UCX:         {}\n", PSTRAIN_BUILT_WITH_UCX);
    out += fmt::format("  PMIx:        {}\n", PSTRAIN_BUILT_WITH_PMIX);
    out += fmt::format("  Slurm:       {} (its SPANK plugin, spank_pstrain.so, is built against it)\n",
                       PSTRAIN_BUILT_WITH_SLURM);
    return out;
}

std::string version_text()
{
    const auto search = compute::find_cuda_module();
    return version_text(search.found, search.looked_in);
}

std::optional<std::string> plugin_version_mismatch(const char* plugin, const char* node, std::string_view mine)
{
    if (!plugin || !*plugin || mine == plugin) return std::nullopt;
    return fmt::format("the SPANK plugin on {} is pstrain {}, this program is pstrain {}: the job goes on, but "
                       "install one release of both on every node (pstrain-admin(8), UPGRADING)",
                       node && *node ? node : "this node", plugin, mine);
}

void warn_if_the_plugin_differs()
{
    const char* rank = std::getenv("SLURM_PROCID");
    if (!rank || std::string_view(rank) != "0") return;
    if (auto line = plugin_version_mismatch(std::getenv("PSTRAIN_PLUGIN_VERSION"), std::getenv("SLURMD_NODENAME"),
                                            PACKAGE_VERSION))
        log::warn("{}", *line);
}

}  // namespace pstrain::trainer
