#include "trainer/app/selftest.hpp"

#include "common/log.hpp"
#include "common/random.hpp"
#include "pstrain/error.hpp"
#include "trainer/app/options.hpp"
#include "trainer/compute/bf16.hpp"
#include "trainer/compute/cpu_backend.hpp"
#include "trainer/compute/layers.hpp"
#include "trainer/compute/oracle.hpp"
#include "trainer/data/dataset.hpp"
#include "trainer/model/model.hpp"
#include "trainer/model/spec.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace pstrain::trainer {
namespace {

using compute::oracle::vec;

std::vector<float> normal_floats(std::size_t n, std::uint64_t seed)
{
    random::splitmix64 g(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(random::standard_normal(g));
    return v;
}

// n distinct values in [-1, 1), shuffled: no pooling window holds two equal
// maxima, whose gradient two correct kernels may give to different cells.
std::vector<float> distinct_floats(std::size_t n, std::uint64_t seed)
{
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(2.0 * double(i) / double(n) - 1.0);
    random::splitmix64 g(seed);
    for (std::size_t i = n; i > 1; --i) std::swap(v[i - 1], v[g() % i]);
    return v;
}

std::vector<std::int32_t> labels_of(int rows, int classes, std::uint64_t seed)
{
    random::splitmix64 g(seed);
    std::vector<std::int32_t> l(static_cast<std::size_t>(rows));
    for (auto& x : l) x = static_cast<std::int32_t>(g() % static_cast<std::uint64_t>(classes));
    return l;
}

vec widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

std::vector<float> rounded_to_bf16(std::vector<float> v)
{
    for (auto& x : v) x = compute::from_bf16(compute::to_bf16(x));
    return v;
}

// How far a kernel may be from the oracle: float32 against double, `terms`
// products of values of about unit size summed in any order (blocked and
// threaded kernels vary it), so a long reduction whose result is near 0 gets
// that much more than atol + rtol |want|.  At bf16 a result may be rounded
// to bf16 too: 2^-8 of it more.
struct bound {
    std::size_t terms = 1;
    bool bf16 = false;
    double at(double want) const
    {
        const double rtol = 1e-4 + (bf16 ? std::ldexp(1.0, -8) : 0.0);
        return 1e-4 + 4.0 * FLT_EPSILON * static_cast<double>(terms) + rtol * std::fabs(want);
    }
};

check_outcome compare(std::string what, const std::vector<float>& got, const vec& want, bound b)
{
    check_outcome out{std::move(what), true, {}};
    if (got.size() != want.size()) {
        out.passed = false;
        out.detail = fmt::format("{} values where the oracle has {}", got.size(), want.size());
        return out;
    }
    double worst = 0, worst_bound = b.at(0);
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(double(got[i]) - want[i]);
        if (!(err <= b.at(want[i]))) {  // a NaN fails too
            out.passed = false;
            out.detail = fmt::format("[{}] is {:.7g} where the oracle gives {:.7g} (bound {:.1e})", i, got[i], want[i],
                                     b.at(want[i]));
            return out;
        }
        if (err > worst) worst = err, worst_bound = b.at(want[i]);
    }
    out.detail = fmt::format("max error {:.1e} (bound {:.1e})", worst, worst_bound);
    return out;
}

check_outcome verdict(std::string what, bool passed, std::string detail)
{
    return {std::move(what), passed, std::move(detail)};
}

// Arrays in the backend's memory for one check, and the copies there and back.
class scratch {
public:
    explicit scratch(compute::backend& be) : be_(be) {}
    float* put(const std::vector<float>& v)
    {
        auto& a = floats_.emplace_back(be_, v.size());
        be_.copy_to_device(a.get(), v.data(), v.size() * sizeof(float));
        return a.get();
    }
    std::int32_t* put(const std::vector<std::int32_t>& v)
    {
        auto& a = ints_.emplace_back(be_, v.size());
        be_.copy_to_device(a.get(), v.data(), v.size() * sizeof(std::int32_t));
        return a.get();
    }
    float* zeros(std::size_t n) { return floats_.emplace_back(be_, n).get(); }
    std::vector<float> get(const float* p, std::size_t n)
    {
        be_.synchronize();
        std::vector<float> v(n);
        be_.copy_to_host(v.data(), p, n * sizeof(float));
        return v;
    }

private:
    compute::backend& be_;
    std::vector<compute::device_array<float>> floats_;
    std::vector<compute::device_array<std::int32_t>> ints_;
};

// ------------------------------------------------------------ the backend's own

void check_dense(compute::backend& be, bool bf16, int rows, int in, int out, std::vector<check_outcome>& outs)
{
    const auto name = fmt::format("dense {}x{} -> {}", rows, in, out);
    auto x = normal_floats(std::size_t(rows) * in, 1), w = normal_floats(std::size_t(in) * out, 2),
         b = normal_floats(std::size_t(out), 3), dy = normal_floats(std::size_t(rows) * out, 4);
    if (bf16) x = rounded_to_bf16(x), w = rounded_to_bf16(w), dy = rounded_to_bf16(dy);
    scratch s(be);
    float *dx = s.zeros(x.size()), *dw = s.zeros(w.size()), *db = s.zeros(b.size()), *y = s.zeros(dy.size());
    const float *px = s.put(x), *pw = s.put(w);
    be.linear_forward(px, pw, s.put(b), y, rows, in, out);
    outs.push_back(compare(name + ": forward", s.get(y, dy.size()),
                           compute::oracle::dense_forward(rows, in, out, widen(x), widen(w), widen(b)),
                           {std::size_t(in), bf16}));
    be.linear_backward(px, pw, s.put(dy), dx, dw, db, rows, in, out);
    vec wdx, wdw, wdb;
    compute::oracle::dense_backward(rows, in, out, widen(x), widen(w), widen(dy), wdx, wdw, wdb);
    outs.push_back(compare(name + ": backward dx", s.get(dx, x.size()), wdx, {std::size_t(out), bf16}));
    outs.push_back(compare(name + ": backward dw", s.get(dw, w.size()), wdw, {std::size_t(rows), bf16}));
    outs.push_back(compare(name + ": backward db", s.get(db, b.size()), wdb, {std::size_t(rows), bf16}));
}

void check_backend_elementwise(compute::backend& be, std::vector<check_outcome>& outs)
{
    const std::size_t n = 257;
    const auto z = normal_floats(n, 5), da = normal_floats(n, 6);
    scratch s(be);
    float *a = s.zeros(n), *dz = s.zeros(n);
    const float* pz = s.put(z);
    be.relu_forward(pz, a, n);
    be.relu_backward(pz, s.put(da), dz, n);
    vec wa(n), wdz(n);
    for (std::size_t i = 0; i < n; ++i) {
        wa[i] = compute::oracle::activation(0, z[i]);
        wdz[i] = da[i] * compute::oracle::activation_derivative(0, z[i]);
    }
    outs.push_back(compare("relu (dense models): forward", s.get(a, n), wa, {}));
    outs.push_back(compare("relu (dense models): backward", s.get(dz, n), wdz, {}));

    const int rows = 9, classes = 10;
    const auto logits = normal_floats(std::size_t(rows) * classes, 7);
    const auto labels = labels_of(rows, classes, 8);
    float* dlogits = s.zeros(logits.size());
    const auto sums = be.softmax_xent(s.put(logits), s.put(labels), dlogits, rows, classes);
    const auto p = compute::oracle::softmax(widen(logits), rows, classes);
    double loss = 0;
    std::int64_t correct = 0;
    vec wd(p.size());
    for (int r = 0; r < rows; ++r) {
        const std::size_t at = std::size_t(r) * classes;
        loss -= std::log(p[at + labels[r]]);
        correct += std::max_element(p.begin() + long(at), p.begin() + long(at + classes)) - (p.begin() + long(at)) ==
                   labels[r];
        for (int c = 0; c < classes; ++c) wd[at + c] = (p[at + c] - (c == labels[r] ? 1.0 : 0.0)) / rows;
    }
    outs.push_back(compare("softmax cross-entropy (dense models): loss", {static_cast<float>(sums.loss)}, {loss},
                           {std::size_t(rows * classes)}));
    outs.push_back(verdict("softmax cross-entropy (dense models): correct", sums.correct == correct,
                           fmt::format("{} of {} rows (oracle {})", sums.correct, rows, correct)));
    outs.push_back(compare("softmax cross-entropy (dense models): dlogits", s.get(dlogits, wd.size()), wd, {}));
}

// ------------------------------------------------------------ the layer kernels

struct conv_shape {
    int n, c, h, w, filters, kh, kw, sh, sw;
    bool same;
};

void check_conv(compute::backend& be, compute::layer_kernels& lk, bool bf16, const conv_shape& k,
                std::vector<check_outcome>& outs)
{
    const auto name = fmt::format("conv2d {}x{}x{}x{} * {}x{}x{}, stride {}{}, {}", k.n, k.c, k.h, k.w, k.filters, k.kh,
                                  k.kw, k.sh, k.sh == k.sw ? "" : fmt::format("x{}", k.sw), k.same ? "same" : "valid");
    compute::window2d win{k.c, k.h, k.w, k.kh, k.kw, k.sh, k.sw};
    compute::resolve_padding(win, k.same);
    compute::oracle::geometry g{k.n, k.c, k.h, k.w, k.kh, k.kw, k.sh, k.sw, k.same};
    g.resolve();
    const std::size_t in = std::size_t(k.n) * k.c * k.h * k.w, out = std::size_t(k.n) * k.filters * g.oh * g.ow;
    auto x = normal_floats(in, 11), kernel = normal_floats(std::size_t(k.filters) * k.c * k.kh * k.kw, 12),
         dy = normal_floats(out, 14);
    const auto b = normal_floats(std::size_t(k.filters), 13);
    if (bf16) x = rounded_to_bf16(x), kernel = rounded_to_bf16(kernel), dy = rounded_to_bf16(dy);
    auto conv = lk.make_conv2d(win, k.filters, k.n);
    scratch s(be);
    float *y = s.zeros(out), *dx = s.zeros(in), *dk = s.zeros(kernel.size()), *db = s.zeros(b.size());
    const float *px = s.put(x), *pk = s.put(kernel);
    conv->forward(px, pk, s.put(b), y, k.n);
    const auto window = std::size_t(k.c) * k.kh * k.kw, cells = std::size_t(k.n) * g.oh * g.ow;
    outs.push_back(compare(name + ": forward", s.get(y, out),
                           compute::oracle::conv2d_forward(g, k.filters, widen(x), widen(kernel), widen(b)),
                           {window, bf16}));
    conv->backward(px, pk, s.put(dy), dx, dk, db, k.n);
    vec wdx, wdk, wdb;
    compute::oracle::conv2d_backward(g, k.filters, widen(x), widen(kernel), widen(dy), wdx, wdk, wdb);
    outs.push_back(compare(name + ": backward dx", s.get(dx, in), wdx, {std::size_t(k.filters) * k.kh * k.kw, bf16}));
    outs.push_back(compare(name + ": backward dk", s.get(dk, kernel.size()), wdk, {cells, bf16}));
    outs.push_back(compare(name + ": backward db", s.get(db, b.size()), wdb, {cells, bf16}));
}

void check_pool(compute::backend& be, compute::layer_kernels& lk, bool max, const conv_shape& k,
                std::vector<check_outcome>& outs)
{
    const auto name = fmt::format("{} {}x{}x{}x{}, window {}x{}, stride {}, {}", max ? "maxpool" : "avgpool", k.n, k.c,
                                  k.h, k.w, k.kh, k.kw, k.sh, k.same ? "same" : "valid");
    compute::window2d win{k.c, k.h, k.w, k.kh, k.kw, k.sh, k.sw};
    compute::resolve_padding(win, k.same);
    compute::oracle::geometry g{k.n, k.c, k.h, k.w, k.kh, k.kw, k.sh, k.sw, k.same};
    g.resolve();
    const std::size_t in = std::size_t(k.n) * k.c * k.h * k.w, out = std::size_t(k.n) * k.c * g.oh * g.ow;
    const auto x = distinct_floats(in, 21), dy = normal_floats(out, 22);
    auto pool = max ? lk.make_maxpool(win, k.n) : lk.make_avgpool(win, k.n);
    scratch s(be);
    float *y = s.zeros(out), *dx = s.zeros(in);
    const float* px = s.put(x);
    pool->forward(px, y, k.n);
    outs.push_back(compare(name + ": forward", s.get(y, out), compute::oracle::pool_forward(g, max, widen(x)), {}));
    pool->backward(px, y, s.put(dy), dx, k.n);
    outs.push_back(compare(name + ": backward", s.get(dx, in),
                           compute::oracle::pool_backward(g, max, widen(x), widen(dy)), {std::size_t(k.kh) * k.kw}));
}

void check_activations(compute::backend& be, compute::layer_kernels& lk, std::vector<check_outcome>& outs)
{
    const std::size_t n = 301;
    const auto x = normal_floats(n, 31), dy = normal_floats(n, 32);
    const std::pair<compute::activation, const char*> kinds[] = {{compute::activation::relu, "relu"},
                                                                 {compute::activation::tanh, "tanh"},
                                                                 {compute::activation::sigmoid, "sigmoid"}};
    for (int kind = 0; kind < 3; ++kind) {
        scratch s(be);
        float *y = s.zeros(n), *dx = s.zeros(n);
        lk.activation_forward(kinds[kind].first, s.put(x), y, n);
        lk.activation_backward(kinds[kind].first, y, s.put(dy), dx, n);
        vec wy(n), wdx(n);
        for (std::size_t i = 0; i < n; ++i) {
            wy[i] = compute::oracle::activation(kind, x[i]);
            wdx[i] = dy[i] * compute::oracle::activation_derivative(kind, x[i]);
        }
        outs.push_back(compare(fmt::format("{}: forward", kinds[kind].second), s.get(y, n), wy, {}));
        outs.push_back(compare(fmt::format("{}: backward", kinds[kind].second), s.get(dx, n), wdx, {}));
    }
}

void check_softmax_and_mse(compute::backend& be, compute::layer_kernels& lk, std::vector<check_outcome>& outs)
{
    const int rows = 6, classes = 7;
    const std::size_t n = std::size_t(rows) * classes;
    const auto x = normal_floats(n, 41), dy = normal_floats(n, 42);
    scratch s(be);
    float *y = s.zeros(n), *dx = s.zeros(n);
    lk.softmax_forward(s.put(x), y, rows, classes);
    const auto wy = compute::oracle::softmax(widen(x), rows, classes);
    outs.push_back(compare("softmax: forward", s.get(y, n), wy, {}));
    lk.softmax_backward(y, s.put(dy), dx, rows, classes);
    outs.push_back(compare("softmax: backward", s.get(dx, n),
                           compute::oracle::softmax_backward(wy, widen(dy), rows, classes), {std::size_t(classes)}));

    const auto labels = labels_of(rows, classes, 43);
    float* dpred = s.zeros(n);
    const auto sums = lk.mse_onehot(s.put(x), s.put(labels), dpred, rows, classes);
    vec wd;
    const double loss = compute::oracle::mse_onehot(widen(x), labels, rows, classes, wd);
    outs.push_back(compare("mean squared error: loss", {static_cast<float>(sums.loss)}, {loss}, {n}));
    outs.push_back(compare("mean squared error: backward", s.get(dpred, n), wd, {}));
}

void check_dropout(compute::backend& be, compute::layer_kernels& lk, std::vector<check_outcome>& outs)
{
    const std::size_t n = 4000;
    const float rate = 0.4f;
    const std::uint64_t seed = 51;
    const auto x = normal_floats(n, 52), dy = normal_floats(n, 53);
    scratch s(be);
    float *y = s.zeros(n), *mask = s.zeros(n), *dx = s.zeros(n);
    lk.dropout_forward(s.put(x), y, mask, n, rate, seed);
    lk.dropout_backward(s.put(dy), mask, dx, n);
    const auto m = s.get(mask, n), gy = s.get(y, n), gdx = s.get(dx, n);
    const float scale = 1.0f / (1.0f - rate);
    std::size_t kept = 0;
    vec wy(n), wdx(n);
    bool factors = true;
    for (std::size_t i = 0; i < n; ++i) {
        factors = factors && (m[i] == 0.0f || std::fabs(m[i] - scale) <= 1e-6f * scale);
        kept += m[i] != 0.0f;
        wy[i] = double(x[i]) * m[i];
        wdx[i] = double(dy[i]) * m[i];
    }
    // Kept with probability 0.6: 2400 of 4000, standard deviation 31.
    const bool fraction = kept >= 2240 && kept <= 2560;
    outs.push_back(verdict("dropout 0.4: mask", factors && fraction,
                           fmt::format("{} of {} kept (2240-2560 expected){}", kept, n,
                                       factors ? "" : ", a factor other than 0 and 1/(1 - rate)")));
    outs.push_back(compare("dropout 0.4: forward", gy, wy, {}));
    outs.push_back(compare("dropout 0.4: backward", gdx, wdx, {}));
    if (be.host_memory()) return;
    compute::cpu_backend cpu(1);
    auto cpu_lk = cpu.make_layer_kernels();
    std::vector<float> cy(n), cmask(n);
    cpu_lk->dropout_forward(x.data(), cy.data(), cmask.data(), n, rate, seed);
    outs.push_back(compare("dropout 0.4: the CPU's mask", m, widen(cmask), {}));
}

void check_batchnorm(compute::backend& be, compute::layer_kernels& lk, std::vector<check_outcome>& outs)
{
    const int n = 4, channels = 3, inner = 25;
    const float eps = 1e-3f;
    const std::size_t count = std::size_t(n) * channels * inner;
    const auto x = normal_floats(count, 61), dy = normal_floats(count, 62), gamma = normal_floats(channels, 63),
               beta = normal_floats(channels, 64), moving_mean = normal_floats(channels, 65);
    std::vector<float> moving_var(channels);
    for (int c = 0; c < channels; ++c) moving_var[c] = 0.5f + 0.25f * float(c);
    scratch s(be);
    float *y = s.zeros(count), *mean = s.zeros(channels), *var = s.zeros(channels), *inv_std = s.zeros(channels),
          *dx = s.zeros(count), *dgamma = s.zeros(channels), *dbeta = s.zeros(channels);
    const float *px = s.put(x), *pgamma = s.put(gamma), *pbeta = s.put(beta);
    lk.batchnorm_forward_train(px, pgamma, pbeta, y, mean, var, inv_std, n, channels, inner, eps);
    vec wmean, wvar;
    const auto wy =
        compute::oracle::batchnorm_forward(widen(x), widen(gamma), widen(beta), n, channels, inner, eps, wmean, wvar);
    const std::size_t m = std::size_t(n) * inner;
    outs.push_back(compare("batchnorm 4x3x25: forward", s.get(y, count), wy, {m}));
    outs.push_back(compare("batchnorm 4x3x25: batch mean", s.get(mean, channels), wmean, {m}));
    outs.push_back(compare("batchnorm 4x3x25: batch variance", s.get(var, channels), wvar, {m}));
    lk.batchnorm_backward(px, pgamma, mean, inv_std, s.put(dy), dx, dgamma, dbeta, n, channels, inner, eps);
    vec wdx, wdgamma, wdbeta;
    compute::oracle::batchnorm_backward(widen(x), widen(gamma), widen(dy), n, channels, inner, eps, wdx, wdgamma,
                                        wdbeta);
    outs.push_back(compare("batchnorm 4x3x25: backward dx", s.get(dx, count), wdx, {m}));
    outs.push_back(compare("batchnorm 4x3x25: backward dgamma", s.get(dgamma, channels), wdgamma, {m}));
    outs.push_back(compare("batchnorm 4x3x25: backward dbeta", s.get(dbeta, channels), wdbeta, {m}));

    float* ey = s.zeros(count);
    lk.batchnorm_forward_eval(px, pgamma, pbeta, s.put(moving_mean), s.put(moving_var), ey, n, channels, inner, eps);
    vec wey(count);
    for (std::size_t i = 0; i < count; ++i) {
        const auto c = (i / inner) % channels;
        wey[i] = gamma[c] * (double(x[i]) - moving_mean[c]) / std::sqrt(double(moving_var[c]) + eps) + beta[c];
    }
    outs.push_back(compare("batchnorm 4x3x25: evaluation", s.get(ey, count), wey, {}));

    float* delta = s.zeros(channels);
    lk.moving_average_delta(mean, s.put(moving_mean), delta, channels, 0.99f);
    vec wdelta(channels);
    for (int c = 0; c < channels; ++c) wdelta[c] = (1.0 - 0.99f) * (wmean[c] - moving_mean[c]);
    outs.push_back(compare("batchnorm: moving average step", s.get(delta, channels), wdelta, {m}));

    float* copied = s.zeros(count);
    lk.copy(copied, px, count);
    outs.push_back(compare("device copy", s.get(copied, count), widen(x), {}));
}

// ------------------------------------------------------------ training

// Four classes of 12x12 images: a bright 6x6 quadrant (the class) in noise.
data::dataset quadrant_images(std::size_t rows, std::uint64_t seed)
{
    data::dataset d;
    d.rows = rows;
    d.channels = 1, d.height = 12, d.width = 12;
    d.cols = 144;
    d.num_classes = 4;
    d.background = {0.0f};
    d.features.resize(rows * d.cols);
    d.labels.resize(rows);
    random::splitmix64 g(seed);
    for (std::size_t r = 0; r < rows; ++r) {
        const int label = static_cast<int>(g() % 4);
        d.labels[r] = label;
        for (int y = 0; y < 12; ++y)
            for (int x = 0; x < 12; ++x) {
                const bool lit = (y / 6) * 2 + (x / 6) == label;
                d.features[r * d.cols + std::size_t(y) * 12 + x] =
                    static_cast<float>((lit ? 1.0 : 0.0) + 0.5 * random::standard_normal(g));
            }
    }
    return d;
}

struct training_run {
    double first_loss = 0, last_loss = 0, accuracy = 0;
};

training_run train_small_cnn(compute::backend& be, int steps)
{
    constexpr std::size_t batch = 32;
    constexpr float learning_rate = 0.05f;
    const auto train = quadrant_images(2048, 1), test = quadrant_images(512, 2);
    const auto spec = model::parse_model_spec("conv2d:4:3x3:relu,maxpool:2,flatten,dense:16:relu,dense:4");
    auto m = model::make_sequential(be, spec, model::data_shape(train), 4, std::max(batch, test.rows), 1);
    std::vector<float> params(m->num_params()), grads(m->num_params());
    m->initialize(params, 1);
    std::vector<std::uint32_t> rows(batch);
    training_run run;
    double last = 0;
    for (int step = 0; step < steps; ++step) {
        for (std::size_t i = 0; i < batch; ++i) rows[i] = static_cast<std::uint32_t>((step * batch + i) % train.rows);
        const auto r = m->compute_gradients(params, train, rows, grads);
        if (step == 0) run.first_loss = r.loss;
        // The mean of the last tenth of the steps: one batch's loss is noisy.
        if (step >= steps - std::max(steps / 10, 1)) last += r.loss / std::max(steps / 10, 1);
        for (std::size_t i = 0; i < params.size(); ++i) params[i] -= learning_rate * grads[i];
    }
    run.last_loss = last;
    run.accuracy = m->evaluate(params, test).accuracy;
    return run;
}

// The checks, each printed as it is made.
int report(const std::vector<check_outcome>& outs, std::size_t& failed)
{
    for (const auto& o : outs) {
        fmt::print("{:<5} {}: {}\n", o.passed ? "ok" : "FAIL", o.what, o.detail);
        failed += !o.passed;
    }
    std::fflush(stdout);
    return static_cast<int>(outs.size());
}

}  // namespace

std::vector<check_outcome> check_kernels(compute::backend& be, compute::precision p)
{
    const bool bf16 = p == compute::precision::bf16;
    std::vector<check_outcome> outs;
    check_dense(be, bf16, 7, 33, 17, outs);
    check_dense(be, bf16, 1, 5, 3, outs);
    check_backend_elementwise(be, outs);
    std::unique_ptr<compute::layer_kernels> lk;
    try {
        lk = be.make_layer_kernels();
    } catch (const error& e) {
        outs.push_back(verdict("layer kernels", false, e.what()));
        return outs;
    }
    for (const conv_shape& k :
         {conv_shape{2, 3, 9, 7, 4, 3, 3, 1, 1, true}, conv_shape{1, 2, 8, 8, 5, 1, 1, 2, 2, false},
          conv_shape{2, 1, 6, 5, 3, 2, 2, 1, 1, true}, conv_shape{3, 4, 7, 7, 2, 5, 5, 2, 2, true}})
        check_conv(be, *lk, bf16, k, outs);
    for (const bool max : {true, false})
        for (const conv_shape& k :
             {conv_shape{2, 3, 8, 8, 0, 2, 2, 2, 2, false}, conv_shape{1, 2, 7, 5, 0, 3, 3, 2, 2, true}})
            check_pool(be, *lk, max, k, outs);
    check_activations(be, *lk, outs);
    check_softmax_and_mse(be, *lk, outs);
    check_dropout(be, *lk, outs);
    check_batchnorm(be, *lk, outs);
    return outs;
}

std::vector<check_outcome> check_training(compute::backend& be, int steps)
{
    std::vector<check_outcome> outs;
    const auto run = train_small_cnn(be, steps);
    const bool learned = run.last_loss <= 0.25 * run.first_loss && run.accuracy >= 0.95;
    outs.push_back(verdict(fmt::format("training a small cnn, {} steps", steps), learned,
                           fmt::format("loss {:.4f} -> {:.4f} (<= a quarter wanted), test accuracy {:.4f} (>= 0.95 "
                                       "wanted)",
                                       run.first_loss, run.last_loss, run.accuracy)));
    if (be.host_memory()) return outs;
    compute::cpu_backend cpu(1);
    const auto on_cpu = train_small_cnn(cpu, 1);
    const double diff = std::fabs(run.first_loss - on_cpu.first_loss);
    outs.push_back(verdict("training a small cnn: the first step's loss as on the cpu",
                           diff <= 1e-4 * on_cpu.first_loss,
                           fmt::format("{:.7f} here, {:.7f} on the cpu", run.first_loss, on_cpu.first_loss)));
    return outs;
}

int selftest_command(int argc, char** argv)
{
    CLI::App app{"pstrain selftest: check this node's kernels against the CPU oracle and train a small model",
                 "pstrain selftest"};
    std::string device = "auto", precision = "fp32";
    int steps = 300, threads = 0;
    app.add_option("--device", device, "the kernels to check: auto (a GPU when one is visible), cpu or cuda")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
        ->capture_default_str();
    app.add_option("--precision", precision, "fp32, or bf16 (the products' operands in bfloat16)")
        ->check(CLI::IsMember({"fp32", "bf16"}))
        ->capture_default_str();
    app.add_option("--steps", steps, "steps of the training check")
        ->check(CLI::Range(10, 100000))
        ->capture_default_str();
    app.add_option("--threads", threads, "BLAS threads on the CPU (0: the library's default)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
    if (auto exit_status = parse_tool_command(app, argc, argv, "pstrain selftest")) return *exit_status;
    log::set_prefix("pstrain selftest");
    const auto kind = device == "cpu"    ? compute::device_kind::cpu
                      : device == "cuda" ? compute::device_kind::cuda
                                         : compute::device_kind::automatic;
    const auto p = precision == "bf16" ? compute::precision::bf16 : compute::precision::fp32;
    std::unique_ptr<compute::backend> be;
    try {
        be = compute::make_backend(kind, p, threads);
    } catch (const error& e) {
        log::error("{}", e.what());
        return 1;
    }
    fmt::print("pstrain selftest: {}, {}\n", be->name(), precision);
    std::size_t failed = 0;
    int checks = 0;
    try {
        checks += report(check_kernels(*be, p), failed);
        checks += report(check_training(*be, steps), failed);
    } catch (const std::exception& e) {
        fmt::print("FAIL  {}\n", e.what());
        ++failed, ++checks;
    }
    if (failed == 0) {
        fmt::print("pstrain selftest: all {} checks passed: this node computes as the oracle does\n", checks);
        return 0;
    }
    fmt::print("pstrain selftest: {} of {} checks FAILED on {}: do not train on this node until it is understood; "
               "keep this output with `pstrain --version`\n",
               failed, checks, be->name());
    return 1;
}

}  // namespace pstrain::trainer
