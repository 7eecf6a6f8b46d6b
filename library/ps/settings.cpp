#include "pstrain/settings.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pstrain::ps {

namespace {

// "its learning rate is 0.01 on worker 0 and 0.1 on this PS"
template <typename T>
std::optional<std::string> differs(const char* what, const T& a, const T& b, const std::string& here,
                                   const std::string& there)
{
    if (a == b) return std::nullopt;
    return fmt::format("{} is {} on {} and {} on {}", what, a, here, b, there);
}

std::optional<std::string> table_difference(std::size_t k, const embedding_config& a, const embedding_config& b,
                                            const std::string& here, const std::string& there)
{
    const auto name = [k](const char* field) { return fmt::format("embedding table {}'s {}", k, field); };
    std::optional<std::string> d;
    if ((d = differs(name("dim").c_str(), a.dim, b.dim, here, there))) return d;
    if ((d = differs(name("optimizer").c_str(), row_optimizer_name(a.optimizer), row_optimizer_name(b.optimizer), here,
                     there)))
        return d;
    if ((d = differs(name("learning rate").c_str(), a.learning_rate, b.learning_rate, here, there))) return d;
    if ((d = differs(name("initial accumulator").c_str(), a.adagrad_initial, b.adagrad_initial, here, there))) return d;
    if ((d = differs(name("beta1").c_str(), a.beta1, b.beta1, here, there))) return d;
    if ((d = differs(name("beta2").c_str(), a.beta2, b.beta2, here, there))) return d;
    if ((d = differs(name("epsilon").c_str(), a.epsilon, b.epsilon, here, there))) return d;
    if ((d = differs(name("l1").c_str(), a.l1, b.l1, here, there))) return d;
    if ((d = differs(name("l2").c_str(), a.l2, b.l2, here, there))) return d;
    if ((d = differs(name("ftrl beta").c_str(), a.ftrl_beta, b.ftrl_beta, here, there))) return d;
    if ((d = differs(name("init range").c_str(), a.init_range, b.init_range, here, there))) return d;
    if ((d = differs(name("seed").c_str(), a.seed, b.seed, here, there))) return d;
    if ((d = differs(name("admit after").c_str(), a.admit_after, b.admit_after, here, there))) return d;
    if ((d = differs(name("evict after").c_str(), a.evict_after, b.evict_after, here, there))) return d;
    return differs(name("row limit").c_str(), a.max_rows, b.max_rows, here, there);
}

}  // namespace

std::optional<std::string> settings_difference(const training_settings& a, const training_settings& b,
                                               const std::string& here, const std::string& there)
{
    std::optional<std::string> d;
    const auto &oa = a.optimizer, &ob = b.optimizer;
    if ((d = differs("the optimizer", optimizer_name(oa.kind), optimizer_name(ob.kind), here, there))) return d;
    if ((d = differs("the learning rate", oa.learning_rate, ob.learning_rate, here, there))) return d;
    // Each optimizer's own parameters; the others do not matter.
    if (oa.kind == optimizer_kind::momentum && (d = differs("the momentum", oa.momentum, ob.momentum, here, there)))
        return d;
    if (oa.kind == optimizer_kind::adagrad &&
        (d = differs("Adagrad's initial accumulator", oa.adagrad_initial, ob.adagrad_initial, here, there)))
        return d;
    if (oa.kind == optimizer_kind::adam) {
        if ((d = differs("Adam's beta1", oa.beta1, ob.beta1, here, there))) return d;
        if ((d = differs("Adam's beta2", oa.beta2, ob.beta2, here, there))) return d;
        if ((d = differs("Adam's epsilon", oa.epsilon, ob.epsilon, here, there))) return d;
    }
    if ((d = differs("the update mode", a.sync ? "sync" : "async", b.sync ? "sync" : "async", here, there))) return d;
    if (a.sync && (d = differs("the gradients aggregated per step (0: every worker)", a.replicas_to_aggregate,
                               b.replicas_to_aggregate, here, there)))
        return d;
    if ((d = differs("the job (elastic: workers leave and come back)", a.elastic ? "elastic" : "not elastic",
                     b.elastic ? "elastic" : "not elastic", here, there)))
        return d;
    if (!a.sync && (d = differs("the staleness bound (pushes ahead of the slowest worker; negative: none)",
                                std::max(a.max_staleness, unbounded_staleness),
                                std::max(b.max_staleness, unbounded_staleness), here, there)))
        return d;
    if ((d = differs("the number of embedding tables", a.tables.size(), b.tables.size(), here, there))) return d;
    for (std::size_t k = 0; k < a.tables.size(); ++k)
        if ((d = table_difference(k, a.tables[k], b.tables[k], here, there))) return d;
    return std::nullopt;
}

}  // namespace pstrain::ps
