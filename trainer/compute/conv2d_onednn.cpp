// conv2d through oneDNN: forward, backward data and backward weights
// primitives of the layer's shape at each batch size, in the layouts
// oneDNN prefers (format_tag::any), with reorders from and to the NCHW and
// OIHW tensors the model keeps (reorders are skipped where the layouts agree).
// At bf16 the primitives take bf16 src, weights and diff_dst (the reorders
// round the model's float32 tensors, to nearest even) and write float32
// dst, diff_src, diff_weights and diff_bias, accumulating in float32.
#include "trainer/compute/conv2d.hpp"

#include "pstrain/error.hpp"

#include <map>
#include <memory>

#include <fmt/format.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

namespace pstrain::compute::cpu {

void set_onednn_threads(int threads)
{
    if (threads > 0) omp_set_num_threads(threads);
}

namespace {

using dnnl::memory;
using tag = memory::format_tag;

// A tensor as the model holds it (`user`, its pointer set per call) and as
// the primitive wants it (`prim`: the same memory when the layouts agree).
struct operand {
    memory user, prim;
    bool reorder = false;
    dnnl::reorder to_prim, to_user;  // made once
    operand() = default;
    operand(const memory::desc& want, const memory::desc& plain, const dnnl::engine& eng)
        : user(plain, eng, DNNL_MEMORY_NONE), prim(user)
    {
        if (want != plain) {
            prim = memory(want, eng);
            reorder = true;
            to_prim = dnnl::reorder(user, prim);
            to_user = dnnl::reorder(prim, user);
        }
    }
    void bind(const void* p)
    {
        user.set_data_handle(const_cast<void*>(p));
        if (!reorder) prim = user;
    }
    void in(dnnl::stream& s)
    {
        if (reorder) to_prim.execute(s, user, prim);
    }
    void out(dnnl::stream& s)
    {
        if (reorder) to_user.execute(s, prim, user);
    }
};

class onednn_conv2d final : public conv2d {
public:
    onednn_conv2d(const window2d& w, int filters, precision p)
        : w_(w), filters_(filters), precision_(p), eng_(dnnl::engine::kind::cpu, 0), stream_(eng_)
    {}
    const char* name() const override { return "onednn"; }

    void forward(const float* x, const float* k, const float* b, float* y, int n) override
    {
        auto& p = plan_for(n);
        p.src.bind(x);
        p.wei.bind(k);
        p.dst.bind(y);
        p.bias.set_data_handle(const_cast<float*>(b));
        p.src.in(stream_);
        p.wei.in(stream_);
        p.fwd.execute(stream_, {{DNNL_ARG_SRC, p.src.prim},
                                {DNNL_ARG_WEIGHTS, p.wei.prim},
                                {DNNL_ARG_BIAS, p.bias},
                                {DNNL_ARG_DST, p.dst.prim}});
        p.dst.out(stream_);
        stream_.wait();
    }

    void backward(const float* x, const float* k, const float* dy, float* dx, float* dk, float* db, int n) override
    {
        auto& p = plan_for(n);
        p.src_w.bind(x);
        p.ddst_w.bind(dy);
        p.dwei.bind(dk);
        p.dbias.set_data_handle(db);
        p.src_w.in(stream_);
        p.ddst_w.in(stream_);
        p.bwd_weights.execute(stream_, {{DNNL_ARG_SRC, p.src_w.prim},
                                        {DNNL_ARG_DIFF_DST, p.ddst_w.prim},
                                        {DNNL_ARG_DIFF_WEIGHTS, p.dwei.prim},
                                        {DNNL_ARG_DIFF_BIAS, p.dbias}});
        p.dwei.out(stream_);
        if (dx) {
            p.ddst_d.bind(dy);
            p.wei_d.bind(k);
            p.dsrc.bind(dx);
            p.ddst_d.in(stream_);
            p.wei_d.in(stream_);
            p.bwd_data.execute(stream_, {{DNNL_ARG_DIFF_DST, p.ddst_d.prim},
                                         {DNNL_ARG_WEIGHTS, p.wei_d.prim},
                                         {DNNL_ARG_DIFF_SRC, p.dsrc.prim}});
            p.dsrc.out(stream_);
        }
        stream_.wait();
    }

private:
    struct plan {
        dnnl::convolution_forward fwd;
        dnnl::convolution_backward_data bwd_data;
        dnnl::convolution_backward_weights bwd_weights;
        operand src, wei, dst, src_w, ddst_w, dwei, ddst_d, wei_d, dsrc;
        memory bias, dbias;
    };

    plan& plan_for(int n)
    {
        auto it = plans_.find(n);
        if (it != plans_.end()) return it->second;
        const auto f32 = memory::data_type::f32;
        // The operands of the products: src, weights and diff_dst.
        const auto mul = precision_ == precision::bf16 ? memory::data_type::bf16 : f32;
        const memory::dim c = w_.channels, h = w_.height, wd = w_.width, o = filters_;
        const memory::dims src_d{n, c, h, wd}, wei_d{o, c, w_.kh, w_.kw}, bias_d{o}, dst_d{n, o, w_.out_h, w_.out_w};
        const memory::dims strides{w_.sh, w_.sw}, pad_l{w_.pad_top, w_.pad_left};
        // "same" puts the odd row or column of padding at the bottom or right.
        const memory::dims pad_r{(w_.out_h - 1) * w_.sh + w_.kh - w_.height - w_.pad_top,
                                 (w_.out_w - 1) * w_.sw + w_.kw - w_.width - w_.pad_left};
        const memory::desc src_any(src_d, mul, tag::any), wei_any(wei_d, mul, tag::any), dst_any(dst_d, f32, tag::any),
            ddst_any(dst_d, mul, tag::any), dsrc_any(src_d, f32, tag::any), dwei_any(wei_d, f32, tag::any);
        const memory::desc src_plain(src_d, f32, tag::nchw), wei_plain(wei_d, f32, tag::oihw),
            dst_plain(dst_d, f32, tag::nchw), bias_plain(bias_d, f32, tag::x);
        try {
            dnnl::convolution_forward::primitive_desc fwd(
                dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                                src_any, wei_any, bias_plain, dst_any, strides, pad_l, pad_r),
                eng_);
            dnnl::convolution_backward_data::primitive_desc bwd_data(
                dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, dsrc_any, wei_any, ddst_any,
                                                      strides, pad_l, pad_r),
                eng_, fwd);
            dnnl::convolution_backward_weights::primitive_desc bwd_weights(
                dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src_any, dwei_any,
                                                         bias_plain, ddst_any, strides, pad_l, pad_r),
                eng_, fwd);
            plan p{dnnl::convolution_forward(fwd),
                   dnnl::convolution_backward_data(bwd_data),
                   dnnl::convolution_backward_weights(bwd_weights),
                   operand(fwd.src_desc(), src_plain, eng_),
                   operand(fwd.weights_desc(), wei_plain, eng_),
                   operand(fwd.dst_desc(), dst_plain, eng_),
                   operand(bwd_weights.src_desc(), src_plain, eng_),
                   operand(bwd_weights.diff_dst_desc(), dst_plain, eng_),
                   operand(bwd_weights.diff_weights_desc(), wei_plain, eng_),
                   operand(bwd_data.diff_dst_desc(), dst_plain, eng_),
                   operand(bwd_data.weights_desc(), wei_plain, eng_),
                   operand(bwd_data.diff_src_desc(), src_plain, eng_),
                   memory(bias_plain, eng_, DNNL_MEMORY_NONE),
                   memory(bias_plain, eng_, DNNL_MEMORY_NONE)};
            return plans_.emplace(n, std::move(p)).first->second;
        } catch (const dnnl::error& e) {
            throw error(fmt::format(
                "oneDNN cannot make a {}x{} convolution of {} channels into {} filters: {} (PSTRAIN_CONV=im2col "
                "uses pstrain's own)",
                w_.kh, w_.kw, w_.channels, filters_, e.what()));
        }
    }

    window2d w_;
    int filters_;
    precision precision_;
    dnnl::engine eng_;
    dnnl::stream stream_;
    std::map<int, plan> plans_;
};

}  // namespace

std::unique_ptr<conv2d> make_onednn_conv2d(const window2d& w, int filters, precision p)
{
    return std::make_unique<onednn_conv2d>(w, filters, p);
}

}  // namespace pstrain::compute::cpu
