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
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cblas.h>

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

}  // namespace

int main(int argc, char** argv)
{
    std::string hidden = "100";
    int batch = 100, repeat = 200, square = 1024;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "--hidden") hidden = argv[i + 1];
        else if (a == "--batch") batch = std::atoi(argv[i + 1]);
        else if (a == "--repeat") repeat = std::atoi(argv[i + 1]);
        else if (a == "--square") square = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "sgemm-limit: unknown option '%s': use --hidden, --batch, --repeat or --square\n",
                         a.c_str());
            return 2;
        }
    }
    if (argc % 2 == 0 || batch < 1 || repeat < 1 || square < 64) {
        std::fprintf(stderr,
                     "usage: sgemm-limit [--hidden 100[,100...]] [--batch 100] [--repeat 200] [--square 1024]\n");
        return 2;
    }
    std::vector<int> widths{784};
    std::stringstream ss(hidden);
    for (std::string w; std::getline(ss, w, ',');) widths.push_back(std::atoi(w.c_str()));
    widths.push_back(10);

    std::mt19937 rng(1);
    struct layer {
        int in, out;
        std::vector<float> w, dw, x, y, dy, dx;
    };
    std::vector<layer> layers;
    double flop = 0;
    for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
        layer L{widths[l], widths[l + 1], {}, {}, {}, {}, {}, {}};
        L.w = random_floats(std::size_t(L.in) * L.out, rng);
        L.dw.resize(L.w.size());
        L.x = random_floats(std::size_t(batch) * L.in, rng);
        L.y.resize(std::size_t(batch) * L.out);
        L.dy = random_floats(std::size_t(batch) * L.out, rng);
        L.dx.resize(std::size_t(batch) * L.in);
        flop += 2.0 * batch * L.in * L.out * (l == 0 ? 2 : 3);
        layers.push_back(std::move(L));
    }
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
    for (int i = 0; i < 20; ++i) step();
    // Best of 5 rounds of `repeat` steps: the ceiling, not the average.
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
        auto t = clock_type::now();
        for (int i = 0; i < repeat; ++i) step();
        best = std::min(best, seconds_since(t) / repeat);
    }

    const std::size_t n = static_cast<std::size_t>(square);
    auto a = random_floats(n * n, rng), b = random_floats(n * n, rng);
    std::vector<float> c(n * n);
    double best_square = 1e30;
    for (int round = 0; round < 5; ++round) {
        auto t = clock_type::now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, square, square, square, 1.0f, a.data(), square, b.data(),
                    square, 0.0f, c.data(), square);
        best_square = std::min(best_square, seconds_since(t));
    }
    std::replace(hidden.begin(), hidden.end(), ',', '-');
    std::printf("{\"model\":\"784-%s-10\",\"batch\":%d,\"step_gflop\":%.6f,\"step_gemm_seconds\":%.9f,"
                "\"gemm_only_samples_per_sec\":%.1f,\"step_gemm_gflops\":%.2f,\"square\":%d,\"square_gflops\":%.2f,"
                "\"blas_threads\":%d}\n",
                hidden.c_str(), batch, flop / 1e9, best, batch / best, flop / best / 1e9, square,
                2.0 * n * n * n / best_square / 1e9, openblas_get_num_threads());
    return 0;
}
