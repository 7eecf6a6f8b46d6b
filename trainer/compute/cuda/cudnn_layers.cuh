// The layer kernels (compute/layers.hpp) on a GPU: cuDNN's convolution,
// pooling, batch normalization and softmax, and layer_kernels.cu for the
// rest.  Built when configure finds cuDNN beside the CUDA toolkit.
#pragma once

#include "trainer/compute/layers.hpp"
#include "trainer/compute/precision.hpp"

#include <memory>

#include <cuda_runtime_api.h>

namespace pstrain::compute::cuda {

// Kernels that run on `stream`, the backend's, so they order with its
// copies and cuBLAS calls.  At precision::bf16 the convolutions multiply
// bf16 on the tensor cores; pooling, normalization and the rest stay
// float32.
std::unique_ptr<layer_kernels> make_cudnn_layer_kernels(cudaStream_t stream, precision p);

}  // namespace pstrain::compute::cuda
