// The MLP: dense layers with ReLU between them, softmax cross-entropy.
#include "pstrain/error.hpp"
#include "trainer/model/model.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace pstrain::model {
namespace {

using compute::device_array;

constexpr std::size_t eval_chunk = 1000;

class mlp final : public model {
public:
    mlp(compute::backend& be, int inputs, std::vector<int> hidden, int classes, std::size_t max_batch)
        : be_(be), classes_(classes), max_rows_(std::max(max_batch, eval_chunk))
    {
        widths_.push_back(inputs);
        widths_.insert(widths_.end(), hidden.begin(), hidden.end());
        widths_.push_back(classes);
        const std::size_t layers = widths_.size() - 1;
        for (std::size_t l = 0; l < layers; ++l) {
            std::string scope = l + 1 == layers ? "softmax" : fmt::format("hidden_{}", l);
            add_tensor(scope + "/weights", {widths_[l], widths_[l + 1]});
            add_tensor(scope + "/biases", {widths_[l + 1]});
        }
        // Activations: z (pre-ReLU) and a (post-ReLU) per layer; a[0] is the input.
        for (std::size_t l = 0; l <= layers; ++l) {
            act_.emplace_back(be_, max_rows_ * static_cast<std::size_t>(widths_[l]));
            pre_.emplace_back(be_, max_rows_ * static_cast<std::size_t>(widths_[l]));
        }
        delta_a_ = device_array<float>(
            be_, max_rows_ * static_cast<std::size_t>(*std::max_element(widths_.begin(), widths_.end())));
        delta_z_ = device_array<float>(be_, delta_a_.size());
        labels_ = device_array<std::int32_t>(be_, max_rows_);
        staging_ = std::make_unique<device_staging>(be_, max_rows_, static_cast<std::size_t>(inputs), num_params());
    }

    std::string describe() const override
    {
        std::string s;
        for (std::size_t i = 0; i < widths_.size(); ++i) s += (i ? "-" : "") + std::to_string(widths_[i]);
        return s + " mlp";
    }
    bool is_classifier() const override { return true; }

    void initialize(std::span<float> params, std::uint64_t seed) const override
    {
        std::fill(params.begin(), params.end(), 0.0f);
        for (std::size_t l = 0; l + 1 < widths_.size(); ++l) {
            const auto& w = tensors_[2 * l];
            truncated_normal(params.subspan(w.offset, w.size), 1.0f / std::sqrt(static_cast<float>(widths_[l])),
                             seed * 1000003u + l);
        }
    }

    batch_result compute_gradients(std::span<const float> params, const data::dataset& d,
                                   std::span<const std::uint32_t> rows, std::span<float> grads) override
    {
        const int n = static_cast<int>(rows.size());
        check_rows(d, rows.size());
        const float* p = staging_->parameters(params);
        staging_->gather(d, rows, act_[0].get(), labels_.get());
        forward(p, n);
        auto sums = be_.softmax_xent(act_.back().get(), labels_.get(), delta_z_.get(), n, classes_);
        const double loss = sums.loss / n;
        backward(p, staging_->gradients(grads), n, grads, loss);
        staging_->gradients_out(grads);
        gradient_ready_from(0, loss);
        return {loss, static_cast<double>(sums.correct) / n};
    }

    void prefetch(const data::dataset& d, std::span<const std::uint32_t> rows) override
    {
        check_rows(d, rows.size());
        staging_->prefetch(d, rows, act_[0].get(), labels_.get());
    }

    eval_result evaluate(std::span<const float> params, const data::dataset& d) override
    {
        check_rows(d, 0);
        const float* p = staging_->parameters(params);
        eval_result r;
        double loss = 0;
        std::int64_t correct = 0;
        std::vector<std::uint32_t> rows;
        for (std::size_t start = 0; start < d.rows; start += eval_chunk) {
            std::size_t n = std::min(eval_chunk, d.rows - start);
            rows.resize(n);
            for (std::size_t i = 0; i < n; ++i) rows[i] = static_cast<std::uint32_t>(start + i);
            staging_->gather(d, rows, act_[0].get(), labels_.get());
            forward(p, static_cast<int>(n));
            auto sums = be_.softmax_xent(act_.back().get(), labels_.get(), nullptr, static_cast<int>(n), classes_);
            loss += sums.loss;
            correct += sums.correct;
        }
        r.examples = d.rows;
        r.loss = loss / static_cast<double>(d.rows);
        r.accuracy = static_cast<double>(correct) / static_cast<double>(d.rows);
        return r;
    }

private:
    void check_rows(const data::dataset& d, std::size_t n) const
    {
        if (d.cols != static_cast<std::size_t>(widths_.front()))
            throw error(
                fmt::format("the data has {} features per example but the model takes {}", d.cols, widths_.front()));
        if (n > max_rows_)
            throw error(fmt::format("batch of {} rows is larger than the model's workspace ({})", n, max_rows_));
    }

    void forward(const float* p, int n)
    {
        const std::size_t layers = widths_.size() - 1;
        for (std::size_t l = 0; l < layers; ++l) {
            const auto& w = tensors_[2 * l];
            const auto& b = tensors_[2 * l + 1];
            float* z = l + 1 == layers ? act_[l + 1].get() : pre_[l + 1].get();
            be_.linear_forward(act_[l].get(), p + w.offset, p + b.offset, z, n, widths_[l], widths_[l + 1]);
            if (l + 1 < layers) be_.relu_forward(z, act_[l + 1].get(), std::size_t(n) * widths_[l + 1]);
        }
    }

    // delta_z_ holds d loss / d logits on entry.  With a hook, each
    // layer's gradient starts for `host` as soon as it is complete, and
    // what has landed there is told.
    void backward(const float* p, float* g, int n, std::span<float> host, double loss)
    {
        const std::size_t layers = widths_.size() - 1;
        for (std::size_t l = layers; l-- > 0;) {
            const auto& w = tensors_[2 * l];
            const auto& b = tensors_[2 * l + 1];
            float* dx = l > 0 ? delta_a_.get() : nullptr;
            be_.linear_backward(act_[l].get(), p + w.offset, delta_z_.get(), dx, g + w.offset, g + b.offset, n,
                                widths_[l], widths_[l + 1]);
            if (overlapping()) gradient_ready_from(staging_->gradient_done_from(host, w.offset), loss);
            if (l > 0) be_.relu_backward(pre_[l].get(), delta_a_.get(), delta_z_.get(), std::size_t(n) * widths_[l]);
        }
    }

    compute::backend& be_;
    int classes_;
    std::size_t max_rows_;
    std::vector<int> widths_;
    std::vector<device_array<float>> act_, pre_;
    device_array<float> delta_a_, delta_z_;
    device_array<std::int32_t> labels_;
    std::unique_ptr<device_staging> staging_;
};

class linear final : public model {
public:
    linear(compute::backend& be, std::size_t max_batch) : be_(be), max_rows_(std::max(max_batch, eval_chunk))
    {
        add_tensor("linear/weight", {1, 1});
        add_tensor("linear/bias", {1});
        x_ = device_array<float>(be_, max_rows_);
        t_ = device_array<float>(be_, max_rows_);
        y_ = device_array<float>(be_, max_rows_);
        dy_ = device_array<float>(be_, max_rows_);
        host_x_.resize(max_rows_);
        host_t_.resize(max_rows_);
        params_ = device_array<float>(be_, 2);
        grads_ = device_array<float>(be_, 2);
    }

    std::string describe() const override { return "linear"; }
    bool is_classifier() const override { return false; }
    void initialize(std::span<float> params, std::uint64_t seed) const override
    {
        truncated_normal(params, 1.0f, seed);
    }

    batch_result compute_gradients(std::span<const float> params, const data::dataset& d,
                                   std::span<const std::uint32_t> rows, std::span<float> grads) override
    {
        const int n = static_cast<int>(rows.size());
        stage(d, rows);
        be_.copy_to_device(params_.get(), params.data(), 2 * sizeof(float));
        be_.linear_forward(x_.get(), params_.get(), params_.get() + 1, y_.get(), n, 1, 1);
        auto sums = be_.squared_error(y_.get(), t_.get(), dy_.get(), n);
        be_.linear_backward(x_.get(), params_.get(), dy_.get(), nullptr, grads_.get(), grads_.get() + 1, n, 1, 1);
        be_.copy_to_host(grads.data(), grads_.get(), 2 * sizeof(float));
        gradient_ready_from(0, sums.loss / n);
        return {sums.loss / n, 0.0};
    }

    eval_result evaluate(std::span<const float> params, const data::dataset& d) override
    {
        eval_result r;
        std::vector<std::uint32_t> rows;
        be_.copy_to_device(params_.get(), params.data(), 2 * sizeof(float));
        double loss = 0;
        for (std::size_t start = 0; start < d.rows; start += eval_chunk) {
            std::size_t n = std::min(eval_chunk, d.rows - start);
            rows.resize(n);
            for (std::size_t i = 0; i < n; ++i) rows[i] = static_cast<std::uint32_t>(start + i);
            stage(d, rows);
            be_.linear_forward(x_.get(), params_.get(), params_.get() + 1, y_.get(), static_cast<int>(n), 1, 1);
            loss += be_.squared_error(y_.get(), t_.get(), nullptr, static_cast<int>(n)).loss;
        }
        r.examples = d.rows;
        r.loss = loss / static_cast<double>(d.rows);
        return r;
    }

private:
    void stage(const data::dataset& d, std::span<const std::uint32_t> rows)
    {
        if (d.cols != 1 || d.targets.size() != d.rows)
            throw error("the linear model needs one feature and a target per example");
        for (std::size_t i = 0; i < rows.size(); ++i) {
            host_x_[i] = d.features[rows[i]];
            host_t_[i] = d.targets[rows[i]];
        }
        be_.copy_to_device(x_.get(), host_x_.data(), rows.size() * sizeof(float));
        be_.copy_to_device(t_.get(), host_t_.data(), rows.size() * sizeof(float));
    }

    compute::backend& be_;
    std::size_t max_rows_;
    device_array<float> x_, t_, y_, dy_, params_, grads_;
    std::vector<float> host_x_, host_t_;
};

}  // namespace

std::unique_ptr<model> make_mlp(compute::backend& be, int inputs, const std::vector<int>& hidden, int classes,
                                std::size_t max_batch)
{
    if (inputs < 1 || classes < 2)
        throw error(fmt::format("an MLP needs inputs and at least 2 classes ({} -> {})", inputs, classes));
    return std::make_unique<mlp>(be, inputs, hidden, classes, max_batch);
}

std::unique_ptr<model> make_linear(compute::backend& be, std::size_t max_batch)
{
    return std::make_unique<linear>(be, max_batch);
}

}  // namespace pstrain::model
