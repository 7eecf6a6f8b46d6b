#include "trainer/model/model.hpp"

#include "pstrain/error.hpp"
#include "common/parse.hpp"

#include <cmath>
#include <random>

#include <fmt/format.h>

namespace pstrain::model {

void model::add_tensor(std::string name, std::vector<int> shape)
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

void truncated_normal(std::span<float> out, float stddev, std::uint64_t seed)
{
    std::mt19937_64 rng(seed);
    auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
    for (auto& v : out) {
        double z;
        do {
            // Box-Muller, one value per pair of draws.
            z = std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform());
        } while (std::fabs(z) > 2.0);
        v = static_cast<float>(z * stddev);
    }
}

}  // namespace pstrain::model
