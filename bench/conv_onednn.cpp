// conv-onednn: forward + backward (data and weights) milliseconds of the cnn
// preset's two convolutions at batch 100, one thread, through oneDNN
// (Debian's libdnnl-dev, what PyTorch's CPU backend uses) beside pstrain's
// im2col + OpenBLAS sgemm (trainer/compute/cpu_layers).  oneDNN picks its own
// layouts (format_tag::any); the reorders from and to the NCHW/OIHW tensors
// pstrain keeps are timed with it, as a drop-in backend would pay them.
// One JSON line; medians of --repeat passes after 3 warm-up passes, the two
// sides alternating.  Built by bench/conv-onednn (not part of the build:
// oneDNN is not a dependency unless it is measured faster).
#include "trainer/compute/cpu_layers.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

using namespace dnnl;
namespace cpu = pstrain::compute::cpu;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 0.1f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

double time_ms(const std::function<void()>& f)
{
    auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// A user tensor (plain layout) and the primitive's (its chosen layout), with a reorder when they differ.
struct operand {
    memory user, prim;
    bool reorder = false;
    operand(const memory::desc& want, const memory::desc& plain, void* data, const engine& eng)
        : user(plain, eng, data), prim(user)
    {
        if (want != plain) {
            prim = memory(want, eng);
            reorder = true;
        }
    }
    void in(stream& s)
    {
        if (reorder) dnnl::reorder(user, prim).execute(s, user, prim);
    }
    void out(stream& s)
    {
        if (reorder) dnnl::reorder(prim, user).execute(s, prim, user);
    }
};

}  // namespace

int main(int argc, char** argv)
{
    int repeat = 11;
    if (argc == 3 && std::strcmp(argv[1], "--repeat") == 0) repeat = std::atoi(argv[2]);
    if (repeat < 1) {
        std::fprintf(stderr, "conv-onednn: --repeat takes a whole number >= 1\n");
        return 2;
    }
    engine eng(engine::kind::cpu, 0);
    stream s(eng);
    std::printf("{");
    const int n = 100;
    for (int which = 0; which < 2; ++which) {
        const int c = which == 0 ? 1 : 32, hw = which == 0 ? 28 : 14, o = which == 0 ? 32 : 64, kk = 5;
        pstrain::compute::window2d w{c, hw, hw, kk, kk, 1, 1};
        pstrain::compute::resolve_padding(w, true);
        auto x = random_floats(std::size_t(n) * c * hw * hw, 1), k = random_floats(std::size_t(o) * c * kk * kk, 2);
        auto b = random_floats(o, 3), dy = random_floats(std::size_t(n) * o * hw * hw, 4);
        std::vector<float> y(dy.size()), dx(x.size()), dk(k.size()), db(o), ws(cpu::conv2d_workspace(w, o, n));

        using tag = memory::format_tag;
        const auto f32 = memory::data_type::f32;
        memory::dims src_d{n, c, hw, hw}, wei_d{o, c, kk, kk}, bias_d{o}, dst_d{n, o, hw, hw}, strides{1, 1}, pad{2, 2};
        memory::desc src_any(src_d, f32, tag::any), wei_any(wei_d, f32, tag::any), dst_any(dst_d, f32, tag::any);
        memory::desc src_plain(src_d, f32, tag::nchw), wei_plain(wei_d, f32, tag::oihw),
            dst_plain(dst_d, f32, tag::nchw), bias_plain(bias_d, f32, tag::x);
        convolution_forward::primitive_desc fwd(
            convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, src_any, wei_any,
                                      bias_plain, dst_any, strides, pad, pad),
            eng);
        convolution_backward_data::primitive_desc bwd_data(
            convolution_backward_data::desc(algorithm::convolution_direct, src_any, wei_any, dst_any, strides, pad,
                                            pad),
            eng, fwd);
        convolution_backward_weights::primitive_desc bwd_weights(
            convolution_backward_weights::desc(algorithm::convolution_direct, src_any, wei_any, bias_plain, dst_any,
                                               strides, pad, pad),
            eng, fwd);
        operand src(fwd.src_desc(), src_plain, x.data(), eng), wei(fwd.weights_desc(), wei_plain, k.data(), eng),
            dst(fwd.dst_desc(), dst_plain, y.data(), eng);
        operand ddst(bwd_data.diff_dst_desc(), dst_plain, dy.data(), eng),
            dsrc(bwd_data.diff_src_desc(), src_plain, dx.data(), eng),
            wei_b(bwd_data.weights_desc(), wei_plain, k.data(), eng);
        operand src_w(bwd_weights.src_desc(), src_plain, x.data(), eng),
            ddst_w(bwd_weights.diff_dst_desc(), dst_plain, dy.data(), eng),
            dwei(bwd_weights.diff_weights_desc(), wei_plain, dk.data(), eng);
        memory bias_m(bias_plain, eng, b.data()), dbias_m(bias_plain, eng, db.data());
        convolution_forward conv_fwd(fwd);
        convolution_backward_data conv_bwd_data(bwd_data);
        convolution_backward_weights conv_bwd_weights(bwd_weights);

        auto onednn = [&] {
            src.in(s);
            wei.in(s);
            conv_fwd.execute(s, {{DNNL_ARG_SRC, src.prim},
                                 {DNNL_ARG_WEIGHTS, wei.prim},
                                 {DNNL_ARG_BIAS, bias_m},
                                 {DNNL_ARG_DST, dst.prim}});
            dst.out(s);
            ddst.in(s);
            src_w.in(s);
            conv_bwd_weights.execute(s, {{DNNL_ARG_SRC, src_w.prim},
                                         {DNNL_ARG_DIFF_DST, ddst_w.prim},
                                         {DNNL_ARG_DIFF_WEIGHTS, dwei.prim},
                                         {DNNL_ARG_DIFF_BIAS, dbias_m}});
            dwei.out(s);
            if (which == 1) {  // the first layer computes no dx, as in training
                wei_b.in(s);
                conv_bwd_data.execute(
                    s,
                    {{DNNL_ARG_DIFF_DST, ddst.prim}, {DNNL_ARG_WEIGHTS, wei_b.prim}, {DNNL_ARG_DIFF_SRC, dsrc.prim}});
                dsrc.out(s);
            }
            s.wait();
        };
        // ddst_w shares dy with ddst: the same reorder, done once above when layouts match.
        auto gemm = [&] {
            cpu::conv2d_forward(x.data(), k.data(), b.data(), y.data(), n, o, w, ws.data());
            cpu::conv2d_backward(x.data(), k.data(), dy.data(), which == 1 ? dx.data() : nullptr, dk.data(), db.data(),
                                 n, o, w, ws.data());
        };
        for (int i = 0; i < 3; ++i) {
            onednn();
            gemm();
        }
        std::vector<double> a, g;
        for (int i = 0; i < repeat; ++i) {
            a.push_back(time_ms(onednn));
            g.push_back(time_ms(gemm));
        }
        std::printf("%s\"conv%d_onednn_ms\":%.3f,\"conv%d_im2col_sgemm_ms\":%.3f", which ? "," : "", which + 1,
                    median(a), which + 1, median(g));
    }
    std::printf("}\n");
    return 0;
}
