// Buffers that grow to the largest request and are then reused: no
// allocation in steady state.  Device memory (scratch) and page-locked host
// memory (pinned_vector), each freed by its owner.
#pragma once

#include "trainer/compute/cuda/check.cuh"

#include <cstddef>

#include <cuda_runtime_api.h>

namespace pstrain::compute::cuda {

template <typename T>
struct pinned_vector {
    T* p = nullptr;
    std::size_t n = 0;
    pinned_vector() = default;
    pinned_vector(const pinned_vector&) = delete;
    pinned_vector& operator=(const pinned_vector&) = delete;
    void reserve(std::size_t want)
    {
        if (want <= n) return;
        if (p) cudaFreeHost(p);
        p = nullptr;
        n = 0;  // a failed allocation leaves an empty buffer, not a stale size
        check(cudaMallocHost(&p, want * sizeof(T)), "cudaMallocHost");
        n = want;
    }
    ~pinned_vector() { if (p) cudaFreeHost(p); }
};

template <typename T>
struct scratch {
    T* p = nullptr;
    std::size_t n = 0;
    scratch() = default;
    scratch(const scratch&) = delete;
    scratch& operator=(const scratch&) = delete;
    void reserve(std::size_t want)
    {
        if (want <= n) return;
        if (p) cudaFree(p);
        p = nullptr;
        n = 0;  // a failed allocation leaves an empty buffer, not a stale size
        check(cudaMalloc(&p, want * sizeof(T)), "cudaMalloc");
        n = want;
    }
    ~scratch() { if (p) cudaFree(p); }
};

}  // namespace pstrain::compute::cuda
