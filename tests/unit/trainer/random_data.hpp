// A small random classification dataset for the model tests.
#pragma once

#include "trainer/data/dataset.hpp"

#include <random>

namespace pstrain::testing {

inline data::dataset make_random_data(std::size_t rows, std::size_t cols, int classes, unsigned seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> x;
    data::dataset d;
    d.rows = rows;
    d.cols = cols;
    d.num_classes = classes;
    for (std::size_t i = 0; i < rows * cols; ++i) d.features.push_back(x(rng));
    for (std::size_t i = 0; i < rows; ++i) d.labels.push_back(static_cast<int>(rng() % static_cast<unsigned>(classes)));
    return d;
}

}  // namespace pstrain::testing
