// Optimizers applied on the PS to its shard: plain functions over spans of
// (param, grad, state).  State slots per parameter: sgd 0, momentum 1,
// adagrad 1, adam 2 (m then v, each a full-length block).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace pstrain::ps {

enum class optimizer_kind { sgd, momentum, adagrad, adam };

struct optimizer_config {
    optimizer_kind kind = optimizer_kind::sgd;
    float learning_rate = 0.01f;
    float momentum = 0.9f;                                // momentum
    float adagrad_initial = 0.1f;                         // adagrad accumulator start (TensorFlow's default)
    float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // adam
};

// "sgd", "momentum", "adagrad" or "adam"; throws pstrain::error otherwise.
optimizer_kind parse_optimizer(const std::string& name);
std::string optimizer_name(optimizer_kind kind);
int state_slots(optimizer_kind kind);

// Fresh state for n parameters (slots * n values).
void initialize_state(const optimizer_config& cfg, std::span<float> state);

// One update of params by grads.  `step` is the 1-based count of updates
// applied so far including this one (Adam's bias correction).
void apply_update(const optimizer_config& cfg, std::span<float> params, std::span<const float> grads,
                  std::span<float> state, std::uint64_t step);
// The same out of place: `out` receives the updated `in` (they may be the
// same span).
void apply_update_to(const optimizer_config& cfg, std::span<const float> in, std::span<float> out,
                     std::span<const float> grads, std::span<float> state, std::uint64_t step);
// The same for part of a shard: the state's slots are `stride` values apart
// (the whole shard's length) and `state` starts at this part's first value.
void apply_update_to(const optimizer_config& cfg, std::span<const float> in, std::span<float> out,
                     std::span<const float> grads, float* state, std::size_t stride, std::uint64_t step);

}  // namespace pstrain::ps
