// A sequence of layers from a model description (spec.hpp) on any
// backend: dense layers through the backend's sgemm, the others through its
// layer kernels (compute/layers.hpp).  Activations, parameters and
// gradients live in the backend's memory; on a GPU the batch and the
// parameters are copied in once per step and the gradients out once.
// Workspaces are allocated once, for the largest batch.
#include "pstrain/error.hpp"
#include "common/random.hpp"
#include "trainer/compute/layers.hpp"
#include "trainer/model/model.hpp"
#include "trainer/model/spec.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

namespace pstrain::model {
namespace {

using compute::device_array;

constexpr std::size_t no_tensor = ~std::size_t(0);
// Batch normalization as Keras defaults it: moving = momentum * moving +
// (1 - momentum) * batch statistic, and the variance's epsilon.
constexpr float batchnorm_momentum = 0.99f, batchnorm_epsilon = 1e-3f;

struct step {
    layer_spec spec;
    tensor_shape in, out;
    std::size_t weights = no_tensor;  // index of the weights tensor; the bias follows
    compute::window2d window;
    std::unique_ptr<compute::conv2d> conv;  // conv2d
    std::unique_ptr<compute::pool2d> pool;  // maxpool, avgpool
    device_array<float> mask;               // dropout
    device_array<float> stats;              // batchnorm: the batch's mean, variance and 1 / std, `groups` each
    int groups = 0, inner = 0;              // batchnorm: channels (or features) and the values of each per example
    float* output = nullptr;                // max_rows x out.size()
};

compute::activation to_compute(activation_kind a)
{
    return a == activation_kind::tanh      ? compute::activation::tanh
           : a == activation_kind::sigmoid ? compute::activation::sigmoid
                                           : compute::activation::relu;
}

class sequential final : public model {
public:
    sequential(compute::backend& be, model_spec spec, tensor_shape input, int classes, std::size_t max_batch,
               std::uint64_t seed)
        : be_(be), spec_(std::move(spec)), input_(input), classes_(classes),
          max_rows_(std::max<std::size_t>(max_batch, 1)), seed_(seed), kernels_(be_.make_layer_kernels())
    {
        auto shapes = infer_shapes(spec_, input_, classes_);
        const std::size_t count = spec_.layers.size();
        steps_.resize(count);
        input_buffer_ = device_array<float>(be_, max_rows_ * input_.size());
        float* prev = input_buffer_.get();
        std::size_t widest = input_.size();
        for (std::size_t i = 0; i < count; ++i) {
            auto& s = steps_[i];
            s.spec = spec_.layers[i];
            s.in = i == 0 ? input_ : shapes[i - 1];
            s.out = shapes[i];
            widest = std::max(widest, s.out.size());
            const std::string scope =
                fmt::format("layer_{}_{}", i + 1, s.spec.text().substr(0, s.spec.text().find(':')));
            switch (s.spec.kind) {
            case layer_kind::dense:
                s.weights = tensors_.size();
                add_tensor(scope + "/weights", {static_cast<int>(s.in.size()), s.spec.units});
                add_tensor(scope + "/biases", {s.spec.units});
                break;
            case layer_kind::conv2d:
                s.weights = tensors_.size();
                add_tensor(scope + "/kernel", {s.spec.units, s.in.channels, s.spec.kh, s.spec.kw});
                add_tensor(scope + "/biases", {s.spec.units});
                [[fallthrough]];
            case layer_kind::maxpool:
            case layer_kind::avgpool:
                s.window = {s.in.channels, s.in.height, s.in.width, s.spec.kh, s.spec.kw, s.spec.sh, s.spec.sw};
                compute::resolve_padding(s.window, s.spec.same);
                if (s.spec.kind == layer_kind::conv2d)
                    s.conv = kernels_->make_conv2d(s.window, s.spec.units, static_cast<int>(max_rows_));
                else if (s.spec.kind == layer_kind::maxpool)
                    s.pool = kernels_->make_maxpool(s.window, static_cast<int>(max_rows_));
                else s.pool = kernels_->make_avgpool(s.window, static_cast<int>(max_rows_));
                break;
            case layer_kind::dropout: s.mask = device_array<float>(be_, max_rows_ * s.out.size()); break;
            case layer_kind::batchnorm:
                // Per channel after a convolution, per feature after a dense layer.
                s.groups = s.in.image ? s.in.channels : static_cast<int>(s.in.size());
                s.inner = s.in.image ? s.in.height * s.in.width : 1;
                s.weights = tensors_.size();
                add_tensor(scope + "/gamma", {s.groups});
                add_tensor(scope + "/beta", {s.groups});
                add_tensor(scope + "/moving_mean", {s.groups});
                add_tensor(scope + "/moving_variance", {s.groups});
                tensors_[s.weights + 2].moving_average = tensors_[s.weights + 3].moving_average = true;
                s.stats = device_array<float>(be_, 3 * std::size_t(s.groups));
                break;
            default: break;
            }
            // Layers that change no value share their input's memory.
            if (s.spec.kind == layer_kind::input || s.spec.kind == layer_kind::flatten) {
                s.output = prev;
            } else {
                buffers_.emplace_back(be_, max_rows_ * s.out.size());
                s.output = buffers_.back().get();
            }
            prev = s.output;
        }
        if (num_params() == 0)
            throw error(fmt::format("--model {}: no layer has parameters: add a dense or conv2d layer", spec_.text()));
        // Softmax before cross-entropy is part of the loss.
        fused_softmax_ =
            spec_.loss == loss_kind::softmax_cross_entropy && steps_.back().spec.kind == layer_kind::softmax;
        first_weighted_ = 0;
        while (steps_[first_weighted_].weights == no_tensor) ++first_weighted_;
        dy_ = device_array<float>(be_, max_rows_ * widest);
        dx_ = device_array<float>(be_, max_rows_ * widest);
        labels_ = device_array<std::int32_t>(be_, max_rows_);
        staging_ = std::make_unique<device_staging>(be_, max_rows_, input_.size(), num_params());
    }

    std::string describe() const override { return fmt::format("{} on {}", spec_.text(), input_.text()); }
    bool is_classifier() const override { return true; }

    void initialize(std::span<float> params, std::uint64_t seed) const override
    {
        std::fill(params.begin(), params.end(), 0.0f);
        for (const auto& s : steps_) {
            if (s.weights == no_tensor) continue;
            if (s.spec.kind == layer_kind::batchnorm) {
                // gamma 1, beta 0, moving mean 0, moving variance 1
                for (std::size_t k : {s.weights, s.weights + 3}) {
                    const auto& t = tensors_[k];
                    std::fill_n(params.begin() + static_cast<std::ptrdiff_t>(t.offset), t.size, 1.0f);
                }
                continue;
            }
            const auto& t = tensors_[s.weights];
            const double field = s.spec.kind == layer_kind::conv2d ? double(s.spec.kh) * s.spec.kw : 1.0;
            const double fan_in = s.spec.kind == layer_kind::conv2d ? s.in.channels * field : double(s.in.size());
            const double fan_out = s.spec.units * field;
            auto w = params.subspan(t.offset, t.size);
            const std::uint64_t tensor_seed = seed * 1000003u + s.weights;
            if (s.spec.init == init_kind::he) {
                // He normal as Keras draws it: truncated at 2 stddev, the
                // stddev raised so the variance is 2 / fan_in.
                truncated_normal(w, static_cast<float>(std::sqrt(2.0 / fan_in) / 0.87962566103423978), tensor_seed);
            } else {
                // Glorot (Xavier) uniform.
                const double limit = std::sqrt(6.0 / (fan_in + fan_out));
                random::splitmix64 rng(tensor_seed);
                for (auto& v : w) v = static_cast<float>(random::uniform(rng, -limit, limit));
            }
        }
    }

    batch_result compute_gradients(std::span<const float> params, const data::dataset& d,
                                   std::span<const std::uint32_t> rows, std::span<float> grads) override
    {
        const int n = static_cast<int>(rows.size());
        check_rows(d, rows.size());
        const float* p = staging_->parameters(params);
        staging_->gather(d, rows, input_buffer_.get(), labels_.get());
        forward(p, n, true);
        auto sums = loss(n, dy_.get());
        const double mean_loss = sums.loss / n;
        backward(p, staging_->gradients(grads), n, grads, mean_loss);
        staging_->gradients_out(grads);
        gradient_ready_from(0, mean_loss);
        return {mean_loss, static_cast<double>(sums.correct) / n};
    }

    void prefetch(const data::dataset& d, std::span<const std::uint32_t> rows) override
    {
        check_rows(d, rows.size());
        staging_->prefetch(d, rows, input_buffer_.get(), labels_.get());
    }

    eval_result evaluate(std::span<const float> params, const data::dataset& d) override
    {
        check_rows(d, 0);
        const float* p = staging_->parameters(params);
        double loss_sum = 0;
        std::int64_t correct = 0;
        std::vector<std::uint32_t> rows;
        for (std::size_t start = 0; start < d.rows; start += max_rows_) {
            const std::size_t n = std::min(max_rows_, d.rows - start);
            rows.resize(n);
            for (std::size_t i = 0; i < n; ++i) rows[i] = static_cast<std::uint32_t>(start + i);
            staging_->gather(d, rows, input_buffer_.get(), labels_.get());
            forward(p, static_cast<int>(n), false);
            auto sums = loss(static_cast<int>(n), nullptr);
            loss_sum += sums.loss;
            correct += sums.correct;
        }
        eval_result r;
        r.examples = d.rows;
        r.loss = d.rows ? loss_sum / static_cast<double>(d.rows) : 0.0;
        r.accuracy = d.rows ? static_cast<double>(correct) / static_cast<double>(d.rows) : 0.0;
        return r;
    }

private:
    void check_rows(const data::dataset& d, std::size_t n) const
    {
        if (d.cols != input_.size())
            throw error(
                fmt::format("the data has {} features per example but the model takes {}", d.cols, input_.text()));
        if (n > max_rows_)
            throw error(fmt::format("batch of {} rows is larger than the model's workspace ({})", n, max_rows_));
    }

    void forward(const float* p, int n, bool training)
    {
        const float* x = input_buffer_.get();
        const std::size_t last = fused_softmax_ ? steps_.size() - 1 : steps_.size();
        for (std::size_t i = 0; i < last; ++i) {
            auto& s = steps_[i];
            const std::size_t count = std::size_t(n) * s.out.size();
            switch (s.spec.kind) {
            case layer_kind::dense: {
                const auto& w = tensors_[s.weights];
                be_.linear_forward(x, p + w.offset, p + w.offset + w.size, s.output, n, static_cast<int>(s.in.size()),
                                   s.spec.units);
                break;
            }
            case layer_kind::conv2d: {
                const auto& w = tensors_[s.weights];
                s.conv->forward(x, p + w.offset, p + w.offset + w.size, s.output, n);
                break;
            }
            case layer_kind::maxpool:
            case layer_kind::avgpool: s.pool->forward(x, s.output, n); break;
            case layer_kind::dropout:
                if (training && s.spec.rate > 0)
                    kernels_->dropout_forward(x, s.output, s.mask.get(), count, s.spec.rate,
                                              seed_ ^ (0x9e3779b97f4a7c15ull * ++dropout_draws_));
                else kernels_->copy(s.output, x, count);
                break;
            case layer_kind::relu: kernels_->activation_forward(compute::activation::relu, x, s.output, count); break;
            case layer_kind::tanh: kernels_->activation_forward(compute::activation::tanh, x, s.output, count); break;
            case layer_kind::sigmoid:
                kernels_->activation_forward(compute::activation::sigmoid, x, s.output, count);
                break;
            case layer_kind::softmax: kernels_->softmax_forward(x, s.output, n, static_cast<int>(s.out.size())); break;
            case layer_kind::batchnorm: {
                const float* gamma = p + tensors_[s.weights].offset;
                const float* beta = p + tensors_[s.weights + 1].offset;
                if (training) {
                    float* st = s.stats.get();
                    kernels_->batchnorm_forward_train(x, gamma, beta, s.output, st, st + s.groups, st + 2 * s.groups, n,
                                                      s.groups, s.inner, batchnorm_epsilon);
                } else {
                    kernels_->batchnorm_forward_eval(x, gamma, beta, p + tensors_[s.weights + 2].offset,
                                                     p + tensors_[s.weights + 3].offset, s.output, n, s.groups, s.inner,
                                                     batchnorm_epsilon);
                }
                break;
            }
            case layer_kind::input:
            case layer_kind::flatten: break;
            }
            if (s.spec.activation != activation_kind::none)
                kernels_->activation_forward(to_compute(s.spec.activation), s.output, s.output, count);
            x = s.output;
        }
    }

    // The loss of the last output; its gradient into `dy` when given.
    compute::backend::loss_sums loss(int n, float* dy)
    {
        const float* out = !fused_softmax_      ? steps_.back().output
                           : steps_.size() >= 2 ? steps_[steps_.size() - 2].output
                                                : input_buffer_.get();
        if (spec_.loss == loss_kind::mean_squared_error)
            return kernels_->mse_onehot(out, labels_.get(), dy, n, classes_);
        return be_.softmax_xent(out, labels_.get(), dy, n, classes_);
    }

    // dy_ holds d loss / d (last output) on entry.  With a hook, each
    // weighted layer's gradient starts for `host` as soon as it is
    // complete, and what has landed there is told.
    void backward(const float* p, float* g, int n, std::span<float> host, double loss)
    {
        const auto done_from = [&](std::size_t from) {
            if (overlapping()) gradient_ready_from(staging_->gradient_done_from(host, from), loss);
        };
        float* dy = dy_.get();
        float* dx = dx_.get();
        const std::size_t last = fused_softmax_ ? steps_.size() - 1 : steps_.size();
        for (std::size_t i = last; i-- > first_weighted_;) {
            auto& s = steps_[i];
            const float* x = i == 0 ? input_buffer_.get() : steps_[i - 1].output;
            const std::size_t count = std::size_t(n) * s.out.size();
            const bool need_dx = i > first_weighted_;
            if (s.spec.activation != activation_kind::none)
                kernels_->activation_backward(to_compute(s.spec.activation), s.output, dy, dy, count);
            switch (s.spec.kind) {
            case layer_kind::dense: {
                const auto& w = tensors_[s.weights];
                be_.linear_backward(x, p + w.offset, dy, need_dx ? dx : nullptr, g + w.offset, g + w.offset + w.size, n,
                                    static_cast<int>(s.in.size()), s.spec.units);
                done_from(w.offset);
                break;
            }
            case layer_kind::conv2d: {
                const auto& w = tensors_[s.weights];
                s.conv->backward(x, p + w.offset, dy, need_dx ? dx : nullptr, g + w.offset, g + w.offset + w.size, n);
                done_from(w.offset);
                break;
            }
            case layer_kind::maxpool:
            case layer_kind::avgpool: s.pool->backward(x, s.output, dy, dx, n); break;
            case layer_kind::dropout:
                if (s.spec.rate > 0) kernels_->dropout_backward(dy, s.mask.get(), dx, count);
                else kernels_->copy(dx, dy, count);
                break;
            case layer_kind::relu:
                kernels_->activation_backward(compute::activation::relu, s.output, dy, dx, count);
                break;
            case layer_kind::tanh:
                kernels_->activation_backward(compute::activation::tanh, s.output, dy, dx, count);
                break;
            case layer_kind::sigmoid:
                kernels_->activation_backward(compute::activation::sigmoid, s.output, dy, dx, count);
                break;
            case layer_kind::softmax:
                kernels_->softmax_backward(s.output, dy, dx, n, static_cast<int>(s.out.size()));
                break;
            case layer_kind::batchnorm: {
                const auto &tg = tensors_[s.weights], &tb = tensors_[s.weights + 1], &tm = tensors_[s.weights + 2],
                           &tv = tensors_[s.weights + 3];
                const float* st = s.stats.get();
                kernels_->batchnorm_backward(x, p + tg.offset, st, st + 2 * s.groups, dy, need_dx ? dx : nullptr,
                                             g + tg.offset, g + tb.offset, n, s.groups, s.inner, batchnorm_epsilon);
                // The moving averages' "gradients" are their steps toward this batch's statistics.
                kernels_->moving_average_delta(st, p + tm.offset, g + tm.offset, s.groups, batchnorm_momentum);
                kernels_->moving_average_delta(st + s.groups, p + tv.offset, g + tv.offset, s.groups,
                                               batchnorm_momentum);
                done_from(tg.offset);
                break;
            }
            case layer_kind::input:
            case layer_kind::flatten: continue;  // the same values: dy is dx
            }
            std::swap(dy, dx);
        }
    }

    compute::backend& be_;
    model_spec spec_;
    tensor_shape input_;
    int classes_;
    std::size_t max_rows_;
    std::uint64_t seed_;
    std::uint64_t dropout_draws_ = 0;
    std::unique_ptr<compute::layer_kernels> kernels_;
    std::vector<step> steps_;
    std::vector<device_array<float>> buffers_;
    device_array<float> input_buffer_, dy_, dx_;
    device_array<std::int32_t> labels_;
    std::unique_ptr<device_staging> staging_;
    bool fused_softmax_ = false;
    std::size_t first_weighted_ = 0;
};

}  // namespace

std::unique_ptr<model> make_sequential(compute::backend& be, const model_spec& spec, const tensor_shape& input,
                                       int classes, std::size_t max_batch, std::uint64_t seed)
{
    return std::make_unique<sequential>(be, spec, input, classes, max_batch, seed);
}

}  // namespace pstrain::model
