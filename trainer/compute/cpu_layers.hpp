// CPU kernels of the convolutional layers, NCHW activations: 2-D
// convolution as im2col + OpenBLAS sgemm, max and average pooling,
// element-wise activations, softmax, mean squared error, dropout and batch
// normalization.
// Pointers are host memory; nothing here allocates: the caller passes the
// workspaces, sized once for its largest batch (conv2d_workspace).
#pragma once

#include "trainer/compute/layers.hpp"
#include "trainer/compute/precision.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace pstrain::compute::cpu {

// Floats of the workspace a convolution of up to max_batch images needs
// (the im2col columns and the product of a chunk of images).
std::size_t conv2d_workspace(const window2d& w, int filters, int max_batch);

// y[n, O, out_h, out_w] = conv(x[n, C, H, W], k[O, C, kh, kw]) + b[O]: one
// sgemm per chunk of images over their im2col columns.
void conv2d_forward(const float* x, const float* k, const float* b, float* y, int n, int filters, const window2d& w,
                    float* workspace);
// dk = dy * col^T summed over the images, db = sums of dy; dx (may be null)
// = col2im(k^T dy).
void conv2d_backward(const float* x, const float* k, const float* dy, float* dx, float* dk, float* db, int n,
                     int filters, const window2d& w, float* workspace);

// Max pooling; `argmax` (n * C * out_h * out_w) keeps each output's input
// index within its channel plane for the backward pass.  Padding never wins.
void maxpool_forward(const float* x, float* y, std::int32_t* argmax, int n, const window2d& w);
void maxpool_backward(const float* dy, const std::int32_t* argmax, float* dx, int n, const window2d& w);
// Average pooling over the window's cells inside the image (padding is not
// counted, as in TensorFlow).
void avgpool_forward(const float* x, float* y, int n, const window2d& w);
void avgpool_backward(const float* dy, float* dx, int n, const window2d& w);

void activation_forward(activation a, const float* x, float* y, std::size_t count);
// dx from dy and the forward output y.
void activation_backward(activation a, const float* y, const float* dy, float* dx, std::size_t count);

// Row-wise softmax of rows x classes, and its backward pass from the output.
void softmax_forward(const float* x, float* y, int rows, int classes);
void softmax_backward(const float* y, const float* dy, float* dx, int rows, int classes);

using loss_sums = backend::loss_sums;
// Mean squared error against one-hot labels, averaged over the classes of
// a row (Keras' mean_squared_error); dpred (may be null) = d(mean over rows) / d pred.
loss_sums mse_onehot(const float* pred, const std::int32_t* labels, float* dpred, int rows, int classes);

// Inverted dropout: keeps an element with probability 1 - rate and scales
// it by 1 / (1 - rate); `mask` holds the factor (0 or the scale) for the
// backward pass.  The mask is drawn from splitmix64(seed).
void dropout_forward(const float* x, float* y, float* mask, std::size_t count, float rate, std::uint64_t seed);
void dropout_backward(const float* dy, const float* mask, float* dx, std::size_t count);

// Batch normalization of x[n, channels, inner]: per channel after a
// convolution (inner = H * W), per feature after a dense layer (inner = 1).
// Training normalizes with the batch's statistics over n * inner values
// (biased variance, as TensorFlow and PyTorch's forward) and keeps them for
// the backward pass and the moving averages: mean[channels], var[channels],
// inv_std[channels] = 1 / sqrt(var + eps).  Sums are taken in double.
void batchnorm_forward_train(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* var,
                             float* inv_std, int n, int channels, int inner, float eps);
// Evaluation: the moving mean and variance instead of the batch's.
void batchnorm_forward_eval(const float* x, const float* gamma, const float* beta, const float* moving_mean,
                            const float* moving_var, float* y, int n, int channels, int inner, float eps);
// dgamma = sum dy * xhat, dbeta = sum dy (both overwritten), and dx (may be
// null) through the batch statistics of batchnorm_forward_train.
void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* inv_std, const float* dy,
                        float* dx, float* dgamma, float* dbeta, int n, int channels, int inner);
// The step of an exponential moving average toward the batch's statistic:
// delta = (1 - momentum) * (batch - moving), so moving + delta is the new
// moving value (TensorFlow's assign_moving_average with decay = momentum).
void moving_average_delta(const float* batch, const float* moving, float* delta, int count, float momentum);

// These kernels behind the device-neutral interface (cpu_backend's); the
// convolutions multiply at precision `p` (conv2d.hpp).
std::unique_ptr<layer_kernels> make_layer_kernels(precision p);

}  // namespace pstrain::compute::cpu
