// Buffers that grow to the largest request and are then reused: no
// allocation in steady state.  Device memory (scratch) and page-locked host
// memory (pinned_vector), each freed by its owner.
#pragma once

#include "trainer/compute/cuda/check.cuh"

#include <cstddef>

#include <cuda_runtime_api.h>

namespace pstrain::compute::cuda {

// Memory from `allocate` that grows to the largest request and is then
// reused; `release` frees it.
template <typename T, cudaError_t (*allocate)(void**, std::size_t), cudaError_t (*release)(void*)>
struct growing_buffer {
    T* p = nullptr;
    std::size_t n = 0;
    growing_buffer() = default;
    growing_buffer(const growing_buffer&) = delete;
    growing_buffer& operator=(const growing_buffer&) = delete;
    ~growing_buffer()
    {
        if (p) release(p);
    }
    void reserve(std::size_t want)
    {
        if (want <= n) return;
        if (p) release(p);
        p = nullptr;
        n = 0;  // a failed allocation leaves an empty buffer, not a stale size
        void* q = nullptr;
        check(allocate(&q, want * sizeof(T)), "allocating a GPU buffer");
        p = static_cast<T*>(q);
        n = want;
    }
};

template <typename T>
using scratch = growing_buffer<T, cudaMalloc, cudaFree>;  // device memory
template <typename T>
using pinned_vector = growing_buffer<T, cudaMallocHost, cudaFreeHost>;  // page-locked host memory

}  // namespace pstrain::compute::cuda
