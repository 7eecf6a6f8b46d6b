// The CPU backend: OpenBLAS sgemm for the dense layers (at --precision
// bf16, oneDNN's bf16 matmul: matmul_bf16.hpp, and its bf16 convolutions:
// conv2d.hpp), loops over the shared element-wise math for the rest.  The
// oracle of the CUDA backend.
#pragma once

#include "trainer/compute/backend.hpp"
#include "trainer/compute/matmul_bf16.hpp"

#include <memory>
#include <string>

namespace pstrain::compute {

class cpu_backend final : public backend {
public:
    explicit cpu_backend(int threads);
    // --precision bf16: the dense layers' products through `bf16`, on the
    // CPU's `unit` ("AMX", "AVX512-BF16"), which name() reports.
    cpu_backend(int threads, std::unique_ptr<cpu::matmul_bf16> bf16, std::string unit);

    std::string name() const override;
    bool host_memory() const override { return true; }
    void* allocate(std::size_t bytes) override;
    void release(void* p) noexcept override;
    void* allocate_host(std::size_t bytes) override { return allocate(bytes); }
    void release_host(void* p) noexcept override { release(p); }
    bool pin_host(void*, std::size_t) override { return true; }
    void unpin_host(void*) noexcept override {}
    void copy_to_device(void* dst, const void* src, std::size_t bytes) override;
    void copy_to_host(void* dst, const void* src, std::size_t bytes) override;
    void synchronize() override {}

    void linear_forward(const float* x, const float* w, const float* b, float* y, int rows, int in, int out) override;
    void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, int rows,
                         int in, int out) override;
    void relu_forward(const float* z, float* a, std::size_t n) override;
    void relu_backward(const float* z, const float* da, float* dz, std::size_t n) override;
    loss_sums softmax_xent(const float* logits, const std::int32_t* labels, float* dlogits, int rows,
                           int classes) override;
    loss_sums squared_error(const float* pred, const float* target, float* dpred, int rows) override;
    std::unique_ptr<layer_kernels> make_layer_kernels() override;

private:
    std::unique_ptr<cpu::matmul_bf16> bf16_;  // null at fp32
    std::string bf16_unit_;
};

}  // namespace pstrain::compute
