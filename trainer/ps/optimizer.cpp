#include "trainer/ps/optimizer.hpp"

#include "common/error.hpp"
#include "trainer/compute/elementwise.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace pstrain::ps {

using namespace pstrain::compute;

optimizer_kind parse_optimizer(const std::string& name)
{
    if (name == "sgd") return optimizer_kind::sgd;
    if (name == "momentum") return optimizer_kind::momentum;
    if (name == "adagrad") return optimizer_kind::adagrad;
    if (name == "adam") return optimizer_kind::adam;
    throw error(fmt::format("--optimizer {}: use sgd, momentum, adagrad or adam", name));
}

std::string optimizer_name(optimizer_kind kind)
{
    switch (kind) {
    case optimizer_kind::sgd: return "sgd";
    case optimizer_kind::momentum: return "momentum";
    case optimizer_kind::adagrad: return "adagrad";
    case optimizer_kind::adam: return "adam";
    }
    return "?";
}

int state_slots(optimizer_kind kind)
{
    switch (kind) {
    case optimizer_kind::sgd: return 0;
    case optimizer_kind::momentum: return 1;
    case optimizer_kind::adagrad: return 1;
    case optimizer_kind::adam: return 2;
    }
    return 0;
}

void initialize_state(const optimizer_config& cfg, std::span<float> state)
{
    std::fill(state.begin(), state.end(), cfg.kind == optimizer_kind::adagrad ? cfg.adagrad_initial : 0.0f);
}

void apply_update(const optimizer_config& cfg, std::span<float> params, std::span<const float> grads, std::span<float> state,
                  std::uint64_t step)
{
    const std::size_t n = params.size();
    if (grads.size() != n || state.size() != n * static_cast<std::size_t>(state_slots(cfg.kind)))
        throw error(fmt::format("optimizer: {} params, {} grads, {} state values do not match", n, grads.size(), state.size()));
    float* p = params.data();
    const float* g = grads.data();
    switch (cfg.kind) {
    case optimizer_kind::sgd:
        for (std::size_t i = 0; i < n; ++i) sgd_update(p[i], g[i], cfg.learning_rate);
        break;
    case optimizer_kind::momentum:
        for (std::size_t i = 0; i < n; ++i) momentum_update(p[i], state[i], g[i], cfg.learning_rate, cfg.momentum);
        break;
    case optimizer_kind::adagrad:
        for (std::size_t i = 0; i < n; ++i) adagrad_update(p[i], state[i], g[i], cfg.learning_rate);
        break;
    case optimizer_kind::adam: {
        const double t = static_cast<double>(std::max<std::uint64_t>(step, 1));
        const float lr_t = static_cast<float>(cfg.learning_rate * std::sqrt(1.0 - std::pow(cfg.beta2, t)) /
                                              (1.0 - std::pow(cfg.beta1, t)));
        float* __restrict m = state.data();
        float* __restrict v = state.data() + n;
        float* __restrict pr = p;
        const float* __restrict gr = g;
        const float b1 = cfg.beta1, b2 = cfg.beta2, eps = cfg.epsilon;
        for (std::size_t i = 0; i < n; ++i) adam_update(pr[i], m[i], v[i], gr[i], lr_t, b1, b2, eps);
        break;
    }
    }
}

}  // namespace pstrain::ps
