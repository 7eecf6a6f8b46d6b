// bf16-limit: what this machine's bf16 matrix unit can do through oneDNN, as
// the ceiling for a --precision bf16 step (sgemm-limit's counterpart).  Times:
//   - the matrix products of one training step of a 784-H1-...-10 MLP at
//     batch B (forward X.W + b, backward dW = X^T.dY and dX = dY.W^T, the
//     input layer's dX skipped) through the trainer's own bf16 products
//     (trainer/compute/matmul_bf16.hpp: the rounding to bf16 included);
//   - one large square product (N x N x N) of bf16 operands into float32,
//     oneDNN's matmul alone, operands already bf16: the unit's peak.
// Prints one JSON line: the step's GFLOP, its products' best time, the
// samples/s a step made of nothing but those products would reach
// (products_only_samples_per_sec), both GFLOP/s figures and oneDNN's
// kernel for the square product.  One thread unless OMP_NUM_THREADS says.
//
//   bf16-limit [--hidden 1024[,1024...]] [--batch 100] [--repeat 200] [--square 1024]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "bench/mlp_step.hpp"
#include "trainer/compute/bf16.hpp"
#include "trainer/compute/matmul_bf16.hpp"

using namespace pstrain::bench;

namespace {

// The square product's best of 5, in seconds, and the kernel oneDNN chose.
std::pair<double, std::string> square_bf16(int n, std::mt19937& rng)
{
    using dnnl::memory;
    const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(eng);
    const memory::desc ab({n, n}, memory::data_type::bf16, memory::format_tag::ab);
    const memory::desc c({n, n}, memory::data_type::f32, memory::format_tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ab, ab, c), eng);
    const dnnl::matmul prim(pd);
    const auto count = std::size_t(n) * n;
    const auto af = random_floats(count, rng), bf = random_floats(count, rng);
    std::vector<pstrain::compute::bf16> a(count), b(count);
    pstrain::compute::to_bf16(af.data(), a.data(), count);
    pstrain::compute::to_bf16(bf.data(), b.data(), count);
    std::vector<float> out(count);
    memory am(ab, eng, a.data()), bm(ab, eng, b.data()), cm(c, eng, out.data());
    double best = 1e30;
    for (int round = 0; round < 6; ++round) {  // the first makes the kernel's buffers
        const auto t = std::chrono::steady_clock::now();
        prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
        stream.wait();
        if (round > 0)
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
    }
    return {best, pd.impl_info_str()};
}

}  // namespace

int main(int argc, char** argv)
{
    const auto o = parse_mlp_step_options(argc, argv, "bf16-limit", "1024,1024");
    const int batch = o.batch, square = o.square;
    std::string hidden = o.hidden;
    std::mt19937 rng(1);
    double flop = 0;
    auto layers = make_mlp_layers(hidden, batch, rng, flop);
    const auto products = pstrain::compute::cpu::make_matmul_bf16();
    auto step = [&] {
        for (auto& L : layers)
            products->linear_forward(L.x.data(), L.w.data(), L.b.data(), L.y.data(), batch, L.in, L.out);
        for (std::size_t l = layers.size(); l-- > 0;) {
            auto& L = layers[l];
            products->linear_backward(L.x.data(), L.w.data(), L.dy.data(), l > 0 ? L.dx.data() : nullptr, L.dw.data(),
                                      batch, L.in, L.out);
        }
    };
    const double best = best_seconds_per_step(step, o.repeat);
    const auto [best_square, kernel] = square_bf16(square, rng);
    std::replace(hidden.begin(), hidden.end(), ',', '-');
    std::printf("{\"model\":\"784-%s-10\",\"batch\":%d,\"step_gflop\":%.6f,\"step_products_seconds\":%.9f,"
                "\"products_only_samples_per_sec\":%.1f,\"step_products_gflops\":%.2f,\"square\":%d,"
                "\"square_gflops\":%.2f,\"square_kernel\":\"%s\"}\n",
                hidden.c_str(), batch, flop / 1e9, best, batch / best, flop / best / 1e9, square,
                2.0 * square * square * double(square) / best_square / 1e9, kernel.c_str());
    return 0;
}
