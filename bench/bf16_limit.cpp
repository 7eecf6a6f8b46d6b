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
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "trainer/compute/bf16.hpp"
#include "trainer/compute/matmul_bf16.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

std::vector<float> random_floats(std::size_t n, std::mt19937& rng)
{
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng);
    return v;
}

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
        const auto t = clock_type::now();
        prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
        stream.wait();
        if (round > 0) best = std::min(best, seconds_since(t));
    }
    return {best, pd.impl_info_str()};
}

}  // namespace

int main(int argc, char** argv)
{
    std::string hidden = "1024,1024";
    int batch = 100, repeat = 200, square = 1024;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--hidden") hidden = argv[i + 1];
        else if (a == "--batch") batch = std::atoi(argv[i + 1]);
        else if (a == "--repeat") repeat = std::atoi(argv[i + 1]);
        else if (a == "--square") square = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "bf16-limit: unknown option '%s': use --hidden, --batch, --repeat or --square\n",
                         a.c_str());
            return 2;
        }
    }
    if (argc % 2 == 0 || batch < 1 || repeat < 1 || square < 64) {
        std::fprintf(stderr,
                     "usage: bf16-limit [--hidden 1024[,1024...]] [--batch 100] [--repeat 200] [--square 1024]\n");
        return 2;
    }
    std::vector<int> widths{784};
    std::stringstream ss(hidden);
    for (std::string w; std::getline(ss, w, ',');) widths.push_back(std::atoi(w.c_str()));
    widths.push_back(10);

    std::mt19937 rng(1);
    struct layer {
        int in, out;
        std::vector<float> w, b, dw, x, y, dy, dx;
    };
    std::vector<layer> layers;
    double flop = 0;
    for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
        layer L{widths[l], widths[l + 1], {}, {}, {}, {}, {}, {}, {}};
        L.w = random_floats(std::size_t(L.in) * L.out, rng);
        L.b = random_floats(std::size_t(L.out), rng);
        L.dw.resize(L.w.size());
        L.x = random_floats(std::size_t(batch) * L.in, rng);
        L.y.resize(std::size_t(batch) * L.out);
        L.dy = random_floats(std::size_t(batch) * L.out, rng);
        L.dx.resize(std::size_t(batch) * L.in);
        flop += 2.0 * batch * L.in * L.out * (l == 0 ? 2 : 3);
        layers.push_back(std::move(L));
    }
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
    for (int i = 0; i < 20; ++i) step();
    // Best of 5 rounds of `repeat` steps: the ceiling, not the average.
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
        const auto t = clock_type::now();
        for (int i = 0; i < repeat; ++i) step();
        best = std::min(best, seconds_since(t) / repeat);
    }
    const auto [best_square, kernel] = square_bf16(square, rng);
    std::replace(hidden.begin(), hidden.end(), ',', '-');
    std::printf("{\"model\":\"784-%s-10\",\"batch\":%d,\"step_gflop\":%.6f,\"step_products_seconds\":%.9f,"
                "\"products_only_samples_per_sec\":%.1f,\"step_products_gflops\":%.2f,\"square\":%d,"
                "\"square_gflops\":%.2f,\"square_kernel\":\"%s\"}\n",
                hidden.c_str(), batch, flop / 1e9, best, batch / best, flop / best / 1e9, square,
                2.0 * square * square * double(square) / best_square / 1e9, kernel.c_str());
    return 0;
}
