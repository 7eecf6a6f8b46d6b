// The CUDA backend: cuBLAS for the dense layers (row-major handled once, in
// gemm_row_major), the kernels of this folder for the rest, one stream,
// device and pinned buffers owned by RAII types.  At --precision bf16 the
// dense layers' operands are rounded to bf16 (bf16_kernels.cu) in buffers
// the backend keeps, and cublasGemmEx multiplies them on the tensor cores,
// accumulating and writing float32, as oneDNN's matmul does on the CPU; the
// bias, its gradient and everything else stay float32.
#include "trainer/compute/cuda_backend.hpp"

#include "config.h"
#include "trainer/compute/cuda/buffers.cuh"
#include "trainer/compute/cuda/check.cuh"
#include "trainer/compute/cuda/kernels.cuh"
#ifdef HAVE_CUDNN
#include "trainer/compute/cuda/cudnn_layers.cuh"

#include <cudnn.h>
#endif

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
// (no fmt here: its consteval format strings do not build under nvcc)

namespace pstrain::compute {
namespace cuda {
namespace {

// Row-major C[m x n] = op(A) op(B): cuBLAS is column-major, and a row-major
// matrix is its transpose in column-major, so C^T = op(B)^T op(A)^T is
// computed by swapping the operands.
void gemm_row_major(cublasHandle_t h, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc)
{
    check(cublasSgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                      ldb, a, lda, &beta, c, ldc),
          "cublasSgemm");
}

// The same product at bf16: op(A) and op(B) are bf16 bits (a16, b16), the
// sums and C float32 (CUBLAS_COMPUTE_32F: no reduced-precision reductions).
void gemm_row_major_bf16(cublasHandle_t h, bool trans_a, bool trans_b, int m, int n, int k, const std::uint16_t* a,
                         int lda, const std::uint16_t* b, int ldb, float* c, int ldc)
{
    const float alpha = 1.0f, beta = 0.0f;
    check(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                       CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx(bf16)");
}

struct stream_owner {
    cudaStream_t s = nullptr;
    stream_owner() { check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
    ~stream_owner()
    {
        if (s) cudaStreamDestroy(s);
    }
};

// Events, created once and reused: the overlapped step's gradient copies
// wait on one (recorded on the compute stream) and record one each when
// they land.
struct event_owner {
    cudaEvent_t e = nullptr;
    event_owner() { check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"); }
    event_owner(const event_owner&) = delete;
    event_owner& operator=(const event_owner&) = delete;
    ~event_owner()
    {
        if (e) cudaEventDestroy(e);
    }
};

struct cublas_owner {
    cublasHandle_t h = nullptr;
    explicit cublas_owner(cudaStream_t s)
    {
        check(cublasCreate(&h), "cublasCreate");
        check(cublasSetStream(h, s), "cublasSetStream");
        // FP32 products in FP32, said explicitly rather than left to the
        // default: no TF32 tensor cores, no reduced-precision reductions,
        // as the CPU computes them.  (bf16 products ask for the tensor cores
        // per call, cublasGemmEx with CUBLAS_COMPUTE_32F.)
        check(cublasSetMathMode(
                  h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
              "cublasSetMathMode");
    }
    ~cublas_owner()
    {
        if (h) cublasDestroy(h);
    }
};

// "driver 13.0, runtime 13.0, cuBLAS 13.1.0, cuDNN 9.14.0": the libraries
// this process runs with (which may differ from those it was built with).
std::string library_versions(cublasHandle_t h)
{
    const auto dotted = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
    int driver = 0, runtime = 0, blas = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    cublasGetVersion(h, &blas);
    std::string out = "driver " + dotted(driver) + ", runtime " + dotted(runtime) + ", cuBLAS " +
                      std::to_string(blas / 10000) + "." + std::to_string(blas / 100 % 100) + "." +
                      std::to_string(blas % 100);
#ifdef HAVE_CUDNN
    const auto dnn = cudnnGetVersion();  // 9.14.0 is 91400
    out += ", cuDNN " + std::to_string(dnn / 10000) + "." + std::to_string(dnn / 100 % 100) + "." +
           std::to_string(dnn % 100);
#endif
    return out;
}

class cuda_backend final : public backend {
public:
    explicit cuda_backend(precision p) : precision_(p), blas_(stream_.s)
    {
        cudaDeviceProp prop{};
        check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
        if (p == precision::bf16) {
            if (const auto refusal = cuda_bf16_refusal(prop.name, prop.major, prop.minor); !refusal.empty())
                throw error(refusal);
        }
        const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
        name_ = std::string("cuda (") + prop.name + ", CUDA_VISIBLE_DEVICES=" + (visible ? visible : "unset") + "; " +
                library_versions(blas_.h);
        if (p == precision::bf16)
            name_ += "; bf16 matrix products on tensor cores, sm_" + std::to_string(prop.major) +
                     std::to_string(prop.minor) + ": cuBLAS GEMM and cuDNN convolution";
        name_ += ")";
    }

    std::string name() const override { return name_; }
    bool host_memory() const override { return false; }

    void* allocate(std::size_t bytes) override
    {
        void* p = nullptr;
        check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
        check(cudaMemsetAsync(p, 0, bytes, stream_.s), "cudaMemsetAsync");
        return p;
    }
    void release(void* p) noexcept override { cudaFree(p); }
    void* allocate_host(std::size_t bytes) override
    {
        void* p = nullptr;
        check(cudaMallocHost(&p, bytes ? bytes : 1), "cudaMallocHost");
        std::memset(p, 0, bytes);
        return p;
    }
    void release_host(void* p) noexcept override { cudaFreeHost(p); }
    bool pin_host(void* p, std::size_t bytes) override
    {
        if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) == cudaSuccess) return true;
        cudaGetLastError();  // clear it: pageable memory works, only slower
        return false;
    }
    void unpin_host(void* p) noexcept override { cudaHostUnregister(p); }
    void copy_to_device(void* dst, const void* src, std::size_t bytes) override
    {
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_.s), "cudaMemcpyAsync(host to device)");
    }
    void copy_to_host(void* dst, const void* src, std::size_t bytes) override
    {
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_.s), "cudaMemcpyAsync(device to host)");
        synchronize();
    }
    void synchronize() override { check(cudaStreamSynchronize(stream_.s), "cudaStreamSynchronize"); }
    // On the copy stream, behind an event of the compute stream: the
    // kernels queued next run while the gradient comes to the (pinned)
    // host buffer.
    std::size_t start_copy_to_host(void* dst, const void* src, std::size_t bytes) override
    {
        const std::size_t k = started_;
        if (k == landed_.size()) landed_.push_back(std::make_unique<event_owner>());
        check(cudaEventRecord(computed_.e, stream_.s), "cudaEventRecord");
        check(cudaStreamWaitEvent(copies_.s, computed_.e, 0), "cudaStreamWaitEvent");
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, copies_.s), "cudaMemcpyAsync(device to host)");
        check(cudaEventRecord(landed_[k]->e, copies_.s), "cudaEventRecord");
        ++started_;
        return k;
    }
    bool copy_landed(std::size_t k) override
    {
        if (k >= started_) return false;
        const cudaError_t e = cudaEventQuery(landed_[k]->e);
        if (e == cudaErrorNotReady) return false;
        check(e, "cudaEventQuery");
        return true;
    }
    void wait_copies() override
    {
        check(cudaStreamSynchronize(copies_.s), "cudaStreamSynchronize(copies)");
        started_ = 0;
    }

    void linear_forward(const float* x, const float* w, const float* b, float* y, int rows, int in, int out) override
    {
        if (precision_ == precision::bf16) {
            const std::uint16_t* x16 = rounded(x, std::size_t(rows) * in, x16_);
            const std::uint16_t* w16 = rounded(w, std::size_t(in) * out, w16_);
            gemm_row_major_bf16(blas_.h, false, false, rows, out, in, x16, in, w16, out, y, out);
        } else {
            gemm_row_major(blas_.h, false, false, rows, out, in, 1.0f, x, in, w, out, 0.0f, y, out);
        }
        launch_add_bias(y, b, rows, out, stream_.s);
    }

    void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, int rows,
                         int in, int out) override
    {
        launch_column_sum(dy, db, rows, out, stream_.s);
        if (precision_ == precision::bf16) {
            const std::uint16_t* x16 = rounded(x, std::size_t(rows) * in, x16_);
            const std::uint16_t* dy16 = rounded(dy, std::size_t(rows) * out, dy16_);
            gemm_row_major_bf16(blas_.h, true, false, in, out, rows, x16, in, dy16, out, dw, out);
            if (dx) {
                const std::uint16_t* w16 = rounded(w, std::size_t(in) * out, w16_);
                gemm_row_major_bf16(blas_.h, false, true, rows, in, out, dy16, out, w16, out, dx, in);
            }
            return;
        }
        gemm_row_major(blas_.h, true, false, in, out, rows, 1.0f, x, in, dy, out, 0.0f, dw, out);
        if (dx) gemm_row_major(blas_.h, false, true, rows, in, out, 1.0f, dy, out, w, out, 0.0f, dx, in);
    }

    void relu_forward(const float* z, float* a, std::size_t n) override { launch_relu_forward(z, a, n, stream_.s); }
    void relu_backward(const float* z, const float* da, float* dz, std::size_t n) override
    {
        launch_relu_backward(z, da, dz, n, stream_.s);
    }

    loss_sums softmax_xent(const float* logits, const std::int32_t* labels, float* dlogits, int rows,
                           int classes) override
    {
        reserve_rows(rows);
        launch_softmax_xent(logits, labels, dlogits, row_loss_.p, row_hit_.p, rows, classes, stream_.s);
        return sum_rows(rows, true);
    }

    loss_sums squared_error(const float* pred, const float* target, float* dpred, int rows) override
    {
        reserve_rows(rows);
        launch_squared_error(pred, target, dpred, row_loss_.p, rows, stream_.s);
        return sum_rows(rows, false);
    }

    std::unique_ptr<layer_kernels> make_layer_kernels() override
    {
#ifdef HAVE_CUDNN
        return make_cudnn_layer_kernels(stream_.s, precision_);
#else
        throw error(
            "layer models (--model with conv2d, pooling or batchnorm layers) on --device cuda need cuDNN, and this "
            "pstrain was built without it: install cuDNN beside the CUDA toolkit and rebuild, or use --device cpu");
#endif
    }

private:
    // `src` rounded to bf16 in `buffer`, which grows to the largest operand
    // and is reused; ordered on the stream before the product that reads it.
    const std::uint16_t* rounded(const float* src, std::size_t n, scratch<std::uint16_t>& buffer)
    {
        buffer.reserve(n);
        launch_to_bf16(src, buffer.p, n, stream_.s);
        return buffer.p;
    }

    // Grows once to the largest batch seen; no allocation in steady state.
    void reserve_rows(int rows)
    {
        row_loss_.reserve(std::size_t(rows));
        row_hit_.reserve(std::size_t(rows));
        host_loss_.reserve(std::size_t(rows));
        host_hit_.reserve(std::size_t(rows));
    }

    loss_sums sum_rows(int rows, bool hits)
    {
        check(cudaMemcpyAsync(host_loss_.p, row_loss_.p, sizeof(float) * rows, cudaMemcpyDeviceToHost, stream_.s),
              "cudaMemcpyAsync");
        if (hits)
            check(cudaMemcpyAsync(host_hit_.p, row_hit_.p, sizeof(std::int32_t) * rows, cudaMemcpyDeviceToHost,
                                  stream_.s),
                  "cudaMemcpyAsync");
        synchronize();
        loss_sums sums;
        for (int r = 0; r < rows; ++r) {
            sums.loss += host_loss_.p[r];
            if (hits) sums.correct += host_hit_.p[r];
        }
        return sums;
    }

    precision precision_;
    stream_owner stream_;
    stream_owner copies_;  // the overlapped step's gradient copies to the host
    event_owner computed_;
    std::vector<std::unique_ptr<event_owner>> landed_;  // one per copy of a step
    std::size_t started_ = 0;                           // copies since wait_copies
    cublas_owner blas_;
    scratch<std::uint16_t> x16_, w16_, dy16_;  // bf16 operands
    std::string name_;
    scratch<float> row_loss_;
    scratch<std::int32_t> row_hit_;
    pinned_vector<float> host_loss_;
    pinned_vector<std::int32_t> host_hit_;
};

}  // namespace
}  // namespace cuda

bool cuda_device_available(std::string& why)
{
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc == cudaSuccess && count > 0) return true;
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (visible && !*visible)
        why = "no CUDA device visible: CUDA_VISIBLE_DEVICES is empty (as for ps tasks); run workers with --gres=gpu:N";
    else
        why = std::string("no CUDA device visible (") + (rc == cudaSuccess ? "no device" : cudaGetErrorString(rc)) +
              "): run on a GPU node with --gres=gpu:N, or use --device cpu";
    return false;
}

std::unique_ptr<backend> make_cuda_backend(precision p) { return std::make_unique<cuda::cuda_backend>(p); }

}  // namespace pstrain::compute

extern "C" __attribute__((visibility("default"))) const pstrain::compute::cuda_module* pstrain_cuda_module()
{
    static const pstrain::compute::cuda_module module{PACKAGE_VERSION, pstrain::compute::cuda_device_available,
                                                      pstrain::compute::make_cuda_backend};
    return &module;
}
