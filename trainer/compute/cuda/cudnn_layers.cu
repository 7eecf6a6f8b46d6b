// cuDNN behind compute::layer_kernels.  FP32 throughout with FMA math (no
// TF32), as the dense layers' cuBLAS, so a GPU step computes what the CPU
// oracle computes to rounding.  At --precision bf16 the convolutions take
// bf16 input, kernel and output gradient (rounded here as the CPU rounds
// them: bf16_kernels.cu) and multiply on the tensor cores, accumulating in
// float32; cuDNN writes their results in bf16 too (its bf16 configuration
// has one data type), which are widened to the model's float32 tensors.
// Pooling, normalization and softmax stay float32.  Each conv or pooling layer keeps, per batch
// size, its descriptors, algorithms and workspace, made at the size's first
// use: steps of the same size allocate nothing.
//
// TensorFlow's "same" padding puts an odd padding row or column at the
// bottom or right; cuDNN pads symmetrically.  A convolution with symmetric
// padding uses cuDNN's; otherwise (and for every padded pooling layer, so
// max pooling never picks padding and average pooling can leave it out of
// the count) the input is copied into an explicitly padded buffer first, as
// TensorFlow does on cuDNN: -inf around a max pooling's input, zeros
// elsewhere.
#include "trainer/compute/cuda/cudnn_layers.cuh"

#include "pstrain/error.hpp"
#include "trainer/compute/cuda/buffers.cuh"
#include "trainer/compute/cuda/check.cuh"
#include "trainer/compute/cuda/kernels.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <cudnn.h>
// (no fmt here: its consteval format strings do not build under nvcc)

namespace pstrain::compute::cuda {
namespace {

// cuDNN's one mapping from a status to pstrain::error.
void check(cudnnStatus_t status, const char* call)
{
    if (status != CUDNN_STATUS_SUCCESS) throw error(std::string(call) + " failed: " + cudnnGetErrorString(status));
}
using cuda::check;

const float one = 1.0f, zero = 0.0f;

struct cudnn_owner {
    cudnnHandle_t h = nullptr;
    explicit cudnn_owner(cudaStream_t s)
    {
        check(cudnnCreate(&h), "cudnnCreate");
        const cudnnStatus_t rc = cudnnSetStream(h, s);
        if (rc != CUDNN_STATUS_SUCCESS) {
            cudnnDestroy(h);
            h = nullptr;
            check(rc, "cudnnSetStream");
        }
    }
    ~cudnn_owner()
    {
        if (h) cudnnDestroy(h);
    }
    cudnn_owner(const cudnn_owner&) = delete;
    cudnn_owner& operator=(const cudnn_owner&) = delete;
};

template <typename D, cudnnStatus_t (*create)(D*), cudnnStatus_t (*destroy)(D)>
struct descriptor {
    D d = nullptr;
    descriptor() { check(create(&d), "cudnnCreate...Descriptor"); }
    ~descriptor()
    {
        if (d) destroy(d);
    }
    descriptor(const descriptor&) = delete;
    descriptor& operator=(const descriptor&) = delete;
    operator D() const { return d; }
};
using tensor_desc = descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using filter_desc = descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using conv_desc =
    descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using pool_desc = descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;

void set_nchw(cudnnTensorDescriptor_t d, int n, int c, int h, int w, cudnnDataType_t type = CUDNN_DATA_FLOAT)
{
    check(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, type, n, c, h, w), "cudnnSetTensor4dDescriptor");
}

std::string shape_text(int n, int c, int h, int w)
{
    return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}

// How a window's padding reaches cuDNN (see the top of this file).
struct padding_plan {
    bool copy = false;         // through an explicitly padded input
    int hp = 0, wp = 0;        // the input's height and width as cuDNN sees it
    int pad_h = 0, pad_w = 0;  // cuDNN's own (symmetric) padding

    padding_plan(const window2d& w, bool symmetric_allowed)
    {
        const int bottom = w.pad_bottom(), right = w.pad_right();
        const bool padded = w.pad_top || bottom || w.pad_left || right;
        const bool symmetric = bottom == w.pad_top && right == w.pad_left;
        copy = padded && !(symmetric_allowed && symmetric);
        hp = copy ? w.height + w.pad_top + bottom : w.height;
        wp = copy ? w.width + w.pad_left + right : w.width;
        pad_h = copy ? 0 : w.pad_top;
        pad_w = copy ? 0 : w.pad_left;
    }
};

// The input cuDNN reads: x itself, or x copied into `buffer` with the
// padding filled with `fill`.
const float* padded_input(const padding_plan& p, const window2d& w, const float* x, int n, scratch<float>& buffer,
                          float fill, cudaStream_t stream)
{
    if (!p.copy) return x;
    const std::size_t planes = std::size_t(n) * w.channels;
    buffer.reserve(planes * p.hp * p.wp);
    launch_pad(x, buffer.p, planes, w.height, w.width, w.pad_top, w.pad_left, p.hp, p.wp, fill, stream);
    return buffer.p;
}

// Where cuDNN writes the gradient of a padded_input: dx itself, or
// `buffer`, whose inside crop_gradient then copies to dx.
float* padded_gradient(const padding_plan& p, const window2d& w, float* dx, int n, scratch<float>& buffer)
{
    if (!p.copy) return dx;
    buffer.reserve(std::size_t(n) * w.channels * p.hp * p.wp);
    return buffer.p;
}

void crop_gradient(const padding_plan& p, const window2d& w, const float* grad, float* dx, int n, cudaStream_t stream)
{
    if (p.copy)
        launch_crop(grad, dx, std::size_t(n) * w.channels, w.height, w.width, w.pad_top, w.pad_left, p.hp, p.wp,
                    stream);
}

void check_output(const char* layer, int n, int c, int h, int w, const window2d& win, int channels_out)
{
    if (c != channels_out || h != win.out_h || w != win.out_w)
        throw error(std::string(layer) + ": cuDNN's output " + shape_text(n, c, h, w) + " differs from the model's " +
                    shape_text(n, channels_out, win.out_h, win.out_w) + " (a pstrain bug: please report it)");
}

// A workspace no algorithm may ask for more than: cuDNN's heuristics can
// rank an FFT algorithm first that wants gigabytes.
constexpr std::size_t max_workspace = std::size_t(512) << 20;

// Algorithms that multiply in a transformed domain (FFT, Winograd): their
// transforms round intermediate values of their own.
bool transformed(cudnnConvolutionFwdAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transformed(cudnnConvolutionBwdDataAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transformed(cudnnConvolutionBwdFilterAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// The first of cuDNN's heuristic choices (fastest expected first) that runs
// within max_workspace, preferring a deterministic one: the same batch gives
// the same gradient bits on every worker and every run.  At fp32 only FMA
// math (no TF32, as the CPU); at bf16 the tensor cores' too (no conversion
// of the operands beyond the bf16 they already are), and a direct
// algorithm before an FFT or Winograd one: --precision bf16 promises the
// product sums of the rounded operands, accumulated in FP32 and rounded
// once, and a transform at bf16 rounds its transformed operands again.
template <typename Perf>
Perf pick(const std::vector<Perf>& perfs, int returned, const char* what, bool bf16)
{
    auto usable = [bf16](const Perf& p) {
        const bool math = p.mathType == CUDNN_FMA_MATH ||
                          (bf16 && (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_DEFAULT_MATH));
        return p.status == CUDNN_STATUS_SUCCESS && math && p.memory <= max_workspace;
    };
    const auto direct = [bf16](const Perf& p) { return !bf16 || !transformed(p.algo); };
    const auto deterministic = [](const Perf& p) { return p.determinism == CUDNN_DETERMINISTIC; };
    // Deterministic and direct, deterministic, direct, any.
    for (const bool need_determinism : {true, false})
        for (const bool need_direct : {true, false})
            for (int i = 0; i < returned; ++i)
                if (usable(perfs[i]) && (deterministic(perfs[i]) || !need_determinism) &&
                    (direct(perfs[i]) || !need_direct))
                    return perfs[i];
    throw error(std::string(what) + ": cuDNN offers no " + (bf16 ? "bf16" : "FP32 (FMA)") +
                " algorithm within 512 MiB of workspace for this convolution on this GPU: run the model with " +
                (bf16 ? "--precision fp32, or with " : "") + "--device cpu");
}

class cudnn_conv2d final : public conv2d {
public:
    cudnn_conv2d(cudnnHandle_t h, cudaStream_t s, const window2d& w, int filters, precision p)
        : h_(h), stream_(s), w_(w), filters_(filters), bf16_(p == precision::bf16), pad_(w, true)
    {
        check(cudnnSetFilter4dDescriptor(filter_, data_type(), CUDNN_TENSOR_NCHW, filters, w.channels, w.kh, w.kw),
              "cudnnSetFilter4dDescriptor");
        check(cudnnSetConvolution2dDescriptor(conv_, pad_.pad_h, pad_.pad_w, w.sh, w.sw, 1, 1, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT),
              "cudnnSetConvolution2dDescriptor");
        set_nchw(bias_, 1, filters, 1, 1);
    }
    const char* name() const override { return "cudnn"; }

    void forward(const float* x, const float* k, const float* b, float* y, int n) override
    {
        if (n == 0) return;
        auto& p = plan(n);
        const float* in = padded_input(pad_, w_, x, n, padded_, 0.0f, stream_);
        math(p.fwd.mathType);
        if (bf16_) {
            check(cudnnConvolutionForward(h_, &one, p.x, rounded(in, x_count(n), x16_), filter_,
                                          rounded(k, kernel_count(), k16_), conv_, p.fwd.algo, workspace_.p,
                                          p.workspace, &zero, p.y, out16_.p),
                  "cudnnConvolutionForward(bf16)");
            launch_from_bf16(out16_.p, y, y_count(n), stream_);
        } else {
            check(cudnnConvolutionForward(h_, &one, p.x, in, filter_, k, conv_, p.fwd.algo, workspace_.p, p.workspace,
                                          &zero, p.y, y),
                  "cudnnConvolutionForward");
        }
        check(cudnnAddTensor(h_, &one, bias_, b, &one, p.y32, y), "cudnnAddTensor");
    }

    void backward(const float* x, const float* k, const float* dy, float* dx, float* dk, float* db, int n) override
    {
        if (n == 0) {  // no examples: zero gradients, as on the CPU
            const std::size_t kernel = std::size_t(filters_) * w_.channels * w_.kh * w_.kw;
            check(cudaMemsetAsync(dk, 0, kernel * sizeof(float), stream_), "cudaMemsetAsync");
            check(cudaMemsetAsync(db, 0, std::size_t(filters_) * sizeof(float), stream_), "cudaMemsetAsync");
            return;
        }
        auto& p = plan(n);
        const float* in = padded_input(pad_, w_, x, n, padded_, 0.0f, stream_);
        check(cudnnConvolutionBackwardBias(h_, &one, p.y32, dy, &zero, bias_, db), "cudnnConvolutionBackwardBias");
        if (bf16_) return backward_bf16(p, in, k, dy, dx, dk, n);
        math(p.filter.mathType);
        check(cudnnConvolutionBackwardFilter(h_, &one, p.x, in, p.y, dy, conv_, p.filter.algo, workspace_.p,
                                             p.workspace, &zero, filter_, dk),
              "cudnnConvolutionBackwardFilter");
        if (!dx) return;
        float* out = padded_gradient(pad_, w_, dx, n, padded_grad_);
        math(p.data.mathType);
        check(cudnnConvolutionBackwardData(h_, &one, filter_, k, p.y, dy, conv_, p.data.algo, workspace_.p, p.workspace,
                                           &zero, p.x, out),
              "cudnnConvolutionBackwardData");
        crop_gradient(pad_, w_, out, dx, n, stream_);
    }

private:
    struct shape_plan {
        tensor_desc x, y;  // as the convolution reads and writes them: float32, or bf16
        tensor_desc y32;   // y as the model keeps it, for the bias
        cudnnConvolutionFwdAlgoPerf_t fwd{};
        cudnnConvolutionBwdDataAlgoPerf_t data{};
        cudnnConvolutionBwdFilterAlgoPerf_t filter{};
        std::size_t workspace = 0;  // bytes, the largest of the three
    };

    void math(cudnnMathType_t m) { check(cudnnSetConvolutionMathType(conv_, m), "cudnnSetConvolutionMathType"); }
    cudnnDataType_t data_type() const { return bf16_ ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }
    cudnnMathType_t preferred_math() const { return bf16_ ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH; }

    std::size_t x_count(int n) const { return std::size_t(n) * w_.channels * pad_.hp * pad_.wp; }
    std::size_t y_count(int n) const { return std::size_t(n) * filters_ * w_.out_h * w_.out_w; }
    std::size_t kernel_count() const { return std::size_t(filters_) * w_.channels * w_.kh * w_.kw; }

    // `src` rounded to bf16 in `buffer` (grown to the largest batch, then
    // reused), on the stream before the convolution that reads it.
    const std::uint16_t* rounded(const float* src, std::size_t count, scratch<std::uint16_t>& buffer)
    {
        buffer.reserve(count);
        launch_to_bf16(src, buffer.p, count, stream_);
        return buffer.p;
    }

    // The kernel's and the input's gradients from bf16 operands; cuDNN
    // writes them in bf16, widened into dk and dx.
    void backward_bf16(shape_plan& p, const float* in, const float* k, const float* dy, float* dx, float* dk, int n)
    {
        const std::uint16_t* dy16 = rounded(dy, y_count(n), dy16_);
        math(p.filter.mathType);
        check(cudnnConvolutionBackwardFilter(h_, &one, p.x, rounded(in, x_count(n), x16_), p.y, dy16, conv_,
                                             p.filter.algo, workspace_.p, p.workspace, &zero, filter_, out16_.p),
              "cudnnConvolutionBackwardFilter(bf16)");
        launch_from_bf16(out16_.p, dk, kernel_count(), stream_);
        if (!dx) return;
        float* out = padded_gradient(pad_, w_, dx, n, padded_grad_);
        math(p.data.mathType);
        check(cudnnConvolutionBackwardData(h_, &one, filter_, rounded(k, kernel_count(), k16_), p.y, dy16, conv_,
                                           p.data.algo, workspace_.p, p.workspace, &zero, p.x, out16_.p),
              "cudnnConvolutionBackwardData(bf16)");
        launch_from_bf16(out16_.p, out, x_count(n), stream_);
        crop_gradient(pad_, w_, out, dx, n, stream_);
    }

    shape_plan& plan(int n)
    {
        auto& slot = plans_[n];
        if (slot) return *slot;
        auto p = std::make_unique<shape_plan>();
        set_nchw(p->x, n, w_.channels, pad_.hp, pad_.wp, data_type());
        int on = 0, oc = 0, oh = 0, ow = 0;
        check(cudnnGetConvolution2dForwardOutputDim(conv_, p->x, filter_, &on, &oc, &oh, &ow),
              "cudnnGetConvolution2dForwardOutputDim");
        check_output("conv2d", on, oc, oh, ow, w_, filters_);
        set_nchw(p->y, n, filters_, w_.out_h, w_.out_w, data_type());
        set_nchw(p->y32, n, filters_, w_.out_h, w_.out_w);
        if (bf16_) out16_.reserve(std::max({x_count(n), y_count(n), kernel_count()}));
        math(preferred_math());
        int count = 0, returned = 0;
        std::size_t bytes = 0;

        check(cudnnGetConvolutionForwardAlgorithmMaxCount(h_, &count), "cudnnGetConvolutionForwardAlgorithmMaxCount");
        std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd(std::size_t(std::max(count, 1)));
        check(cudnnGetConvolutionForwardAlgorithm_v7(h_, p->x, filter_, conv_, p->y, count, &returned, fwd.data()),
              "cudnnGetConvolutionForwardAlgorithm_v7");
        p->fwd = pick(fwd, returned, "conv2d forward", bf16_);
        math(p->fwd.mathType);
        check(cudnnGetConvolutionForwardWorkspaceSize(h_, p->x, filter_, conv_, p->y, p->fwd.algo, &bytes),
              "cudnnGetConvolutionForwardWorkspaceSize");
        p->workspace = std::max(p->workspace, bytes);

        math(preferred_math());
        check(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h_, &count),
              "cudnnGetConvolutionBackwardDataAlgorithmMaxCount");
        std::vector<cudnnConvolutionBwdDataAlgoPerf_t> data(std::size_t(std::max(count, 1)));
        check(
            cudnnGetConvolutionBackwardDataAlgorithm_v7(h_, filter_, p->y, conv_, p->x, count, &returned, data.data()),
            "cudnnGetConvolutionBackwardDataAlgorithm_v7");
        p->data = pick(data, returned, "conv2d backward data", bf16_);
        math(p->data.mathType);
        check(cudnnGetConvolutionBackwardDataWorkspaceSize(h_, filter_, p->y, conv_, p->x, p->data.algo, &bytes),
              "cudnnGetConvolutionBackwardDataWorkspaceSize");
        p->workspace = std::max(p->workspace, bytes);

        math(preferred_math());
        check(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h_, &count),
              "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount");
        std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> filter(std::size_t(std::max(count, 1)));
        check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h_, p->x, p->y, conv_, filter_, count, &returned,
                                                            filter.data()),
              "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
        p->filter = pick(filter, returned, "conv2d backward filter", bf16_);
        math(p->filter.mathType);
        check(cudnnGetConvolutionBackwardFilterWorkspaceSize(h_, p->x, p->y, conv_, filter_, p->filter.algo, &bytes),
              "cudnnGetConvolutionBackwardFilterWorkspaceSize");
        p->workspace = std::max(p->workspace, bytes);

        workspace_.reserve(std::max<std::size_t>(p->workspace, 1));
        slot = std::move(p);
        return *slot;
    }

    cudnnHandle_t h_;
    cudaStream_t stream_;
    window2d w_;
    int filters_;
    bool bf16_;
    padding_plan pad_;
    filter_desc filter_;
    conv_desc conv_;
    tensor_desc bias_;
    std::map<int, std::unique_ptr<shape_plan>> plans_;
    scratch<unsigned char> workspace_;
    scratch<float> padded_, padded_grad_;
    scratch<std::uint16_t> x16_, k16_, dy16_, out16_;  // bf16 operands, and cuDNN's bf16 results
};

class cudnn_pool2d final : public pool2d {
public:
    cudnn_pool2d(cudnnHandle_t h, cudaStream_t s, const window2d& w, bool max)
        : h_(h), stream_(s), w_(w), max_(max), pad_(w, false)
    {
        // On the padded copy cuDNN needs no padding, and every window is
        // whole: average pooling divides by kh * kw, which `factor_` turns
        // into the count of the window's cells inside the image.
        check(cudnnSetPooling2dDescriptor(
                  pool_, max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                  CUDNN_NOT_PROPAGATE_NAN, w.kh, w.kw, 0, 0, w.sh, w.sw),
              "cudnnSetPooling2dDescriptor");
        if (!max && pad_.copy) {
            std::vector<float> factor(std::size_t(w.out_h) * w.out_w);
            for (int oy = 0; oy < w.out_h; ++oy)
                for (int ox = 0; ox < w.out_w; ++ox)
                    factor[std::size_t(oy) * w.out_w + ox] = float(w.kh * w.kw) / float(w.under(oy, ox).cells());
            factor_.reserve(factor.size());
            check(cudaMemcpyAsync(factor_.p, factor.data(), factor.size() * sizeof(float), cudaMemcpyHostToDevice,
                                  stream_),
                  "cudaMemcpyAsync(pooling factors)");
            check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        }
    }

    void forward(const float* x, float* y, int n) override
    {
        if (n == 0) return;
        auto& p = plan(n);
        const float* in = padded_input(pad_, w_, x, n, padded_, max_ ? -INFINITY : 0.0f, stream_);
        check(cudnnPoolingForward(h_, pool_, &one, p.x, in, &zero, p.y, y), "cudnnPoolingForward");
        if (factor_.p) launch_scale_planes(y, factor_.p, y, out_count(n), w_.out_h * w_.out_w, stream_);
    }

    void backward(const float* x, const float* y, const float* dy, float* dx, int n) override
    {
        if (n == 0) return;
        auto& p = plan(n);
        const float* in = padded_input(pad_, w_, x, n, padded_, max_ ? -INFINITY : 0.0f, stream_);
        if (factor_.p) {
            scaled_dy_.reserve(out_count(n));
            launch_scale_planes(dy, factor_.p, scaled_dy_.p, out_count(n), w_.out_h * w_.out_w, stream_);
            dy = scaled_dy_.p;
        }
        float* out = padded_gradient(pad_, w_, dx, n, padded_grad_);
        check(cudnnPoolingBackward(h_, pool_, &one, p.y, y, p.y, dy, p.x, in, &zero, p.x, out), "cudnnPoolingBackward");
        crop_gradient(pad_, w_, out, dx, n, stream_);
    }

private:
    struct shape_plan {
        tensor_desc x, y;
    };

    std::size_t out_count(int n) const { return std::size_t(n) * w_.channels * w_.out_h * w_.out_w; }

    shape_plan& plan(int n)
    {
        auto& slot = plans_[n];
        if (slot) return *slot;
        auto p = std::make_unique<shape_plan>();
        set_nchw(p->x, n, w_.channels, pad_.hp, pad_.wp);
        int on = 0, oc = 0, oh = 0, ow = 0;
        check(cudnnGetPooling2dForwardOutputDim(pool_, p->x, &on, &oc, &oh, &ow), "cudnnGetPooling2dForwardOutputDim");
        check_output(max_ ? "maxpool" : "avgpool", on, oc, oh, ow, w_, w_.channels);
        set_nchw(p->y, n, w_.channels, w_.out_h, w_.out_w);
        slot = std::move(p);
        return *slot;
    }

    cudnnHandle_t h_;
    cudaStream_t stream_;
    window2d w_;
    bool max_;
    padding_plan pad_;
    pool_desc pool_;
    std::map<int, std::unique_ptr<shape_plan>> plans_;
    scratch<float> factor_, padded_, padded_grad_, scaled_dy_;
};

class cudnn_layer_kernels final : public layer_kernels {
public:
    cudnn_layer_kernels(cudaStream_t s, precision p) : stream_(s), precision_(p), cudnn_(s) {}

    std::unique_ptr<conv2d> make_conv2d(const window2d& w, int filters, int) override
    {
        return std::make_unique<cudnn_conv2d>(cudnn_.h, stream_, w, filters, precision_);
    }
    std::unique_ptr<pool2d> make_maxpool(const window2d& w, int) override
    {
        return std::make_unique<cudnn_pool2d>(cudnn_.h, stream_, w, true);
    }
    std::unique_ptr<pool2d> make_avgpool(const window2d& w, int) override
    {
        return std::make_unique<cudnn_pool2d>(cudnn_.h, stream_, w, false);
    }

    void copy(float* dst, const float* src, std::size_t count) override
    {
        if (dst != src && count)
            check(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
                  "cudaMemcpyAsync(device to device)");
    }

    void activation_forward(activation a, const float* x, float* y, std::size_t count) override
    {
        launch_activation_forward(a, x, y, count, stream_);
    }
    void activation_backward(activation a, const float* y, const float* dy, float* dx, std::size_t count) override
    {
        launch_activation_backward(a, y, dy, dx, count, stream_);
    }

    void softmax_forward(const float* x, float* y, int rows, int classes) override
    {
        set_nchw(rows_, rows, classes, 1, 1);
        check(cudnnSoftmaxForward(cudnn_.h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, rows_, x, &zero,
                                  rows_, y),
              "cudnnSoftmaxForward");
    }
    void softmax_backward(const float* y, const float* dy, float* dx, int rows, int classes) override
    {
        set_nchw(rows_, rows, classes, 1, 1);
        check(cudnnSoftmaxBackward(cudnn_.h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, rows_, y, rows_,
                                   dy, &zero, rows_, dx),
              "cudnnSoftmaxBackward");
    }

    backend::loss_sums mse_onehot(const float* pred, const std::int32_t* labels, float* dpred, int rows,
                                  int classes) override
    {
        backend::loss_sums sums;
        if (rows == 0) return sums;
        row_loss_.reserve(std::size_t(rows));
        row_hit_.reserve(std::size_t(rows));
        host_loss_.reserve(std::size_t(rows));
        host_hit_.reserve(std::size_t(rows));
        launch_mse_onehot(pred, labels, dpred, row_loss_.p, row_hit_.p, rows, classes, stream_);
        check(cudaMemcpyAsync(host_loss_.p, row_loss_.p, sizeof(double) * rows, cudaMemcpyDeviceToHost, stream_),
              "cudaMemcpyAsync");
        check(cudaMemcpyAsync(host_hit_.p, row_hit_.p, sizeof(std::int32_t) * rows, cudaMemcpyDeviceToHost, stream_),
              "cudaMemcpyAsync");
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        for (int r = 0; r < rows; ++r) {
            sums.loss += host_loss_.p[r];
            sums.correct += host_hit_.p[r];
        }
        return sums;
    }

    void dropout_forward(const float* x, float* y, float* mask, std::size_t count, float rate,
                         std::uint64_t seed) override
    {
        launch_dropout_forward(x, y, mask, count, rate, seed, stream_);
    }
    void dropout_backward(const float* dy, const float* mask, float* dx, std::size_t count) override
    {
        launch_multiply(dy, mask, dx, count, stream_);
    }

    void batchnorm_forward_train(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                 float* var, float* inv_std, int n, int channels, int inner, float eps) override
    {
        describe_batchnorm(n, channels, inner, eps);
        // cuDNN's running averages are not the model's (the PS keeps those):
        // factor 1 just makes them this batch's, in scratch, zeroed once so
        // that 0 * (what was there) is 0.
        if (running_.n < 2 * std::size_t(channels)) {
            running_.reserve(2 * std::size_t(channels));
            check(cudaMemsetAsync(running_.p, 0, running_.n * sizeof(float), stream_), "cudaMemsetAsync");
        }
        check(cudnnBatchNormalizationForwardTraining(cudnn_.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, bn_x_, x, bn_x_, y,
                                                     bn_param_, gamma, beta, 1.0, running_.p, running_.p + channels,
                                                     eps, mean, inv_std),
              "cudnnBatchNormalizationForwardTraining");
        // The biased variance, as the CPU keeps it, from 1 / sqrt(var + eps).
        launch_variance_from_inv_std(inv_std, var, channels, eps, stream_);
    }
    void batchnorm_forward_eval(const float* x, const float* gamma, const float* beta, const float* moving_mean,
                                const float* moving_var, float* y, int n, int channels, int inner, float eps) override
    {
        describe_batchnorm(n, channels, inner, eps);
        check(cudnnBatchNormalizationForwardInference(cudnn_.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, bn_x_, x, bn_x_,
                                                      y, bn_param_, gamma, beta, moving_mean, moving_var, eps),
              "cudnnBatchNormalizationForwardInference");
    }
    void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* inv_std,
                            const float* dy, float* dx, float* dgamma, float* dbeta, int n, int channels, int inner,
                            float eps) override
    {
        describe_batchnorm(n, channels, inner, eps);
        if (!dx) {  // cuDNN writes dx in any case
            unused_dx_.reserve(std::size_t(n) * channels * inner);
            dx = unused_dx_.p;
        }
        check(cudnnBatchNormalizationBackward(cudnn_.h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, bn_x_, x,
                                              bn_x_, dy, bn_x_, dx, bn_param_, gamma, dgamma, dbeta, eps, mean,
                                              inv_std),
              "cudnnBatchNormalizationBackward");
    }
    void moving_average_delta(const float* batch, const float* moving, float* delta, int count, float momentum) override
    {
        launch_moving_average_delta(batch, moving, delta, count, momentum, stream_);
    }

private:
    // x as n x channels x inner x 1: cuDNN's spatial mode takes statistics
    // per channel over n * inner values, as the CPU does.
    void describe_batchnorm(int n, int channels, int inner, float eps)
    {
        if (double(eps) < CUDNN_BN_MIN_EPSILON)
            throw error("batch normalization's epsilon " + std::to_string(eps) + " is below cuDNN's minimum " +
                        std::to_string(CUDNN_BN_MIN_EPSILON));
        set_nchw(bn_x_, n, channels, inner, 1);
        check(cudnnDeriveBNTensorDescriptor(bn_param_, bn_x_, CUDNN_BATCHNORM_SPATIAL),
              "cudnnDeriveBNTensorDescriptor");
    }

    cudaStream_t stream_;
    precision precision_;
    cudnn_owner cudnn_;
    tensor_desc rows_, bn_x_, bn_param_;
    scratch<float> running_, unused_dx_;
    scratch<double> row_loss_;
    scratch<std::int32_t> row_hit_;
    pinned_vector<double> host_loss_;
    pinned_vector<std::int32_t> host_hit_;
};

}  // namespace

std::unique_ptr<layer_kernels> make_cudnn_layer_kernels(cudaStream_t stream, precision p)
{
    return std::make_unique<cudnn_layer_kernels>(stream, p);
}

}  // namespace pstrain::compute::cuda
