#include "trainer/model/model.hpp"

#include "pstrain/error.hpp"
#include "common/parse.hpp"
#include "common/random.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

namespace pstrain::model {

void tensor_model::add_tensor(std::string name, std::vector<int> shape)
{
    tensor_spec t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.size = 1;
    for (int d : t.shape) t.size *= static_cast<std::size_t>(d);
    t.offset = num_params();
    tensors_.push_back(std::move(t));
}

device_staging::device_staging(compute::backend& be, std::size_t max_rows, std::size_t cols, std::size_t num_params)
    : be_(be)
{
    if (be_.host_memory()) return;
    params_ = compute::device_array<float>(be_, num_params);
    grads_ = compute::device_array<float>(be_, num_params);
    inputs_ = compute::host_array<float>(be_, max_rows * cols);
    labels_ = compute::host_array<std::int32_t>(be_, max_rows);
}

const float* device_staging::parameters(std::span<const float> host)
{
    if (be_.host_memory()) return host.data();
    be_.copy_to_device(params_.get(), host.data(), host.size_bytes());
    return params_.get();
}

float* device_staging::gradients(std::span<float> host)
{
    if (be_.host_memory()) return host.data();
    copied_from_ = landed_from_ = host.size();
    copies_.clear();
    next_landing_ = 0;
    return grads_.get();
}

std::size_t device_staging::gradient_done_from(std::span<float> host, std::size_t from)
{
    if (be_.host_memory()) return from;
    if (from < copied_from_) {
        const std::size_t k =
            be_.start_copy_to_host(host.data() + from, grads_.get() + from, (copied_from_ - from) * sizeof(float));
        copies_.push_back({k, from});
        copied_from_ = from;
    }
    // The copies land in the order they started (one copy stream).
    for (; next_landing_ < copies_.size() && be_.copy_landed(copies_[next_landing_].number); ++next_landing_)
        landed_from_ = copies_[next_landing_].from;
    return landed_from_;
}

void device_staging::gradients_out(std::span<float> host)
{
    if (be_.host_memory()) return;
    if (copied_from_ > 0) gradient_done_from(host, 0);
    be_.wait_copies();
    landed_from_ = 0;
}

void device_staging::gather(const data::dataset& d, std::span<const std::uint32_t> rows, float* x, std::int32_t* labels)
{
    const bool there = ahead_.d == &d && ahead_.x == x && ahead_.labels == labels &&
                       std::equal(rows.begin(), rows.end(), ahead_.rows.begin(), ahead_.rows.end());
    ahead_.d = nullptr;
    if (there) return;
    float* xs = be_.host_memory() ? x : inputs_.data();
    std::int32_t* ys = be_.host_memory() ? labels : labels_.data();
    for (std::size_t i = 0; i < rows.size(); ++i) {
        std::copy_n(d.row(rows[i]), d.cols, xs + i * d.cols);
        ys[i] = d.labels[rows[i]];
    }
    if (!be_.host_memory()) {
        be_.copy_to_device(x, xs, rows.size() * d.cols * sizeof(float));
        be_.copy_to_device(labels, ys, rows.size() * sizeof(std::int32_t));
    }
}

void device_staging::prefetch(const data::dataset& d, std::span<const std::uint32_t> rows, float* x,
                              std::int32_t* labels)
{
    gather(d, rows, x, labels);
    ahead_.d = &d;
    ahead_.x = x;
    ahead_.labels = labels;
    ahead_.rows.assign(rows.begin(), rows.end());
}

std::vector<int> parse_hidden_units(const std::string& text)
{
    std::vector<int> units;
    for (std::string_view item : split(text, ',')) {
        auto v = parse_count(item, 1, 1 << 16);
        if (!v)
            throw error(fmt::format("--hidden-units {}: '{}' is not a layer width: give a comma list of whole numbers "
                                    "from 1 to 65536, e.g. 256,128",
                                    text, item));
        units.push_back(static_cast<int>(*v));
    }
    if (units.size() > 16) throw error(fmt::format("--hidden-units {}: more than 16 hidden layers", text));
    return units;
}

tensor_shape data_shape(const data::dataset& d)
{
    if (d.height > 0 && d.width > 0 && std::size_t(d.channels) * d.height * d.width == d.cols)
        return {true, d.channels, d.height, d.width};
    return {false, static_cast<int>(d.cols), 1, 1};
}

void truncated_normal(std::span<float> out, float stddev, std::uint64_t seed)
{
    // mt19937_64 is the same with every standard library (the standard
    // specifies its output); kept so that initial parameters, and the
    // results of a seed, stay those of earlier versions.
    std::mt19937_64 rng(seed);
    for (auto& v : out) {
        double z;
        do {
            z = random::standard_normal(rng);
        } while (std::fabs(z) > 2.0);
        v = static_cast<float>(z * stddev);
    }
}

std::vector<flat_range> backward_buckets(const std::vector<tensor_spec>& tensors, std::size_t bytes)
{
    std::vector<flat_range> buckets;
    if (tensors.empty()) return buckets;
    std::size_t end = tensors.back().offset + tensors.back().size;
    for (std::size_t k = tensors.size(); k-- > 0;) {
        const std::size_t begin = tensors[k].offset;
        if ((end - begin) * sizeof(float) >= bytes || k == 0) {
            buckets.push_back({begin, end});
            end = begin;
        }
    }
    return buckets;
}

}  // namespace pstrain::model
