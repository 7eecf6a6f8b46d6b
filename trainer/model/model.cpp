#include "trainer/model/model.hpp"

#include "pstrain/error.hpp"
#include "common/parse.hpp"
#include "common/random.hpp"

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

std::vector<int> parse_hidden_units(const std::string& text)
{
    std::vector<int> units;
    for (std::string_view item : split(text, ',')) {
        auto v = parse_count(item, 1, 1 << 16);
        if (!v)
            throw error(fmt::format("--hidden-units {}: '{}' is not a layer width: give a comma list of whole numbers from 1 to 65536, e.g. 256,128",
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

}  // namespace pstrain::model
