// One mapping per library from a status to pstrain::error, at the boundary.
#pragma once

#include "pstrain/error.hpp"

#include <string>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace pstrain::compute::cuda {

inline void check(cudaError_t status, const char* call)
{
    if (status != cudaSuccess) throw error(std::string(call) + " failed: " + cudaGetErrorString(status));
}

inline void check(cublasStatus_t status, const char* call)
{
    if (status != CUBLAS_STATUS_SUCCESS) throw error(std::string(call) + " failed: " + cublasGetStatusString(status));
}

// After a kernel launch: a bad configuration is reported here, a fault at
// the next synchronisation.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

}  // namespace pstrain::compute::cuda
