// Finding and loading pstrain-cuda.so, the CUDA backend's module
// (cuda_backend.hpp), the way UCX loads its CUDA transport: only when a GPU
// is wanted, so that pstrain itself needs no CUDA library to start.
#pragma once

#include "trainer/compute/cuda_backend.hpp"

#include <string>
#include <vector>

namespace pstrain::compute {

// Where to look, in order: $PSTRAIN_CUDA_MODULE alone when it is set;
// otherwise beside the program in a build tree (DIR/.libs), the install
// layout relative to the program (bindir -> pkglibdir, so a relocated or
// DESTDIR-staged install finds its own module), then pkglibdir as configured.
std::vector<std::string> cuda_module_candidates(const char* env_override, const std::string& program_path,
                                                const std::string& bindir, const std::string& pkglibdir);

// Where this process finds the module: the first of its
// cuda_module_candidates (PSTRAIN_CUDA_MODULE, this program's place, the
// configured directories) that exists, empty when none does, and every
// place looked, comma-separated.
struct cuda_module_search {
    std::string found, looked_in;
};
cuda_module_search find_cuda_module();

// Whether a GPU may be visible to this process, judged without loading any
// CUDA library (the module maps cudart, cuBLAS and cuDNN: about 230 MB and
// 0.1 s of CPU a task, paid by every task of a CPU job on nodes where the
// toolkit is installed).  False, with `why`, when CUDA_VISIBLE_DEVICES hides
// every device (empty, "-1...", or Slurm's "NoDevFiles") or when `dev_dir`
// has no GPU device file (nvidiactl, made by NVIDIA's driver; dxg, WSL's).
// `cuda_visible_devices` is the variable's value, nullptr when unset.
bool gpu_may_be_visible(const char* cuda_visible_devices, const std::string& dev_dir, std::string& why);

// The module, loaded once per process and never unloaded; nullptr when it
// cannot be loaded, and then `why` says which file, dlerror()'s message and
// the fix.
const cuda_module* load_cuda_module(std::string& why);

}  // namespace pstrain::compute
