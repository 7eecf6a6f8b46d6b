// A backend that hands every call to the CPU backend: tests derive from it
// and change the one thing they test (where memory lives, a wrong element).
#pragma once

#include "trainer/compute/cpu_backend.hpp"
#include "trainer/compute/layers.hpp"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pstrain::testing {

class forwarding_backend : public compute::backend {
public:
    std::string name() const override { return cpu_.name(); }
    bool host_memory() const override { return true; }
    void* allocate(std::size_t bytes) override { return cpu_.allocate(bytes); }
    void release(void* p) noexcept override { cpu_.release(p); }
    void* allocate_host(std::size_t bytes) override { return cpu_.allocate_host(bytes); }
    void release_host(void* p) noexcept override { cpu_.release_host(p); }
    bool pin_host(void* p, std::size_t bytes) override { return cpu_.pin_host(p, bytes); }
    void unpin_host(void* p) noexcept override { cpu_.unpin_host(p); }
    void copy_to_device(void* dst, const void* src, std::size_t bytes) override
    {
        cpu_.copy_to_device(dst, src, bytes);
    }
    void copy_to_host(void* dst, const void* src, std::size_t bytes) override { cpu_.copy_to_host(dst, src, bytes); }
    void synchronize() override {}
    void linear_forward(const float* x, const float* w, const float* b, float* y, int rows, int in, int out) override
    {
        cpu_.linear_forward(x, w, b, y, rows, in, out);
    }
    void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, int rows,
                         int in, int out) override
    {
        cpu_.linear_backward(x, w, dy, dx, dw, db, rows, in, out);
    }
    void relu_forward(const float* z, float* a, std::size_t n) override { cpu_.relu_forward(z, a, n); }
    void relu_backward(const float* z, const float* da, float* dz, std::size_t n) override
    {
        cpu_.relu_backward(z, da, dz, n);
    }
    loss_sums softmax_xent(const float* logits, const std::int32_t* labels, float* dlogits, int rows,
                           int classes) override
    {
        return cpu_.softmax_xent(logits, labels, dlogits, rows, classes);
    }
    loss_sums squared_error(const float* pred, const float* target, float* dpred, int rows) override
    {
        return cpu_.squared_error(pred, target, dpred, rows);
    }
    std::unique_ptr<compute::layer_kernels> make_layer_kernels() override { return cpu_.make_layer_kernels(); }

protected:
    compute::cpu_backend cpu_{1};
};

// A backend whose memory the model must treat as a device's: it runs the
// CPU's kernels, but its buffers are not the caller's spans, so a model that
// forgot to copy the parameters in or the gradients out, or wrote the batch
// into host memory the kernels never read, gives other numbers than on the
// CPU backend.  The path a GPU takes, checked without one.
class device_memory_backend final : public forwarding_backend {
public:
    std::string name() const override { return "device memory on the cpu"; }
    bool host_memory() const override { return false; }
    void* allocate(std::size_t bytes) override
    {
        void* p = cpu_.allocate(bytes);
        // Not zero, as device memory need not be: what the model reads
        // before writing shows.
        std::memset(p, 0x7f, bytes);
        return p;
    }
    void copy_to_device(void* dst, const void* src, std::size_t bytes) override
    {
        ++copies_in;
        std::memcpy(dst, src, bytes);
    }
    void copy_to_host(void* dst, const void* src, std::size_t bytes) override
    {
        ++copies_out;
        std::memcpy(dst, src, bytes);
    }
    // The overlapped step's copies land late, as a copy stream's do: each
    // one on the second copy_landed() that asks for it (or at
    // wait_copies), with what the device held when it started.
    std::size_t start_copy_to_host(void* dst, const void* src, std::size_t bytes) override
    {
        ++copies_out;
        const auto* b = static_cast<const unsigned char*>(src);
        in_flight_.push_back({dst, std::vector<unsigned char>(b, b + bytes)});
        return in_flight_.size() - 1;
    }
    bool copy_landed(std::size_t k) override
    {
        auto& c = in_flight_.at(k);
        if (!std::exchange(c.asked, true)) return false;
        land(c);
        return true;
    }
    void wait_copies() override
    {
        for (auto& c : in_flight_) land(c);
        in_flight_.clear();
    }

    int copies_in = 0, copies_out = 0;

private:
    struct copy {
        void* dst;
        std::vector<unsigned char> bytes;
        bool asked = false, landed = false;
    };
    static void land(copy& c)
    {
        if (!std::exchange(c.landed, true)) std::memcpy(c.dst, c.bytes.data(), c.bytes.size());
    }
    std::vector<copy> in_flight_;
};

}  // namespace pstrain::testing
