// matmul_bf16 through oneDNN: one matmul primitive per product shape
// (forward x w + b, backward x^T dy and dy w^T), its transposed operands
// described by strides over the row-major buffers, so nothing is copied but
// the rounding to bf16.
#include "trainer/compute/matmul_bf16.hpp"

#include "pstrain/error.hpp"
#include "trainer/compute/bf16.hpp"

#include <compare>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>

namespace pstrain::compute::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// C[m x n] (float32) = op(A)[m x k] * op(B)[k x n] (+ bias[n]), A and B
// bf16; a transposed operand is stored row-major as its transpose.
struct product_shape {
    int m, n, k;
    bool a_transposed, b_transposed, bias;
    auto operator<=>(const product_shape&) const = default;
};

class onednn_matmul_bf16 final : public matmul_bf16 {
public:
    onednn_matmul_bf16() : eng_(dnnl::engine::kind::cpu, 0), stream_(eng_) {}

    void linear_forward(const float* x, const float* w, const float* b, float* y, int rows, int in, int out) override
    {
        const bf16* xb = rounded(x, std::size_t(rows) * in, x_);
        const bf16* wb = rounded(w, std::size_t(in) * out, w_);
        run({rows, out, in, false, false, true}, xb, wb, b, y);
    }

    void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, int rows, int in,
                         int out) override
    {
        const bf16* xb = rounded(x, std::size_t(rows) * in, x_);
        const bf16* dyb = rounded(dy, std::size_t(rows) * out, dy_);
        run({in, out, rows, true, false, false}, xb, dyb, nullptr, dw);  // dw = x^T dy
        if (!dx) return;
        const bf16* wb = rounded(w, std::size_t(in) * out, w_);
        run({rows, in, out, false, true, false}, dyb, wb, nullptr, dx);  // dx = dy w^T
    }

private:
    struct product {
        dnnl::matmul prim;
        memory a, b, bias, c;
    };

    static const bf16* rounded(const float* src, std::size_t count, std::vector<bf16>& buffer)
    {
        if (buffer.size() < count) buffer.resize(count);
        to_bf16(src, buffer.data(), count);
        return buffer.data();
    }

    void run(const product_shape& s, const bf16* a, const bf16* b, const float* bias, float* c)
    {
        auto& p = product_for(s);
        p.a.set_data_handle(const_cast<bf16*>(a));
        p.b.set_data_handle(const_cast<bf16*>(b));
        p.c.set_data_handle(c);
        if (s.bias) {
            p.bias.set_data_handle(const_cast<float*>(bias));
            p.prim.execute(
                stream_, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_BIAS, p.bias}, {DNNL_ARG_DST, p.c}});
        } else {
            p.prim.execute(stream_, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
        }
        stream_.wait();
    }

    product& product_for(const product_shape& s)
    {
        if (auto it = products_.find(s); it != products_.end()) return it->second;
        const auto bf = memory::data_type::bf16, f32 = memory::data_type::f32;
        const memory::desc a({s.m, s.k}, bf, s.a_transposed ? tag::ba : tag::ab);
        const memory::desc b({s.k, s.n}, bf, s.b_transposed ? tag::ba : tag::ab);
        const memory::desc bias = s.bias ? memory::desc({1, s.n}, f32, tag::ab) : memory::desc();
        const memory::desc c({s.m, s.n}, f32, tag::ab);
        try {
            const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, bias, c), eng_);
            product p{dnnl::matmul(pd), memory(a, eng_, DNNL_MEMORY_NONE), memory(b, eng_, DNNL_MEMORY_NONE),
                      s.bias ? memory(bias, eng_, DNNL_MEMORY_NONE) : memory(), memory(c, eng_, DNNL_MEMORY_NONE)};
            return products_.emplace(s, std::move(p)).first->second;
        } catch (const dnnl::error& e) {
            throw error(fmt::format("oneDNN cannot make a bf16 matrix product of {}x{} by {}x{}: {} (--precision "
                                    "fp32 uses OpenBLAS)",
                                    s.m, s.k, s.k, s.n, e.what()));
        }
    }

    dnnl::engine eng_;
    dnnl::stream stream_;
    std::map<product_shape, product> products_;
    std::vector<bf16> x_, w_, dy_;  // the operands rounded to bf16
};

}  // namespace

std::unique_ptr<matmul_bf16> make_matmul_bf16() { return std::make_unique<onednn_matmul_bf16>(); }

}  // namespace pstrain::compute::cpu
