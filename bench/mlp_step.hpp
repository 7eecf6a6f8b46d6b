// What sgemm-limit and bf16-limit share: their command line, the layers of
// one 784-H1-...-10 MLP training step at batch B (random operands), and the
// best time a step takes.  Header-only; bench programs only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace pstrain::bench {

struct mlp_step_options {
    std::string hidden;  // "1024,1024"
    int batch = 100, repeat = 200, square = 1024;
};

// Parses --hidden, --batch, --repeat and --square; prints the usage and
// exits 2 on anything else.
inline mlp_step_options parse_mlp_step_options(int argc, char** argv, const char* program, std::string hidden)
{
    mlp_step_options o{std::move(hidden)};
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--hidden") o.hidden = argv[i + 1];
        else if (a == "--batch") o.batch = std::atoi(argv[i + 1]);
        else if (a == "--repeat") o.repeat = std::atoi(argv[i + 1]);
        else if (a == "--square") o.square = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "%s: unknown option '%s': use --hidden, --batch, --repeat or --square\n", program,
                         a.c_str());
            std::exit(2);
        }
    }
    if (argc % 2 == 0 || o.batch < 1 || o.repeat < 1 || o.square < 64) {
        std::fprintf(stderr, "usage: %s [--hidden %s[,...]] [--batch 100] [--repeat 200] [--square 1024]\n", program,
                     o.hidden.c_str());
        std::exit(2);
    }
    return o;
}

inline std::vector<float> random_floats(std::size_t n, std::mt19937& rng)
{
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng);
    return v;
}

// One layer's operands: w [in x out], b [out], x [batch x in], dy [batch x
// out] random; y, dw, dx the outputs.
struct mlp_layer {
    int in, out;
    std::vector<float> w, b, dw, x, y, dy, dx;
};

// The layers of 784-hidden-10 and the FLOP of one step's products (forward
// X.W, backward dW = X^T.dY and dX = dY.W^T, the input layer's dX skipped).
inline std::vector<mlp_layer> make_mlp_layers(const std::string& hidden, int batch, std::mt19937& rng, double& flop)
{
    std::vector<int> widths{784};
    std::stringstream ss(hidden);
    for (std::string w; std::getline(ss, w, ',');) widths.push_back(std::atoi(w.c_str()));
    widths.push_back(10);
    std::vector<mlp_layer> layers;
    flop = 0;
    for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
        mlp_layer L{widths[l], widths[l + 1], {}, {}, {}, {}, {}, {}, {}};
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
    return layers;
}

// After 20 warm-up steps, the best of 5 rounds of `repeat` steps, in
// seconds a step: the ceiling, not the average.
template <typename Step>
double best_seconds_per_step(Step step, int repeat)
{
    using clock = std::chrono::steady_clock;
    for (int i = 0; i < 20; ++i) step();
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
        const auto t = clock::now();
        for (int i = 0; i < repeat; ++i) step();
        best = std::min(best, std::chrono::duration<double>(clock::now() - t).count() / repeat);
    }
    return best;
}

}  // namespace pstrain::bench
