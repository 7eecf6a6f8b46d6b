// What this pstrain is, for an admin telling builds apart: its release and
// what the build has (`pstrain --version`: the CUDA module and its CUDA and
// cuDNN versions, oneDNN, UCX, PMIx, the Slurm its plugin was built
// against, as configure read them from the headers), and the check that
// the SPANK plugin that described this task is of the same release.
//
// The check warns and never refuses: what couples the plugin to the
// trainer is the task environment of spank-pstrain(8), which the trainer
// validates as it reads it, and tasks of releases that cannot work together
// are refused at the PS handshake by the wire protocol's version.  A
// refusal would fail every job of a rolling upgrade, and every job of a
// user who runs a pstrain of their own build under the site's plugin.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pstrain::trainer {

// The lines of `pstrain --version`, each ending in a newline. `cuda_module`
// is where pstrain would load its CUDA module from (the first candidate that
// exists), empty when none does; `looked_in` names the candidates.
std::string version_text(const std::string& cuda_module, const std::string& looked_in);
// version_text for this process: finds the module as pstrain does (without
// loading it).
std::string version_text();

// The warning line when the plugin that described this task
// (PSTRAIN_PLUGIN_VERSION, `plugin`) is another release than `mine`, on
// node `node`; nothing when they agree or no plugin described the task.
std::optional<std::string> plugin_version_mismatch(const char* plugin, const char* node, std::string_view mine);

// Logs that warning once per step: from its task of rank 0 (SLURM_PROCID).
void warn_if_the_plugin_differs();

}  // namespace pstrain::trainer
