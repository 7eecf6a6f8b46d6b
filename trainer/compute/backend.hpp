// The compute backend interface: memory on the compute device, the few
// operations an MLP needs, and the maker of the layer kernels (layers.hpp).  CPU (BLAS) always; CUDA/cuBLAS when built with it.
// Pointers passed to the operations are device pointers of that backend (on
// the CPU backend, ordinary host memory).  Matrices are row-major.
#pragma once

#include "trainer/compute/precision.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace pstrain::compute {

class layer_kernels;  // layers.hpp

class backend {
public:
    virtual ~backend() = default;

    virtual std::string name() const = 0;
    // True when device pointers are host memory (no copies needed).
    virtual bool host_memory() const = 0;

    virtual void* allocate(std::size_t bytes) = 0;  // zero-filled
    virtual void release(void* p) noexcept = 0;
    // Host memory for what crosses between the device and the network
    // (batches, parameters, gradients): page-locked on a GPU backend.
    virtual void* allocate_host(std::size_t bytes) = 0;  // zero-filled
    virtual void release_host(void* p) noexcept = 0;
    // Page-locks host memory allocated elsewhere (the PS exchange buffers);
    // false when the device cannot (transfers then go through pageable
    // memory, slower but correct).  A no-op on the CPU backend.
    virtual bool pin_host(void* p, std::size_t bytes) = 0;
    virtual void unpin_host(void* p) noexcept = 0;
    virtual void copy_to_device(void* dst, const void* src, std::size_t bytes) = 0;
    virtual void copy_to_host(void* dst, const void* src, std::size_t bytes) = 0;
    virtual void synchronize() = 0;
    // The overlapped step's gradient copies: copy_to_host behind the work
    // queued so far, without waiting for it (a GPU: on a copy stream of its
    // own, after an event of the compute stream, so that the kernels queued
    // next run meanwhile); returns the copy's number, 0, 1, ... since the
    // last wait_copies().  copy_landed(k): copy k is in host memory (the
    // host may read it).  wait_copies(): every copy started has landed.
    // The default copies at once.
    virtual std::size_t start_copy_to_host(void* dst, const void* src, std::size_t bytes)
    {
        copy_to_host(dst, src, bytes);
        return started_copies_++;
    }
    virtual bool copy_landed(std::size_t k) { return k < started_copies_; }
    virtual void wait_copies() { started_copies_ = 0; }

    // y[rows x out] = x[rows x in] * w[in x out] + b[out]
    virtual void linear_forward(const float* x, const float* w, const float* b, float* y, int rows, int in,
                                int out) = 0;
    // dw = x^T dy, db = column sums of dy, dx = dy w^T (dx may be null).
    virtual void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                                 int rows, int in, int out) = 0;
    virtual void relu_forward(const float* z, float* a, std::size_t n) = 0;
    virtual void relu_backward(const float* z, const float* da, float* dz, std::size_t n) = 0;

    struct loss_sums {
        double loss = 0;  // summed over rows
        std::int64_t correct = 0;
    };
    // Softmax cross-entropy over rows; when dlogits is given, writes
    // d(mean loss)/d logits there.  labels are device int32.
    virtual loss_sums softmax_xent(const float* logits, const std::int32_t* labels, float* dlogits, int rows,
                                   int classes) = 0;
    // Squared error (pred - target)^2 summed; dpred = d(mean)/d pred.
    virtual loss_sums squared_error(const float* pred, const float* target, float* dpred, int rows) = 0;

    // The kernels of layer models on this device, sharing its stream.
    // Throws pstrain::error with the fix when this build has none for it.
    virtual std::unique_ptr<layer_kernels> make_layer_kernels() = 0;

private:
    std::size_t started_copies_ = 0;  // the default start_copy_to_host's
};

enum class device_kind { automatic, cpu, cuda };

// Makes the backend for --device and --precision; `threads` > 0 sets the
// BLAS threads.  Throws pstrain::error with the fix when the device cannot
// be used, or cannot multiply at that precision (a CPU without AMX or
// AVX512-BF16, a build without oneDNN, a GPU).  With --device auto and no
// GPU, the chief (and only the chief) says once that it trains on the CPU;
// the reason is logged at debug level.
std::unique_ptr<backend> make_backend(device_kind kind, precision p, int threads, bool chief = true);

// BLAS facts for logs and benchmarks: the OpenBLAS kernel and threads.
std::string blas_description();

// OpenBLAS picks its kernels by CPU model when it is loaded, and one that
// does not know the model falls back to its Prescott (SSE3) kernels:
// Debian 12's OpenBLAS 0.3.21 on a Xeon of family 6 model 207 multiplied
// 3.3x slower than with its Cooperlake kernels.  The kernels to name in
// OPENBLAS_CORETYPE instead, from what the CPU has: "Cooperlake" (AVX-512
// with BF16), "SkylakeX" (AVX-512), "Haswell" (AVX2 and FMA); empty when
// OpenBLAS chose other kernels than Prescott or the CPU has none of those.
std::string openblas_coretype_for(std::string_view chosen_kernels, const cpu_features& cpu);

// openblas_coretype_for this process's OpenBLAS and CPU; empty without
// OpenBLAS, and when OPENBLAS_CORETYPE is set (the user's choice).
std::string openblas_coretype_to_set();

// Where openblas_coretype_to_set names kernels: sets OPENBLAS_CORETYPE (and
// PSTRAIN_OPENBLAS_CORETYPE, which blas_description reports) and executes
// this program again with `argv`, as OpenBLAS reads it only when loaded;
// returns when there is nothing to set or the exec failed.  The new image
// keeps the task's name (/proc/PID/comm) and argv.  For main(), before it
// starts a thread or opens a file.
void run_again_with_the_cpus_openblas_kernels(char** argv);

// RAII device array.
template <typename T>
class device_array {
public:
    device_array() = default;
    device_array(backend& be, std::size_t n) : be_(&be), n_(n), p_(static_cast<T*>(be.allocate(n * sizeof(T)))) {}
    ~device_array() { reset(); }
    device_array(device_array&& o) noexcept : be_(o.be_), n_(o.n_), p_(o.p_)
    {
        o.p_ = nullptr;
        o.n_ = 0;
    }
    device_array& operator=(device_array&& o) noexcept
    {
        if (this != &o) {
            reset();
            be_ = o.be_;
            n_ = o.n_;
            p_ = o.p_;
            o.p_ = nullptr;
            o.n_ = 0;
        }
        return *this;
    }
    device_array(const device_array&) = delete;
    device_array& operator=(const device_array&) = delete;

    T* get() const { return p_; }
    std::size_t size() const { return n_; }
    void reset() noexcept
    {
        if (p_ && be_) be_->release(p_);
        p_ = nullptr;
        n_ = 0;
    }

private:
    backend* be_ = nullptr;
    std::size_t n_ = 0;
    T* p_ = nullptr;
};

// RAII backend::pin_host.
class host_pin {
public:
    host_pin(backend& be, void* p, std::size_t bytes) : be_(be), p_(be.pin_host(p, bytes) ? p : nullptr) {}
    ~host_pin()
    {
        if (p_) be_.unpin_host(p_);
    }
    host_pin(const host_pin&) = delete;
    host_pin& operator=(const host_pin&) = delete;

private:
    backend& be_;
    void* p_;
};

// RAII host array from backend::allocate_host.
template <typename T>
class host_array {
public:
    host_array() = default;
    host_array(backend& be, std::size_t n) : be_(&be), n_(n), p_(static_cast<T*>(be.allocate_host(n * sizeof(T)))) {}
    ~host_array()
    {
        if (p_) be_->release_host(p_);
    }
    host_array(host_array&& o) noexcept : be_(o.be_), n_(o.n_), p_(o.p_)
    {
        o.p_ = nullptr;
        o.n_ = 0;
    }
    host_array& operator=(host_array&& o) noexcept
    {
        if (this != &o) {
            if (p_) be_->release_host(p_);
            be_ = o.be_;
            n_ = o.n_;
            p_ = o.p_;
            o.p_ = nullptr;
            o.n_ = 0;
        }
        return *this;
    }
    host_array(const host_array&) = delete;
    host_array& operator=(const host_array&) = delete;

    T* data() const { return p_; }
    std::size_t size() const { return n_; }
    T& operator[](std::size_t i) const { return p_[i]; }
    operator std::span<T>() const { return {p_, n_}; }
    operator std::span<const T>() const { return {p_, n_}; }

private:
    backend* be_ = nullptr;
    std::size_t n_ = 0;
    T* p_ = nullptr;
};

}  // namespace pstrain::compute
