// layer-times: forward + backward time of each layer type of the cnn preset
// (batch 100, 1x28x28 Fashion-MNIST-sized inputs, random values), through
// the kernels pstrain trains with: conv2d (oneDNN's when built with it, else
// im2col + OpenBLAS sgemm; PSTRAIN_CONV picks one), max
// pooling, dense (the backend's sgemm), dropout, relu and the softmax
// cross-entropy.  One JSON line of milliseconds per layer (median of
// --repeat timed passes after 3 warm-up passes), for bench/vs-torch-cnn.
//   bench/layer-times [--repeat R] [--batch B]
#include "trainer/compute/backend.hpp"
#include "trainer/compute/conv2d.hpp"
#include "trainer/compute/cpu_backend.hpp"
#include "trainer/compute/cpu_layers.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace pstrain::compute;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 0.1f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

double median_ms(int repeat, const std::function<void()>& pass)
{
    for (int i = 0; i < 3; ++i) pass();
    std::vector<double> t;
    for (int i = 0; i < repeat; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        pass();
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv)
{
    // The kernels pstrain itself runs (trainer/main.cpp).
    pstrain::compute::run_again_with_the_cpus_openblas_kernels(argv);
    int repeat = 21, n = 100;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::atoi(argv[i + 1]);
        else if (std::strcmp(argv[i], "--batch") == 0) n = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "layer-times: unknown argument '%s': use --repeat R or --batch B\n", argv[i]);
            return 2;
        }
    }
    if (repeat < 1 || n < 1) {
        std::fprintf(stderr, "layer-times: --repeat and --batch take whole numbers >= 1\n");
        return 2;
    }
    cpu_backend be(1);
    std::string out = "{";
    auto report = [&](const char* name, double ms) {
        out += (out.size() > 1 ? "," : "") + std::string("\"") + name + "\":" + std::to_string(ms);
    };

    // conv2d: 1x28x28 -> 32x28x28 (5x5 same) and 32x14x14 -> 64x14x14, with their relu.
    for (int which = 0; which < 2; ++which) {
        pstrain::compute::window2d w = which == 0 ? pstrain::compute::window2d{1, 28, 28, 5, 5, 1, 1}
                                                  : pstrain::compute::window2d{32, 14, 14, 5, 5, 1, 1};
        pstrain::compute::resolve_padding(w, true);
        const int filters = which == 0 ? 32 : 64;
        const std::size_t in = std::size_t(n) * w.channels * w.height * w.width,
                          outn = std::size_t(n) * filters * w.out_h * w.out_w;
        auto x = random_floats(in, 1), k = random_floats(std::size_t(filters) * w.channels * 25, 2),
             b = random_floats(filters, 3);
        auto dy = random_floats(outn, 4);
        std::vector<float> y(outn), dx(in), dk(k.size()), db(b.size());
        auto conv = cpu::make_conv2d(w, filters, n);
        report(which == 0 ? "conv1" : "conv2", median_ms(repeat, [&] {
                   conv->forward(x.data(), k.data(), b.data(), y.data(), n);
                   cpu::activation_forward(pstrain::compute::activation::relu, y.data(), y.data(), outn);
                   cpu::activation_backward(pstrain::compute::activation::relu, y.data(), dy.data(), dy.data(), outn);
                   // conv1 is the first layer: no dx, as in training.
                   conv->backward(x.data(), k.data(), dy.data(), which == 0 ? nullptr : dx.data(), dk.data(), db.data(),
                                  n);
               }));
    }
    // maxpool 2: 32x28x28 -> 32x14x14 and 64x14x14 -> 64x7x7.
    for (int which = 0; which < 2; ++which) {
        pstrain::compute::window2d w = which == 0 ? pstrain::compute::window2d{32, 28, 28, 2, 2, 2, 2}
                                                  : pstrain::compute::window2d{64, 14, 14, 2, 2, 2, 2};
        pstrain::compute::resolve_padding(w, false);
        const std::size_t in = std::size_t(n) * w.channels * w.height * w.width,
                          outn = std::size_t(n) * w.channels * w.out_h * w.out_w;
        auto x = random_floats(in, 5), dy = random_floats(outn, 6);
        std::vector<float> y(outn), dx(in);
        std::vector<std::int32_t> arg(outn);
        report(which == 0 ? "pool1" : "pool2", median_ms(repeat, [&] {
                   cpu::maxpool_forward(x.data(), y.data(), arg.data(), n, w);
                   cpu::maxpool_backward(dy.data(), arg.data(), dx.data(), n, w);
               }));
    }
    // dense 3136 -> 1024 (relu) and 1024 -> 10.
    for (int which = 0; which < 2; ++which) {
        const int in = which == 0 ? 3136 : 1024, outw = which == 0 ? 1024 : 10;
        auto x = random_floats(std::size_t(n) * in, 7), w = random_floats(std::size_t(in) * outw, 8),
             b = random_floats(outw, 9);
        auto dy = random_floats(std::size_t(n) * outw, 10);
        std::vector<float> y(std::size_t(n) * outw), dx(std::size_t(n) * in), dw(w.size()), db(b.size());
        report(which == 0 ? "dense1" : "dense2", median_ms(repeat, [&] {
                   be.linear_forward(x.data(), w.data(), b.data(), y.data(), n, in, outw);
                   if (which == 0) {
                       cpu::activation_forward(pstrain::compute::activation::relu, y.data(), y.data(), y.size());
                       cpu::activation_backward(pstrain::compute::activation::relu, y.data(), dy.data(), dy.data(),
                                                y.size());
                   }
                   be.linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), n, in, outw);
               }));
    }
    {
        const std::size_t count = std::size_t(n) * 1024;
        auto x = random_floats(count, 11), dy = random_floats(count, 12);
        std::vector<float> y(count), mask(count), dx(count);
        std::uint64_t seed = 1;
        report("dropout", median_ms(repeat, [&] {
                   cpu::dropout_forward(x.data(), y.data(), mask.data(), count, 0.4f, ++seed);
                   cpu::dropout_backward(dy.data(), mask.data(), dx.data(), count);
               }));
    }
    {
        auto logits = random_floats(std::size_t(n) * 10, 13);
        std::vector<std::int32_t> labels(n);
        for (int i = 0; i < n; ++i) labels[i] = i % 10;
        std::vector<float> d(logits.size());
        report("softmax_xent",
               median_ms(repeat, [&] { be.softmax_xent(logits.data(), labels.data(), d.data(), n, 10); }));
    }
    std::printf("%s}\n", out.c_str());
    return 0;
}
