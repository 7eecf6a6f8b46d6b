// The CUDA/cuBLAS backend, seen from C++ code compiled without nvcc.
#pragma once

#include "trainer/compute/backend.hpp"

#include <memory>
#include <string>

namespace pstrain::compute {

// True when a CUDA device can be used; otherwise `why` says why and what to do.
bool cuda_device_available(std::string& why);

// The backend on the first visible device (the one the SPANK plugin bound).
std::unique_ptr<backend> make_cuda_backend();

}  // namespace pstrain::compute
