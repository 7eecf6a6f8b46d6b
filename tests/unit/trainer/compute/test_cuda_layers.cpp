// cuDNN's layer kernels against the CPU's, which test_cpu_layers checks
// against the naive oracle: each layer's forward and backward at odd shapes
// (1x1 kernels, strides, TensorFlow's asymmetric "same" padding, batch 1,
// non-square images), dropout's masks element for element, and whole layer
// models' gradients, evaluation and training (each step's gradient beside
// the CPU's, and a run of the GPU's own that learns); at --precision bf16,
// each convolution against the CPU's FP32 one of the bf16-rounded operands.  Tolerance
// atol + rtol * |ref|, atol growing with the reduction's length.  Exits 77
// (automake's SKIP) when no CUDA device is visible.  Run on a GPU node with
//   srun --gres=gpu:1 tests/unit/trainer/compute/test_cuda_layers
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_NO_MAIN
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "trainer/compute/bf16.hpp"
#include "trainer/compute/cpu_backend.hpp"
#include "trainer/compute/cuda_backend.hpp"
#include "trainer/compute/layers.hpp"
#include "trainer/model/model.hpp"
#include "tests/unit/trainer/helpers.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>
#include <ostream>
#include <random>

using namespace pstrain;
namespace bdata = boost::unit_test::data;

namespace {

// n distinct values in [-1, 1), shuffled: no window has two equal maxima,
// whose gradient the CPU and cuDNN may route to different cells.
std::vector<float> distinct_floats(std::size_t n, unsigned seed)
{
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(2.0 * double(i) / double(n) - 1.0);
    std::shuffle(v.begin(), v.end(), std::mt19937(seed));
    return v;
}

std::vector<float> random_floats(std::size_t n, unsigned seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng);
    return v;
}

// The CPU's kernels and cuDNN's, and the copies between them.
struct devices {
    compute::cpu_backend cpu{1};
    std::unique_ptr<compute::backend> gpu = compute::make_cuda_backend();
    std::unique_ptr<compute::layer_kernels> cpu_kernels = cpu.make_layer_kernels();
    std::unique_ptr<compute::layer_kernels> gpu_kernels = gpu->make_layer_kernels();

    template <typename T>
    compute::device_array<T> up(const std::vector<T>& v)
    {
        compute::device_array<T> d(*gpu, std::max<std::size_t>(v.size(), 1));
        gpu->copy_to_device(d.get(), v.data(), v.size() * sizeof(T));
        return d;
    }
    template <typename T>
    compute::device_array<T> zeros(std::size_t n)
    {
        return compute::device_array<T>(*gpu, std::max<std::size_t>(n, 1));
    }
    template <typename T>
    std::vector<T> down(const compute::device_array<T>& d, std::size_t n)
    {
        std::vector<T> v(n);
        gpu->copy_to_host(v.data(), d.get(), n * sizeof(T));
        return v;
    }
};

// |gpu - cpu| <= atol + rtol * |cpu|, atol = 1e-5 + 4 FLT_EPSILON per term of
// the sums behind each value.
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, const char* what, std::size_t terms = 1,
                  double rtol = 1e-4)
{
    BOOST_REQUIRE_EQUAL(got.size(), ref.size());
    const double atol = 1e-5 + 4.0 * FLT_EPSILON * double(terms);
    for (std::size_t i = 0; i < ref.size(); ++i)
        BOOST_TEST_REQUIRE(std::fabs(double(got[i]) - ref[i]) <= atol + rtol * std::fabs(ref[i]),
                           what << "[" << i << "]: cuda " << got[i] << " cpu " << ref[i]);
}

struct window_case {
    int n, c, h, w, filters, kh, kw, sh, sw;
    bool same;
};

std::ostream& operator<<(std::ostream& os, const window_case& k)
{
    return os << k.n << "x" << k.c << "x" << k.h << "x" << k.w << " * " << k.filters << "x" << k.kh << "x" << k.kw
              << " stride " << k.sh << "x" << k.sw << (k.same ? " same" : " valid");
}

const window_case window_cases[] = {
    {2, 3, 7, 5, 4, 3, 3, 1, 1, true},      // several channels, non-square: symmetric padding
    {1, 1, 5, 5, 2, 1, 1, 1, 1, false},     // 1x1 kernel, batch 1
    {2, 2, 6, 9, 3, 1, 1, 2, 2, false},     // 1x1 kernel with stride 2
    {3, 2, 9, 6, 3, 3, 2, 2, 3, true},      // non-square kernel, unequal strides
    {1, 4, 8, 8, 2, 5, 5, 2, 2, false},     // stride 2 valid
    {2, 1, 8, 7, 2, 4, 4, 1, 1, true},      // even kernel: the odd padding row at the bottom
    {2, 3, 5, 4, 2, 5, 4, 1, 1, false},     // window as large as the image: 1x1 output
    {2, 1, 28, 28, 4, 5, 5, 1, 1, true},    // the cnn preset's first layer
    {2, 2, 7, 7, 3, 3, 3, 3, 3, true},      // stride 3 same
    {2, 3, 8, 8, 4, 3, 3, 2, 2, true},      // stride 2 same: no row above, one below (the padded copy)
    {16, 32, 14, 14, 8, 5, 5, 1, 1, true},  // the cnn preset's second layer
};

compute::window2d window_of(const window_case& k)
{
    compute::window2d w{k.c, k.h, k.w, k.kh, k.kw, k.sh, k.sw};
    BOOST_TEST_REQUIRE(compute::resolve_padding(w, k.same));
    return w;
}

std::unique_ptr<model::model> build(compute::backend& be, const std::string& spec, const data::dataset& d,
                                    std::size_t batch)
{
    return model::make_sequential(be, model::parse_model_spec(spec), model::data_shape(d), d.num_classes, batch, 7);
}

}  // namespace

BOOST_DATA_TEST_CASE(conv2d_matches_the_cpu, bdata::make(window_cases), k)
{
    devices dev;
    const auto w = window_of(k);
    const std::size_t in = std::size_t(k.n) * k.c * k.h * k.w, out = std::size_t(k.n) * k.filters * w.out_h * w.out_w;
    const auto x = random_floats(in, 1), kernel = random_floats(std::size_t(k.filters) * k.c * k.kh * k.kw, 2),
               bias = random_floats(std::size_t(k.filters), 3), dy = random_floats(out, 4);
    std::vector<float> y(out), dx(in), dk(kernel.size()), db(bias.size());
    auto cc = dev.cpu_kernels->make_conv2d(w, k.filters, k.n);
    cc->forward(x.data(), kernel.data(), bias.data(), y.data(), k.n);
    cc->backward(x.data(), kernel.data(), dy.data(), dx.data(), dk.data(), db.data(), k.n);

    auto gx = dev.up(x), gk = dev.up(kernel), gb = dev.up(bias), gdy = dev.up(dy);
    auto gy = dev.zeros<float>(out), gdx = dev.zeros<float>(in), gdk = dev.zeros<float>(kernel.size()),
         gdb = dev.zeros<float>(bias.size());
    auto gc = dev.gpu_kernels->make_conv2d(w, k.filters, k.n);
    BOOST_TEST(std::string(gc->name()) == "cudnn");
    gc->forward(gx.get(), gk.get(), gb.get(), gy.get(), k.n);
    gc->backward(gx.get(), gk.get(), gdy.get(), gdx.get(), gdk.get(), gdb.get(), k.n);
    const std::size_t per_output = std::size_t(k.c) * k.kh * k.kw, per_kernel = out / k.filters;
    expect_close(dev.down(gy, out), y, "y", per_output);
    expect_close(dev.down(gdx, in), dx, "dx", std::size_t(k.filters) * k.kh * k.kw);
    expect_close(dev.down(gdk, dk.size()), dk, "dk", per_kernel);
    expect_close(dev.down(gdb, db.size()), db, "db", per_kernel);
}

std::vector<float> rounded_to_bf16(std::vector<float> v)
{
    for (auto& x : v) x = compute::from_bf16(compute::to_bf16(x));
    return v;
}

// At bf16 cuDNN multiplies the rounded x, kernel and dy (products exact in
// float32, sums in float32), and writes y, dx and dk in bf16: each is the
// CPU's float32 convolution of the rounded operands within one more bf16
// rounding, 2^-8 relative, beside expect_close's accumulation bound (which
// is why cudnn_layers.cu picks a direct algorithm at bf16: an FFT or
// Winograd one rounds its transformed operands again).  The
// bias and its gradient stay float32: y - b is compared, and db is the
// column sum of the unrounded dy.
BOOST_DATA_TEST_CASE(bf16_conv2d_is_the_convolution_of_the_rounded_operands, bdata::make(window_cases), k)
{
    devices dev;
    auto gpu = compute::make_cuda_backend(compute::precision::bf16);
    auto kernels = gpu->make_layer_kernels();
    const auto w = window_of(k);
    const std::size_t in = std::size_t(k.n) * k.c * k.h * k.w, out = std::size_t(k.n) * k.filters * w.out_h * w.out_w;
    const auto x = random_floats(in, 1), kernel = random_floats(std::size_t(k.filters) * k.c * k.kh * k.kw, 2),
               bias = random_floats(std::size_t(k.filters), 3), dy = random_floats(out, 4);
    const std::vector<float> no_bias(bias.size(), 0.0f);
    std::vector<float> y(out), dx(in), dk(kernel.size()), db(bias.size()), y32(out), dk32(kernel.size()),
        db32(bias.size());
    auto cc = dev.cpu_kernels->make_conv2d(w, k.filters, k.n);
    cc->forward(x.data(), kernel.data(), no_bias.data(), y32.data(), k.n);
    cc->backward(x.data(), kernel.data(), dy.data(), nullptr, dk32.data(), db32.data(), k.n);
    const auto xr = rounded_to_bf16(x), kr = rounded_to_bf16(kernel), dyr = rounded_to_bf16(dy);
    cc->forward(xr.data(), kr.data(), no_bias.data(), y.data(), k.n);
    cc->backward(xr.data(), kr.data(), dyr.data(), dx.data(), dk.data(), db.data(), k.n);

    auto up = [&](const std::vector<float>& v) {
        compute::device_array<float> d(*gpu, std::max<std::size_t>(v.size(), 1));
        gpu->copy_to_device(d.get(), v.data(), v.size() * sizeof(float));
        return d;
    };
    auto down = [&](const compute::device_array<float>& d, std::size_t n) {
        std::vector<float> v(n);
        gpu->copy_to_host(v.data(), d.get(), n * sizeof(float));
        return v;
    };
    auto gx = up(x), gk = up(kernel), gb = up(bias), gdy = up(dy);
    compute::device_array<float> gy(*gpu, out), gdx(*gpu, in), gdk(*gpu, kernel.size()), gdb(*gpu, bias.size());
    auto gc = kernels->make_conv2d(w, k.filters, k.n);
    gc->forward(gx.get(), gk.get(), gb.get(), gy.get(), k.n);
    gc->backward(gx.get(), gk.get(), gdy.get(), gdx.get(), gdk.get(), gdb.get(), k.n);
    auto got_y = down(gy, out);
    const std::size_t plane = std::size_t(w.out_h) * w.out_w;
    for (std::size_t i = 0; i < out; ++i) got_y[i] -= bias[(i / plane) % std::size_t(k.filters)];
    const double bf16_rounding = std::ldexp(1.0, -8);
    const std::size_t per_output = std::size_t(k.c) * k.kh * k.kw, per_kernel = out / k.filters;
    expect_close(got_y, y, "y - b", per_output, bf16_rounding + 1e-4);
    expect_close(down(gdx, in), dx, "dx", std::size_t(k.filters) * k.kh * k.kw, bf16_rounding + 1e-4);
    expect_close(down(gdk, dk.size()), dk, "dk", per_kernel, bf16_rounding + 1e-4);
    expect_close(down(gdb, db.size()), db32, "db (float32, from the unrounded dy)", per_kernel);
    bool bf16_shows = false;
    for (std::size_t i = 0; i < out; ++i)
        if (std::fabs(double(got_y[i]) - y32[i]) > 1e-5 + 4.0 * FLT_EPSILON * per_output + 1e-4 * std::fabs(y32[i]))
            bf16_shows = true;
    BOOST_TEST(bf16_shows, "no output is further from the float32 convolution than float32 could be");
}

BOOST_DATA_TEST_CASE(pooling_matches_the_cpu, bdata::make(window_cases) * bdata::make({true, false}), k, max)
{
    devices dev;
    const auto w = window_of(k);
    const std::size_t in = std::size_t(k.n) * k.c * k.h * k.w, out = std::size_t(k.n) * k.c * w.out_h * w.out_w;
    const auto x = distinct_floats(in, 5), dy = random_floats(out, 6);
    std::vector<float> y(out), dx(in);
    auto cp = max ? dev.cpu_kernels->make_maxpool(w, k.n) : dev.cpu_kernels->make_avgpool(w, k.n);
    cp->forward(x.data(), y.data(), k.n);
    cp->backward(x.data(), y.data(), dy.data(), dx.data(), k.n);

    auto gx = dev.up(x), gdy = dev.up(dy);
    auto gy = dev.zeros<float>(out), gdx = dev.zeros<float>(in);
    auto gp = max ? dev.gpu_kernels->make_maxpool(w, k.n) : dev.gpu_kernels->make_avgpool(w, k.n);
    gp->forward(gx.get(), gy.get(), k.n);
    gp->backward(gx.get(), gy.get(), gdy.get(), gdx.get(), k.n);
    const std::size_t window = std::size_t(k.kh) * k.kw;
    expect_close(dev.down(gy, out), y, max ? "max y" : "avg y", window);
    expect_close(dev.down(gdx, in), dx, max ? "max dx" : "avg dx", window);
}

BOOST_AUTO_TEST_CASE(activations_softmax_and_mse_match_the_cpu)
{
    devices dev;
    const int rows = 7, classes = 5;
    const std::size_t n = std::size_t(rows) * classes;
    const auto x = random_floats(n, 7), dy = random_floats(n, 8);
    auto gx = dev.up(x), gdy = dev.up(dy);
    auto gy = dev.zeros<float>(n), gdx = dev.zeros<float>(n);
    std::vector<float> y(n), dx(n);
    for (auto a : {compute::activation::relu, compute::activation::tanh, compute::activation::sigmoid}) {
        dev.cpu_kernels->activation_forward(a, x.data(), y.data(), n);
        dev.cpu_kernels->activation_backward(a, y.data(), dy.data(), dx.data(), n);
        dev.gpu_kernels->activation_forward(a, gx.get(), gy.get(), n);
        dev.gpu_kernels->activation_backward(a, gy.get(), gdy.get(), gdx.get(), n);
        expect_close(dev.down(gy, n), y, "activation y");
        expect_close(dev.down(gdx, n), dx, "activation dx");
    }
    dev.cpu_kernels->softmax_forward(x.data(), y.data(), rows, classes);
    dev.cpu_kernels->softmax_backward(y.data(), dy.data(), dx.data(), rows, classes);
    dev.gpu_kernels->softmax_forward(gx.get(), gy.get(), rows, classes);
    dev.gpu_kernels->softmax_backward(gy.get(), gdy.get(), gdx.get(), rows, classes);
    expect_close(dev.down(gy, n), y, "softmax y", classes);
    expect_close(dev.down(gdx, n), dx, "softmax dx", classes);

    std::vector<std::int32_t> labels{0, 4, 2, 2, 1, 3, 0};
    auto glabels = dev.up(labels);
    const auto c = dev.cpu_kernels->mse_onehot(y.data(), labels.data(), dx.data(), rows, classes);
    const auto g = dev.gpu_kernels->mse_onehot(gy.get(), glabels.get(), gdx.get(), rows, classes);
    BOOST_TEST(g.loss == c.loss, boost::test_tools::tolerance(1e-5));
    BOOST_TEST(g.correct == c.correct);
    expect_close(dev.down(gdx, n), dx, "mse dpred");
}

BOOST_AUTO_TEST_CASE(dropout_draws_the_cpu_mask)
{
    devices dev;
    const std::size_t n = 10001;
    const auto x = random_floats(n, 9), dy = random_floats(n, 10);
    std::vector<float> y(n), mask(n), dx(n);
    dev.cpu_kernels->dropout_forward(x.data(), y.data(), mask.data(), n, 0.4f, 77);
    dev.cpu_kernels->dropout_backward(dy.data(), mask.data(), dx.data(), n);
    auto gx = dev.up(x), gdy = dev.up(dy);
    auto gy = dev.zeros<float>(n), gmask = dev.zeros<float>(n), gdx = dev.zeros<float>(n);
    dev.gpu_kernels->dropout_forward(gx.get(), gy.get(), gmask.get(), n, 0.4f, 77);
    dev.gpu_kernels->dropout_backward(gdy.get(), gmask.get(), gdx.get(), n);
    BOOST_TEST((dev.down(gmask, n) == mask), "the same mask, element for element");
    BOOST_TEST((dev.down(gy, n) == y));
    BOOST_TEST((dev.down(gdx, n) == dx));
}

// Per channel after a convolution (inner = H * W) and per feature after a
// dense layer (inner = 1).
BOOST_DATA_TEST_CASE(batchnorm_matches_the_cpu, bdata::make({3, 5}) ^ bdata::make({4, 7}) ^ bdata::make({10, 1}), n,
                     channels, inner)
{
    devices dev;
    const float eps = 1e-3f, momentum = 0.99f;
    const std::size_t count = std::size_t(n) * channels * inner, ch = std::size_t(channels);
    auto x = random_floats(count, 11);
    for (auto& v : x) v = 3.0f * v + 0.5f;  // off zero mean and unit variance
    for (int i = 0; i < n; ++i)             // channel 1 constant: variance 0 (a dead unit)
        std::fill_n(x.begin() + (std::size_t(i) * channels + 1) * inner, inner, 0.25f);
    const auto gamma = random_floats(ch, 12), beta = random_floats(ch, 13), dy = random_floats(count, 14),
               moving_mean = random_floats(ch, 15);
    std::vector<float> moving_var(ch, 0.7f), y(count), dx(count), dgamma(ch), dbeta(ch), stats(3 * ch), delta(2 * ch),
        y_eval(count);
    auto& c = *dev.cpu_kernels;
    c.batchnorm_forward_train(x.data(), gamma.data(), beta.data(), y.data(), stats.data(), stats.data() + ch,
                              stats.data() + 2 * ch, n, channels, inner, eps);
    c.batchnorm_backward(x.data(), gamma.data(), stats.data(), stats.data() + 2 * ch, dy.data(), dx.data(),
                         dgamma.data(), dbeta.data(), n, channels, inner, eps);
    c.moving_average_delta(stats.data(), moving_mean.data(), delta.data(), channels, momentum);
    c.moving_average_delta(stats.data() + ch, moving_var.data(), delta.data() + ch, channels, momentum);
    c.batchnorm_forward_eval(x.data(), gamma.data(), beta.data(), moving_mean.data(), moving_var.data(), y_eval.data(),
                             n, channels, inner, eps);

    auto gx = dev.up(x), ggamma = dev.up(gamma), gbeta = dev.up(beta), gdy = dev.up(dy), gmm = dev.up(moving_mean),
         gmv = dev.up(moving_var);
    auto gy = dev.zeros<float>(count), gdx = dev.zeros<float>(count), gdgamma = dev.zeros<float>(ch),
         gdbeta = dev.zeros<float>(ch), gstats = dev.zeros<float>(3 * ch), gdelta = dev.zeros<float>(2 * ch),
         gy_eval = dev.zeros<float>(count);
    auto& g = *dev.gpu_kernels;
    float* st = gstats.get();
    g.batchnorm_forward_train(gx.get(), ggamma.get(), gbeta.get(), gy.get(), st, st + ch, st + 2 * ch, n, channels,
                              inner, eps);
    g.batchnorm_backward(gx.get(), ggamma.get(), st, st + 2 * ch, gdy.get(), gdx.get(), gdgamma.get(), gdbeta.get(), n,
                         channels, inner, eps);
    g.moving_average_delta(st, gmm.get(), gdelta.get(), channels, momentum);
    g.moving_average_delta(st + ch, gmv.get(), gdelta.get() + ch, channels, momentum);
    g.batchnorm_forward_eval(gx.get(), ggamma.get(), gbeta.get(), gmm.get(), gmv.get(), gy_eval.get(), n, channels,
                             inner, eps);
    const std::size_t per_channel = std::size_t(n) * inner;
    expect_close(dev.down(gstats, 3 * ch), stats, "mean, variance, 1/std", per_channel);
    expect_close(dev.down(gy, count), y, "y", per_channel);
    expect_close(dev.down(gdx, count), dx, "dx", per_channel);
    expect_close(dev.down(gdgamma, ch), dgamma, "dgamma", per_channel);
    expect_close(dev.down(gdbeta, ch), dbeta, "dbeta", per_channel);
    expect_close(dev.down(gdelta, 2 * ch), delta, "moving-average steps", per_channel);
    expect_close(dev.down(gy_eval, count), y_eval, "evaluation y");

    // Without dx (batch normalization as a model's first weighted layer).
    g.batchnorm_backward(gx.get(), ggamma.get(), st, st + 2 * ch, gdy.get(), nullptr, gdgamma.get(), gdbeta.get(), n,
                         channels, inner, eps);
    expect_close(dev.down(gdgamma, ch), dgamma, "dgamma without dx", per_channel);
    expect_close(dev.down(gdbeta, ch), dbeta, "dbeta without dx", per_channel);
}

// Whole models: the same step's loss and gradients, evaluation (70 rows in
// batches of 32: a second batch size, whose plans are made then), and 100
// Adam steps.  At every step of the CPU's run the GPU computes the loss and
// gradient of the same parameters, within the kernels' rounding; the GPU's
// own run learns as much as the CPU's.  The two runs' curves are not
// compared step by step: training amplifies a difference of a few
// FLT_EPSILON step after step (a ReLU or a max pooling window that chooses
// otherwise, a near-zero gradient whose sign Adam turns into a whole step),
// and on the H100 the first model's curves drifted 3% apart by step 45
// while the same step's gradients agreed.
BOOST_DATA_TEST_CASE(
    layer_models_match_the_cpu,
    bdata::make({std::string("conv2d:8:5x5:relu,maxpool:2,conv2d:16:5x5:relu,maxpool:2,flatten,dense:64:relu,"
                             "dropout:0.4,dense:10"),
                 std::string("conv2d:6:3x3:stride=2:tanh,batchnorm,avgpool:3:same,flatten,dense:16,batchnorm,"
                             "sigmoid,dense:10"),
                 std::string("conv2d:4:1x1,flatten,dense:10,softmax,loss:mse")}),
    spec)
{
    devices dev;
    auto d = testing::make_image_data(70, 1, 28, 28, 10, 21);
    auto mc = build(dev.cpu, spec, d, 32);
    auto mg = build(*dev.gpu, spec, d, 32);
    std::vector<float> p(mc->num_params()), gc(p.size()), gg(p.size());
    mc->initialize(p, 3);
    std::vector<std::uint32_t> rows(32);
    std::iota(rows.begin(), rows.end(), 5u);
    const auto lc = mc->compute_gradients(p, d, rows, gc), lg = mg->compute_gradients(p, d, rows, gg);
    BOOST_TEST(lg.loss == lc.loss, boost::test_tools::tolerance(1e-4));
    expect_close(gg, gc, "gradient", 32 * 25, 1e-3);
    const auto ec = mc->evaluate(p, d), eg = mg->evaluate(p, d);
    BOOST_TEST(eg.loss == ec.loss, boost::test_tools::tolerance(1e-4));
    BOOST_TEST(std::abs(eg.accuracy - ec.accuracy) <= 1.0 / 70);

    // The CPU's run, the GPU computing each of its steps beside it: the
    // loss to 1e-4 and the gradient to 1e-3 of its norm (the first step's
    // element-wise bound above, summed over a gradient).
    ps::optimizer_config adam;
    adam.kind = ps::optimizer_kind::adam;
    adam.learning_rate = 0.002f;
    ps::parameter_shard shard({0, mc->num_params()}, adam);
    mc->initialize(p, 5);
    shard.assign(p);
    data::sampler order(d.rows, 1, 0, 5, false);
    std::vector<double> curve_c;
    for (int step = 0; step < 100; ++step) {
        order.next_batch(32, rows);
        const auto sc = mc->compute_gradients(shard.values(), d, rows, gc);
        const auto sg = mg->compute_gradients(shard.values(), d, rows, gg);
        BOOST_TEST_REQUIRE(std::abs(sg.loss - sc.loss) <= 1e-4 * std::abs(sc.loss) + 1e-6,
                           "step " << step << ": cuda loss " << sg.loss << " cpu " << sc.loss);
        double diff = 0, norm = 0;
        for (std::size_t i = 0; i < gc.size(); ++i) {
            diff += (double(gg[i]) - gc[i]) * (double(gg[i]) - gc[i]);
            norm += double(gc[i]) * gc[i];
        }
        BOOST_TEST_REQUIRE(std::sqrt(diff) <= 1e-3 * std::sqrt(norm) + 1e-6,
                           "step " << step << ": |cuda - cpu gradient| " << std::sqrt(diff) << " of |cpu| "
                                   << std::sqrt(norm));
        curve_c.push_back(sc.loss);
        shard.apply(gc);
    }
    // The GPU's own run (the same data order, dropout masks and Adam) learns
    // at least half as much as the CPU's, between the means of the first
    // and last 20 steps.
    const auto curve_g = testing::adam_loss_curve(*mg, d, 0.002f, 5, 100, 32);
    const auto mean = [](const std::vector<double>& c, std::size_t from) {
        return std::accumulate(c.begin() + long(from), c.begin() + long(from + 20), 0.0) / 20;
    };
    // (On the CPU the three models fall from 2.16 to 0.12, 2.29 to 1.41 and
    // 0.026 to 1e-6.)
    const double cpu_fall = mean(curve_c, 0) - mean(curve_c, 80);
    BOOST_TEST_REQUIRE(cpu_fall > 0.25 * mean(curve_c, 0), "the CPU's run learns: " << cpu_fall);
    BOOST_TEST(mean(curve_g, 0) - mean(curve_g, 80) >= 0.5 * cpu_fall,
               "the GPU's run learns: " << mean(curve_g, 0) << " -> " << mean(curve_g, 80) << ", the CPU's "
                                        << mean(curve_c, 0) << " -> " << mean(curve_c, 80));
}

#include "tests/unit/trainer/compute/cuda_main.hpp"
