// The dense layers' matrix products at --precision bf16 on the CPU: the
// float32 operands are rounded to bf16 (bf16.hpp) in buffers this object
// keeps, multiplied by oneDNN's matmul (AMX or AVX512-BF16 where the CPU has
// them), accumulated and written in float32.  The bias and its gradient
// stay float32.  Each shape's primitive is made at its first use and kept:
// steps of the same shapes make nothing and allocate nothing.  Row-major,
// host memory.  Not for concurrent use: one per backend.
#pragma once

#include <memory>
#include <string>

namespace pstrain::compute::cpu {

class matmul_bf16 {
public:
    virtual ~matmul_bf16() = default;
    // y[rows x out] = x[rows x in] * w[in x out] + b[out]
    virtual void linear_forward(const float* x, const float* w, const float* b, float* y, int rows, int in,
                                int out) = 0;
    // dw = x^T dy and (when dx is not null) dx = dy w^T.
    virtual void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, int rows,
                                 int in, int out) = 0;
};

// Throws pstrain::error (bf16_refusal's line) when this build has no oneDNN.
std::unique_ptr<matmul_bf16> make_matmul_bf16();

}  // namespace pstrain::compute::cpu
