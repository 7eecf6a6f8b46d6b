// Wide & deep over embedding-table rows: the bags of each field, an MLP on
// the deep rows and the numeric features (the backend's products), a
// linear part on the
// wide rows, one logit, sigmoid cross-entropy.
#include "trainer/model/ctr_model.hpp"

#include "common/random.hpp"
#include "pstrain/error.hpp"

#include <algorithm>
#include <cmath>

#include <cblas.h>
#include <fmt/format.h>

namespace pstrain::model {

bag_combiner parse_bag_combiner(const std::string& name)
{
    if (name == "sum") return bag_combiner::sum;
    if (name == "mean") return bag_combiner::mean;
    throw error(fmt::format("'{}' is not a way to combine a field's rows: accepted: sum, mean", name));
}

namespace {

constexpr std::size_t wide_table = 0, deep_table = 1;

class wide_deep final : public ctr_model {
public:
    wide_deep(const wide_deep_config& c, compute::backend* products) : c_(c), products_(products)
    {
        if (products && !products->host_memory())
            throw error("wide-deep: the click-through models run on the CPU: use --device cpu");
        if (c.fields < 1 || c.fields > 4096)
            throw error(fmt::format("wide-deep: {} categorical fields: give 1 to 4096", c.fields));
        if (c.numeric < 0 || c.numeric > 4096)
            throw error(fmt::format("wide-deep: {} numeric features: give 0 to 4096", c.numeric));
        if (c.embedding_dim < 1 || c.embedding_dim > 1024)
            throw error(fmt::format("wide-deep: --embedding-dim {}: give 1 to 1024", c.embedding_dim));
        if (c.max_batch < 1 || c.max_batch > (1u << 20))
            throw error(fmt::format("wide-deep: a batch of {} examples: give 1 to 1048576", c.max_batch));
        for (int h : c.hidden)
            if (h < 1 || h > 65536)
                throw error(fmt::format("wide-deep: a hidden layer of {} units: give 1 to 65536", h));
        tables_ = {{"wide", 1}, {"deep", c.embedding_dim}};
        add_tensor("wide/weights", {std::max(c.numeric, 1)});
        add_tensor("wide/bias", {1});
        widths_.push_back(c.fields * c.embedding_dim + c.numeric);
        widths_.insert(widths_.end(), c.hidden.begin(), c.hidden.end());
        for (std::size_t l = 0; l + 1 < widths_.size(); ++l) {
            add_tensor(fmt::format("deep/hidden_{}/weights", l), {widths_[l], widths_[l + 1]});
            add_tensor(fmt::format("deep/hidden_{}/biases", l), {widths_[l + 1]});
        }
        add_tensor("deep/logit/weights", {widths_.back(), 1});
        add_tensor("deep/logit/biases", {1});
        const std::size_t rows = c.max_batch;
        for (int w : widths_) {
            pre_.emplace_back(rows * static_cast<std::size_t>(w));
            act_.emplace_back(rows * static_cast<std::size_t>(w));
        }
        const int widest = *std::max_element(widths_.begin(), widths_.end());
        delta_a_.resize(rows * static_cast<std::size_t>(widest));
        delta_z_.resize(delta_a_.size());
        wide_.resize(rows);
        if (c.fm) fm_sum_.resize(rows * static_cast<std::size_t>(c.embedding_dim));
        logit_.resize(rows);
        dlogit_.resize(rows);
    }

    std::string describe() const override
    {
        std::string hidden;
        for (int h : c_.hidden) hidden += (hidden.empty() ? "" : "-") + std::to_string(h);
        return fmt::format("{} {}x{}+{} {} {}", c_.fm ? "deepfm" : "wide-deep", c_.fields, c_.embedding_dim, c_.numeric,
                           hidden.empty() ? "linear" : hidden, c_.combiner == bag_combiner::sum ? "sum" : "mean");
    }

    void initialize(std::span<float> params, std::uint64_t seed) const override
    {
        std::fill(params.begin(), params.end(), 0.0f);
        for (std::size_t t = 0; t < tensors_.size(); ++t) {
            const auto& s = tensors_[t];
            if (s.shape.size() != 2) continue;
            // Glorot (Xavier) uniform on every weight matrix; biases and the
            // wide weights start at 0.
            const double limit = std::sqrt(6.0 / (s.shape[0] + s.shape[1]));
            random::splitmix64 rng(seed * 1000003u + t);
            for (auto& v : params.subspan(s.offset, s.size))
                v = static_cast<float>(random::uniform(rng, -limit, limit));
        }
    }

    batch_result compute_gradients(std::span<const float> params, const sparse_batch& b,
                                   std::span<const std::span<const float>> rows, std::span<float> grads,
                                   std::span<const std::span<float>> row_grads) override
    {
        check(params, b, rows);
        if (grads.size() != num_params() || row_grads.size() != tables_.size())
            throw error(
                fmt::format("wide-deep: {} gradient floats and {} row gradients for {} parameters and {} tables",
                            grads.size(), row_grads.size(), num_params(), tables_.size()));
        for (std::size_t t = 0; t < tables_.size(); ++t)
            if (row_grads[t].size() != b.unique * static_cast<std::size_t>(tables_[t].dim))
                throw error(fmt::format("wide-deep: table {} has {} gradient floats for {} keys", tables_[t].name,
                                        row_grads[t].size(), b.unique));
        forward(params, b, rows);
        const std::size_t n = static_cast<std::size_t>(b.rows);
        double loss = 0;
        std::size_t right = 0;
        for (std::size_t r = 0; r < n; ++r) {
            const double z = logit_[r], y = b.labels[r];
            // log(1 + e^-|z|) + max(z, 0) - z y: no overflow either way.
            loss += std::log1p(std::exp(-std::abs(z))) + std::max(z, 0.0) - z * y;
            const double p = sigmoid(z);
            right += (p >= 0.5) == (y > 0.5);
            dlogit_[r] = static_cast<float>((p - y) / static_cast<double>(n));
        }
        backward(params, b, grads, row_grads);
        return {loss / static_cast<double>(n), static_cast<double>(right) / static_cast<double>(n)};
    }

    void predict(std::span<const float> params, const sparse_batch& b, std::span<const std::span<const float>> rows,
                 std::span<float> probabilities) override
    {
        check(params, b, rows);
        if (probabilities.size() != static_cast<std::size_t>(b.rows))
            throw error(fmt::format("wide-deep: {} probabilities for {} examples", probabilities.size(), b.rows));
        forward(params, b, rows);
        for (std::size_t r = 0; r < probabilities.size(); ++r)
            probabilities[r] = static_cast<float>(sigmoid(logit_[r]));
    }

private:
    static double sigmoid(double z) { return z >= 0 ? 1 / (1 + std::exp(-z)) : std::exp(z) / (1 + std::exp(z)); }

    // A field's rows are combined with this weight each.
    float bag_weight(const sparse_batch& b, std::size_t bag) const
    {
        const auto size = b.bag_begin[bag + 1] - b.bag_begin[bag];
        return c_.combiner == bag_combiner::mean && size > 0 ? 1.0f / static_cast<float>(size) : 1.0f;
    }

    void check(std::span<const float> params, const sparse_batch& b, std::span<const std::span<const float>> rows) const
    {
        if (!products_) throw error("wide-deep: a model made without a backend is a shape: it computes nothing");
        const auto n = static_cast<std::size_t>(b.rows);
        if (b.rows < 1 || n > c_.max_batch)
            throw error(
                fmt::format("wide-deep: a batch of {} examples where the model holds 1 to {}", b.rows, c_.max_batch));
        if (b.fields != c_.fields || b.numeric != c_.numeric)
            throw error(fmt::format("wide-deep: examples of {} fields and {} numeric features for a model of {} and {}",
                                    b.fields, b.numeric, c_.fields, c_.numeric));
        if (params.size() != num_params())
            throw error(fmt::format("wide-deep: {} parameters, not {}", params.size(), num_params()));
        if (b.labels.size() != n || b.features.size() != n * static_cast<std::size_t>(c_.numeric) ||
            b.bag_begin.size() != n * static_cast<std::size_t>(c_.fields) + 1 || b.bag_begin.back() != b.places.size())
            throw error("wide-deep: a batch whose labels, features or bags do not match its examples");
        if (rows.size() != tables_.size())
            throw error(fmt::format("wide-deep: rows of {} tables, not {}", rows.size(), tables_.size()));
        for (std::size_t t = 0; t < tables_.size(); ++t)
            if (rows[t].size() != b.unique * static_cast<std::size_t>(tables_[t].dim))
                throw error(fmt::format("wide-deep: table {} has {} floats for {} keys", tables_[t].name,
                                        rows[t].size(), b.unique));
        for (auto p : b.places)
            if (p >= b.unique)
                throw error(fmt::format("wide-deep: a place {} beyond the batch's {} keys", p, b.unique));
    }

    std::span<const float> tensor(std::span<const float> params, std::size_t t) const
    {
        return params.subspan(tensors_[t].offset, tensors_[t].size);
    }
    std::span<float> tensor(std::span<float> params, std::size_t t) const
    {
        return params.subspan(tensors_[t].offset, tensors_[t].size);
    }
    // Tensor indices: 0 wide/weights, 1 wide/bias, then weights and biases
    // of each hidden layer, then the logit's.
    static std::size_t hidden_weights(std::size_t l) { return 2 + 2 * l; }

    void forward(std::span<const float> params, const sparse_batch& b, std::span<const std::span<const float>> rows)
    {
        const std::size_t n = static_cast<std::size_t>(b.rows), fields = static_cast<std::size_t>(c_.fields);
        const std::size_t dim = static_cast<std::size_t>(c_.embedding_dim),
                          numeric = static_cast<std::size_t>(c_.numeric);
        const std::size_t in = static_cast<std::size_t>(widths_[0]);
        const auto wide_w = tensor(params, 0);
        const float wide_b = tensor(params, 1)[0];
        float* x = act_[0].data();
        for (std::size_t r = 0; r < n; ++r) {
            float* xr = x + r * in;
            std::fill(xr, xr + fields * dim, 0.0f);
            double wide = wide_b;
            const float* features = b.features.data() + r * numeric;
            for (std::size_t f = 0; f < fields; ++f) {
                const std::size_t bag = r * fields + f;
                const float weight = bag_weight(b, bag);
                float* to = xr + f * dim;
                for (auto i = b.bag_begin[bag]; i < b.bag_begin[bag + 1]; ++i) {
                    const std::size_t k = b.places[i];
                    wide += weight * rows[wide_table][k];
                    const float* row = rows[deep_table].data() + k * dim;
                    for (std::size_t d = 0; d < dim; ++d) to[d] += weight * row[d];
                }
            }
            for (std::size_t j = 0; j < numeric; ++j) {
                xr[fields * dim + j] = features[j];
                wide += static_cast<double>(wide_w[j]) * features[j];
            }
            if (c_.fm) {
                // sum_{f<g} <e_f, e_g> = (|sum_f e_f|^2 - sum_f |e_f|^2) / 2
                float* s = fm_sum_.data() + r * dim;
                std::fill(s, s + dim, 0.0f);
                double squares = 0;
                for (std::size_t f = 0; f < fields; ++f)
                    for (std::size_t d = 0; d < dim; ++d) {
                        const float e = xr[f * dim + d];
                        s[d] += e;
                        squares += static_cast<double>(e) * e;
                    }
                double total = 0;
                for (std::size_t d = 0; d < dim; ++d) total += static_cast<double>(s[d]) * s[d];
                wide += 0.5 * (total - squares);
            }
            wide_[r] = static_cast<float>(wide);
        }
        for (std::size_t l = 0; l + 1 < widths_.size(); ++l) {
            const int a = widths_[l], o = widths_[l + 1];
            const auto w = tensor(params, hidden_weights(l));
            const auto bias = tensor(params, hidden_weights(l) + 1);
            float* z = pre_[l + 1].data();
            products_->linear_forward(act_[l].data(), w.data(), bias.data(), z, b.rows, a, o);
            float* out = act_[l + 1].data();
            for (std::size_t i = 0; i < n * static_cast<std::size_t>(o); ++i) out[i] = std::max(z[i], 0.0f);
        }
        const std::size_t logit = hidden_weights(widths_.size() - 1);
        const int last = widths_.back();
        const auto wl = tensor(params, logit);
        const float bl = tensor(params, logit + 1)[0];
        cblas_sgemv(CblasRowMajor, CblasNoTrans, b.rows, last, 1.0f, act_.back().data(), last, wl.data(), 1, 0.0f,
                    logit_.data(), 1);
        for (std::size_t r = 0; r < n; ++r) logit_[r] += bl + wide_[r];
    }

    void backward(std::span<const float> params, const sparse_batch& b, std::span<float> grads,
                  std::span<const std::span<float>> row_grads)
    {
        const std::size_t n = static_cast<std::size_t>(b.rows), fields = static_cast<std::size_t>(c_.fields);
        const std::size_t dim = static_cast<std::size_t>(c_.embedding_dim),
                          numeric = static_cast<std::size_t>(c_.numeric);
        std::fill(grads.begin(), grads.end(), 0.0f);
        for (auto g : row_grads) std::fill(g.begin(), g.end(), 0.0f);
        const float* dl = dlogit_.data();

        // The wide part.
        auto gw = tensor(grads, 0);
        double gb = 0;
        for (std::size_t r = 0; r < n; ++r) {
            gb += dl[r];
            const float* features = b.features.data() + r * numeric;
            for (std::size_t j = 0; j < numeric; ++j) gw[j] += dl[r] * features[j];
            for (std::size_t f = 0; f < fields; ++f) {
                const std::size_t bag = r * fields + f;
                const float g = dl[r] * bag_weight(b, bag);
                for (auto i = b.bag_begin[bag]; i < b.bag_begin[bag + 1]; ++i) row_grads[wide_table][b.places[i]] += g;
            }
        }
        tensor(grads, 1)[0] = static_cast<float>(gb);

        // The logit layer: dW = a^T dl, db = sum dl, da = dl w^T.
        const std::size_t logit = hidden_weights(widths_.size() - 1);
        const int last = widths_.back();
        const auto wl = tensor(params, logit);
        cblas_sgemv(CblasRowMajor, CblasTrans, b.rows, last, 1.0f, act_.back().data(), last, dl, 1, 0.0f,
                    tensor(grads, logit).data(), 1);
        tensor(grads, logit + 1)[0] = static_cast<float>(gb);
        float* da = delta_a_.data();
        for (std::size_t r = 0; r < n; ++r)
            for (int j = 0; j < last; ++j)
                da[r * static_cast<std::size_t>(last) + static_cast<std::size_t>(j)] =
                    dl[r] * wl[static_cast<std::size_t>(j)];

        // The hidden layers, last first; the input's gradient lands in da.
        for (std::size_t l = widths_.size() - 1; l > 0; --l) {
            const int a = widths_[l - 1], o = widths_[l];
            const float* z = pre_[l].data();
            float* dz = delta_z_.data();
            for (std::size_t i = 0; i < n * static_cast<std::size_t>(o); ++i) dz[i] = z[i] > 0.0f ? da[i] : 0.0f;
            const std::size_t wt = hidden_weights(l - 1);
            // dW = a^T dz, db = sum dz, da = dz W^T (the input's too: the deep rows need it).
            products_->linear_backward(act_[l - 1].data(), tensor(params, wt).data(), dz, da, tensor(grads, wt).data(),
                                       tensor(grads, wt + 1).data(), b.rows, a, o);
        }

        // The deep rows: each occurrence gets its field's share of the input's
        // gradient (with fm, also d/de_f = sum_g e_g - e_f).
        const std::size_t in = static_cast<std::size_t>(widths_[0]);
        if (c_.fm) {
            for (std::size_t r = 0; r < n; ++r) {
                const float* s = fm_sum_.data() + r * dim;
                const float* x = act_[0].data() + r * in;
                float* g = da + r * in;
                for (std::size_t f = 0; f < fields; ++f)
                    for (std::size_t d = 0; d < dim; ++d) g[f * dim + d] += dl[r] * (s[d] - x[f * dim + d]);
            }
        }
        for (std::size_t r = 0; r < n; ++r) {
            for (std::size_t f = 0; f < fields; ++f) {
                const std::size_t bag = r * fields + f;
                const float weight = bag_weight(b, bag);
                const float* from = da + r * in + f * dim;
                for (auto i = b.bag_begin[bag]; i < b.bag_begin[bag + 1]; ++i) {
                    float* to = row_grads[deep_table].data() + static_cast<std::size_t>(b.places[i]) * dim;
                    for (std::size_t d = 0; d < dim; ++d) to[d] += weight * from[d];
                }
            }
        }
    }

    wide_deep_config c_;
    compute::backend* products_;                 // null: a shape only (summaries, table specs)
    std::vector<int> widths_;                    // the deep input, then each hidden layer
    std::vector<std::vector<float>> pre_, act_;  // per width: before and after ReLU (act_[0]: the input)
    std::vector<float> delta_a_, delta_z_, wide_, logit_, dlogit_;
    std::vector<float> fm_sum_;  // fm: each example's sum of its fields' embeddings
};

}  // namespace

std::unique_ptr<ctr_model> make_wide_deep(const wide_deep_config& c, compute::backend* products)
{
    return std::make_unique<wide_deep>(c, products);
}

}  // namespace pstrain::model
