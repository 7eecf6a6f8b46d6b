// The kernels of layer models (model/sequential) on one device, behind one
// interface: the CPU's (compute/cpu_layers, oneDNN or im2col convolution)
// and, in CUDA builds with cuDNN, the GPU's (cuDNN convolution, pooling,
// batch normalization and softmax; this tree's kernels for the rest).  A
// backend makes its own (backend::make_layer_kernels).  Pointers are that
// backend's device memory; NCHW activations, OIHW kernels, row-major.
#pragma once

#include "trainer/compute/backend.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace pstrain::compute {

// The geometry of a 2-D window (convolution or pooling) over C x H x W
// images: window kh x kw, strides sh, sw, and the zero padding before the
// first row and column (pad_top, pad_left); the output is out_h x out_w.
struct window2d {
    int channels = 1, height = 1, width = 1;
    int kh = 1, kw = 1, sh = 1, sw = 1;
    int pad_top = 0, pad_left = 0;
    int out_h = 1, out_w = 1;

    // The padding after the last row and column: TensorFlow's "same" puts
    // the odd one there, so it can exceed pad_top or pad_left by one.
    int pad_bottom() const { return std::max((out_h - 1) * sh + kh - height - pad_top, 0); }
    int pad_right() const { return std::max((out_w - 1) * sw + kw - width - pad_left, 0); }

    // The window of output (oy, ox) inside the image: rows [y0, y1) and
    // columns [x0, x1) (padding cut off).
    struct span2d {
        int y0, y1, x0, x1;
        int cells() const { return (y1 - y0) * (x1 - x0); }
    };
    span2d under(int oy, int ox) const
    {
        return {std::max(oy * sh - pad_top, 0), std::min(oy * sh - pad_top + kh, height),
                std::max(ox * sw - pad_left, 0), std::min(ox * sw - pad_left + kw, width)};
    }
};

// TensorFlow's padding rules: "valid" uses whole windows only,
// out = (in - k) / s + 1; "same" gives out = ceil(in / s) and puts the odd
// padding row or column at the bottom or right.  Sets out_* and pad_*.
// Returns false when a "valid" window does not fit the input.
bool resolve_padding(window2d& w, bool same);

enum class activation { relu, tanh, sigmoid };

// A convolution layer's kernel, made once per layer shape.
class conv2d {
public:
    virtual ~conv2d() = default;
    virtual const char* name() const = 0;  // "onednn", "im2col", "cudnn"
    // y[n, O, out_h, out_w] = conv(x, k) + b
    virtual void forward(const float* x, const float* k, const float* b, float* y, int n) = 0;
    // dk, db and (when dx is not null) dx from dy.
    virtual void backward(const float* x, const float* k, const float* dy, float* dx, float* dk, float* db, int n) = 0;
};

// A pooling layer's kernel, made once per layer shape: it keeps what its
// backward pass needs (the CPU's argmax, cuDNN's descriptors).
class pool2d {
public:
    virtual ~pool2d() = default;
    // y is n x C x out_h x out_w.  Max pooling: padding never wins; average
    // pooling: the mean of the window's cells inside the image (padding is
    // not counted, as in TensorFlow).
    virtual void forward(const float* x, float* y, int n) = 0;
    // dx (overwritten) from dy and the forward pass's x and y.
    virtual void backward(const float* x, const float* y, const float* dy, float* dx, int n) = 0;
};

class layer_kernels {
public:
    virtual ~layer_kernels() = default;

    virtual std::unique_ptr<conv2d> make_conv2d(const window2d& w, int filters, int max_batch) = 0;
    virtual std::unique_ptr<pool2d> make_maxpool(const window2d& w, int max_batch) = 0;
    virtual std::unique_ptr<pool2d> make_avgpool(const window2d& w, int max_batch) = 0;

    // dst = src, device to device.
    virtual void copy(float* dst, const float* src, std::size_t count) = 0;

    virtual void activation_forward(activation a, const float* x, float* y, std::size_t count) = 0;
    // dx from dy and the forward output y; dx may be dy.
    virtual void activation_backward(activation a, const float* y, const float* dy, float* dx, std::size_t count) = 0;
    // Row-wise softmax of rows x classes, and its backward pass from the output.
    virtual void softmax_forward(const float* x, float* y, int rows, int classes) = 0;
    virtual void softmax_backward(const float* y, const float* dy, float* dx, int rows, int classes) = 0;

    // Mean squared error against one-hot labels (device int32), averaged over
    // the classes of a row (Keras' mean_squared_error); dpred (may be null)
    // = d(mean over rows) / d pred.
    virtual backend::loss_sums mse_onehot(const float* pred, const std::int32_t* labels, float* dpred, int rows,
                                          int classes) = 0;

    // Inverted dropout: keeps an element with probability 1 - rate and scales
    // it by 1 / (1 - rate); `mask` holds the factor (0 or the scale) for the
    // backward pass.  Element i's draw is bits of the (i / 2 + 1)-th output of
    // splitmix64(seed), so every device draws the same mask.
    virtual void dropout_forward(const float* x, float* y, float* mask, std::size_t count, float rate,
                                 std::uint64_t seed) = 0;
    virtual void dropout_backward(const float* dy, const float* mask, float* dx, std::size_t count) = 0;

    // Batch normalization of x[n, channels, inner]: per channel after a
    // convolution (inner = H * W), per feature after a dense layer
    // (inner = 1).  Training normalizes with the batch's statistics (biased
    // variance) and keeps them for the backward pass and the moving
    // averages: mean[channels], var[channels], inv_std[channels] =
    // 1 / sqrt(var + eps).
    virtual void batchnorm_forward_train(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                         float* var, float* inv_std, int n, int channels, int inner, float eps) = 0;
    // Evaluation: the moving mean and variance instead of the batch's.
    virtual void batchnorm_forward_eval(const float* x, const float* gamma, const float* beta, const float* moving_mean,
                                        const float* moving_var, float* y, int n, int channels, int inner,
                                        float eps) = 0;
    // dgamma = sum dy * xhat, dbeta = sum dy (both overwritten), and dx (may
    // be null) through the batch statistics of batchnorm_forward_train.
    virtual void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* inv_std,
                                    const float* dy, float* dx, float* dgamma, float* dbeta, int n, int channels,
                                    int inner, float eps) = 0;
    // delta = (1 - momentum) * (batch - moving): the step of a moving average
    // toward the batch's statistic (TensorFlow's assign_moving_average).
    virtual void moving_average_delta(const float* batch, const float* moving, float* delta, int count,
                                      float momentum) = 0;
};

}  // namespace pstrain::compute
