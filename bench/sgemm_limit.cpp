// sgemm-limit: what this machine's BLAS can do, as the ceiling for a
// single-process MLP step.  Times, with the BLAS the trainer links:
//   - the matrix products of one training step of a 784-H1-...-10 MLP at
//     batch B (forward X.W, backward dW = X^T.dY and dX = dY.W^T, the input
//     layer's dX skipped), as the trainer's CPU backend calls them;
//   - one large square product (N x N x N), the BLAS's peak.
// Prints one JSON line: the step's GFLOP, its products' best time, the
// samples/s a step made of nothing but those products would reach
// (gemm_only_samples_per_sec), and both GFLOP/s figures.
//
//   sgemm-limit [--hidden 100[,100...]] [--batch 100] [--repeat 200] [--square 1024]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <cblas.h>

#include "trainer/compute/backend.hpp"
#include "bench/mlp_step.hpp"

using namespace pstrain::bench;

int main(int argc, char** argv)
{
    // The kernels pstrain itself runs (trainer/main.cpp).
    pstrain::compute::run_again_with_the_cpus_openblas_kernels(argv);
    const auto o = parse_mlp_step_options(argc, argv, "sgemm-limit", "100");
    const int batch = o.batch, square = o.square;
    std::string hidden = o.hidden;
    std::mt19937 rng(1);
    double flop = 0;
    auto layers = make_mlp_layers(hidden, batch, rng, flop);
    auto step = [&] {
        for (auto& L : layers)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, L.out, L.in, 1.0f, L.x.data(), L.in,
                        L.w.data(), L.out, 0.0f, L.y.data(), L.out);
        for (std::size_t l = layers.size(); l-- > 0;) {
            auto& L = layers[l];
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L.in, L.out, batch, 1.0f, L.x.data(), L.in,
                        L.dy.data(), L.out, 0.0f, L.dw.data(), L.out);
            if (l > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, L.in, L.out, 1.0f, L.dy.data(), L.out,
                            L.w.data(), L.out, 0.0f, L.dx.data(), L.in);
        }
    };
    const double best = best_seconds_per_step(step, o.repeat);

    const std::size_t n = static_cast<std::size_t>(square);
    auto a = random_floats(n * n, rng), b = random_floats(n * n, rng);
    std::vector<float> c(n * n);
    double best_square = 1e30;
    for (int round = 0; round < 5; ++round) {
        const auto t = std::chrono::steady_clock::now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, square, square, square, 1.0f, a.data(), square, b.data(),
                    square, 0.0f, c.data(), square);
        best_square =
            std::min(best_square, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
    }
    std::replace(hidden.begin(), hidden.end(), ',', '-');
    std::printf("{\"model\":\"784-%s-10\",\"batch\":%d,\"step_gflop\":%.6f,\"step_gemm_seconds\":%.9f,"
                "\"gemm_only_samples_per_sec\":%.1f,\"step_gemm_gflops\":%.2f,\"square\":%d,\"square_gflops\":%.2f,"
                "\"blas_threads\":%d}\n",
                hidden.c_str(), batch, flop / 1e9, best, batch / best, flop / best / 1e9, square,
                2.0 * n * n * n / best_square / 1e9, openblas_get_num_threads());
    return 0;
}
