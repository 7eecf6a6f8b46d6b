// Helpers of the model tests: random data and an Adam training run.
#pragma once

#include "trainer/data/dataset.hpp"
#include "trainer/data/sampler.hpp"
#include "trainer/model/model.hpp"
#include "library/ps/shard.hpp"

#include <random>
#include <vector>

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

// Random images of c x h x w (the shape kept, as an IDX file's).
inline data::dataset make_image_data(std::size_t rows, int c, int h, int w, int classes, unsigned seed)
{
    auto d = make_random_data(rows, std::size_t(c) * h * w, classes, seed);
    d.channels = c;
    d.height = h;
    d.width = w;
    return d;
}

// How adam_loss_curve drives the model between its steps, as the training
// loop may: the next batch gathered ahead (model::prefetch, when the
// sampler knows it), an evaluation every `evaluate_every` steps (0: none).
struct curve_options {
    bool prefetch = false;
    int evaluate_every = 0;
};

// The loss of every step of an Adam run of `steps` batches of `batch` rows,
// from the seed's initialisation and data order.
inline std::vector<double> adam_loss_curve(model::model& m, const data::dataset& d, float learning_rate,
                                           std::uint64_t seed, int steps, std::size_t batch, curve_options how = {})
{
    ps::optimizer_config cfg;
    cfg.kind = ps::optimizer_kind::adam;
    cfg.learning_rate = learning_rate;
    ps::parameter_shard shard({0, m.num_params()}, cfg);
    std::vector<float> init(m.num_params()), g(m.num_params());
    m.initialize(init, seed);
    shard.assign(init);
    data::sampler s(d.rows, 1, 0, seed, false);
    std::vector<std::uint32_t> rows;
    std::vector<double> losses;
    for (int step = 0; step < steps; ++step) {
        s.next_batch(batch, rows);
        losses.push_back(m.compute_gradients(shard.values(), d, rows, g).loss);
        std::vector<std::uint32_t> next;
        if (how.prefetch && s.peek_batch(batch, next)) m.prefetch(d, next);
        shard.apply(g);
        if (how.evaluate_every > 0 && (step + 1) % how.evaluate_every == 0) m.evaluate(shard.values(), d);
    }
    return losses;
}

}  // namespace pstrain::testing
