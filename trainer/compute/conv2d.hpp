// The CPU's convolution layer kernel (layers.hpp), made once per layer shape: oneDNN's
// (Debian's libdnnl, what PyTorch's CPU backend uses) when pstrain is built
// with it and the input has 4 channels or more, where it measured 1.6x
// faster than im2col + OpenBLAS sgemm (bench/README.md); im2col + sgemm
// otherwise (on one input channel oneDNN measured 0.6x).  NCHW
// activations, OIHW kernels, host memory.  Each distinct batch size's
// buffers and primitives are made at its first use and kept: steps of the
// same size allocate nothing.  At --precision bf16 every convolution is
// oneDNN's, its bf16 primitives: src, weights and the gradient of dst are
// rounded to bf16, products accumulate in float32, and dst and the
// gradients of src, weights and bias are float32.
#pragma once

#include "trainer/compute/cpu_layers.hpp"
#include "trainer/compute/precision.hpp"

#include <memory>
#include <string>

namespace pstrain::compute::cpu {

enum class conv2d_impl {
    automatic,  // PSTRAIN_CONV=im2col|onednn when set (benchmarks), else the faster for the shape
    im2col,
    onednn,
};

// Throws pstrain::error when `which` is onednn (or the precision bf16) in a
// build without it, when PSTRAIN_CONV names something else, or im2col at
// bf16.
std::unique_ptr<conv2d> make_conv2d(const window2d& w, int filters, int max_batch,
                                    conv2d_impl which = conv2d_impl::automatic, precision p = precision::fp32);
bool have_onednn();
// The threads oneDNN's convolutions use (its OpenMP runtime); a no-op
// without oneDNN.
void set_conv2d_threads(int threads);

}  // namespace pstrain::compute::cpu
