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

// The module, loaded once per process and never unloaded; nullptr when it
// cannot be loaded, and then `why` says which file, dlerror()'s message and
// the fix.
const cuda_module* load_cuda_module(std::string& why);

}  // namespace pstrain::compute
