// The CUDA/cuBLAS backend, seen from C++ code compiled without nvcc.
//
// It lives in its own module, pstrain-cuda.so (trainer/compute/cuda/), which
// links the CUDA runtime, cuBLAS and cuDNN; pstrain links none of them and
// dlopen()s the module only when a GPU is wanted (--device cuda or auto:
// cuda_module.hpp), so one pstrain runs on nodes without the CUDA libraries.
// The CUDA unit tests link the module's objects directly and call the two
// functions below.
#pragma once

#include "trainer/compute/backend.hpp"

#include <memory>
#include <string>

namespace pstrain::compute {

// True when a CUDA device can be used; otherwise `why` says why and what to do.
bool cuda_device_available(std::string& why);

// The backend on the first visible device (the one the SPANK plugin bound).
// At precision::bf16 the dense layers' products are cuBLAS's bf16 GEMMs and
// the convolutions cuDNN's bf16 ones, on tensor cores, accumulating in
// float32; throws pstrain::error, naming the GPU and the fix, on a GPU
// without bf16 tensor cores (compute capability below 8.0).
std::unique_ptr<backend> make_cuda_backend(precision p = precision::fp32);

// What the module hands to pstrain: the functions above, and the pstrain
// version it was built from.  The backend interface is C++, so a module of
// another build is refused rather than called.
struct cuda_module {
    const char* version;
    bool (*device_available)(std::string& why);
    std::unique_ptr<backend> (*make_backend)(precision p);
};

}  // namespace pstrain::compute

// The module's one exported entry point, looked up by name after dlopen.
extern "C" const pstrain::compute::cuda_module* pstrain_cuda_module();
#define PSTRAIN_CUDA_MODULE_ENTRY "pstrain_cuda_module"
