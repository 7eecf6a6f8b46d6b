// What pstrain._core and the tests' LocalCluster module share (see
// bindings.hpp).
#include "bindings.hpp"

#include <cmath>

namespace pstrain::python {

void fail(const std::string& message) { throw pstrain::error(message); }

std::chrono::seconds whole_seconds(double s, const char* what)
{
    if (!(s > 0) || s > 1e9)
        fail(std::string(what) + " must be a positive number of seconds, got " + std::to_string(s));
    return std::chrono::seconds(static_cast<long long>(std::ceil(s)));
}

namespace {

template <typename T>
T item(const py::dict& d, const char* key, T fallback)
{
    return d.contains(key) && !d[key].is_none() ? d[key].cast<T>() : fallback;
}

ps::optimizer_config optimizer_of(const py::dict& d)
{
    ps::optimizer_config o;
    o.kind = ps::parse_optimizer(item<std::string>(d, "name", "sgd"));
    o.learning_rate = item<float>(d, "lr", o.learning_rate);
    o.momentum = item<float>(d, "momentum", o.momentum);
    o.beta1 = item<float>(d, "beta1", o.beta1);
    o.beta2 = item<float>(d, "beta2", o.beta2);
    o.epsilon = item<float>(d, "epsilon", o.epsilon);
    o.adagrad_initial = item<float>(d, "adagrad_initial", o.adagrad_initial);
    return o;
}

ps::embedding_config table_of(const py::dict& d)
{
    ps::embedding_config t;
    long long dim = item<long long>(d, "dim", 16);
    if (dim <= 0 || dim > (1 << 20)) fail("a table's dim must be in 1..1048576, got " + std::to_string(dim));
    t.dim = static_cast<std::uint32_t>(dim);
    t.optimizer = ps::parse_row_optimizer(item<std::string>(d, "optimizer", "adagrad"));
    t.learning_rate = item<float>(d, "lr", t.learning_rate);
    t.init_range = item<float>(d, "init_range", t.init_range);
    t.seed = item<std::uint64_t>(d, "seed", t.seed);
    t.admit_after = item<std::uint32_t>(d, "admit_after", t.admit_after);
    t.evict_after = item<std::uint64_t>(d, "evict_after", t.evict_after);
    t.max_rows = item<std::uint64_t>(d, "max_rows", t.max_rows);
    t.l1 = item<float>(d, "l1", t.l1);
    t.l2 = item<float>(d, "l2", t.l2);
    t.ftrl_beta = item<float>(d, "ftrl_beta", t.ftrl_beta);
    t.beta1 = item<float>(d, "beta1", t.beta1);
    t.beta2 = item<float>(d, "beta2", t.beta2);
    t.epsilon = item<float>(d, "epsilon", t.epsilon);
    t.adagrad_initial = item<float>(d, "adagrad_initial", t.adagrad_initial);
    return t;
}

}  // namespace

ps::training_settings settings_of_dict(const py::dict& d)
{
    ps::training_settings s;
    if (d.contains("optimizer") && !d["optimizer"].is_none())
        s.optimizer = optimizer_of(d["optimizer"].cast<py::dict>());
    s.sync = item<bool>(d, "sync", false);
    s.replicas_to_aggregate = item<int>(d, "replicas_to_aggregate", 0);
    if (s.replicas_to_aggregate < 0) fail("replicas_to_aggregate must be 0 (every worker) or more");
    s.max_staleness = item<int>(d, "max_staleness", ps::unbounded_staleness);
    if (s.max_staleness < 0 && d.contains("max_staleness") && !d["max_staleness"].is_none())
        fail("max_staleness must be 0 (lock-step) or more, or None for no bound");
    s.elastic = item<bool>(d, "elastic", false);
    if (d.contains("tables") && !d["tables"].is_none())
        for (auto t : d["tables"].cast<py::list>()) s.tables.push_back(table_of(t.cast<py::dict>()));
    return s;
}

namespace {

std::vector<tensor_spec> tensors_of(const py::list& tensors)
{
    std::vector<tensor_spec> out;
    std::unordered_map<std::string, int> seen;
    for (auto t : tensors) {
        auto pair = t.cast<py::tuple>();
        if (pair.size() != 2) fail("tensors must be (name, shape) pairs, e.g. (\"fc.weight\", (10, 784))");
        tensor_spec s;
        s.name = pair[0].cast<std::string>();
        py::object shape = pair[1];
        if (py::isinstance<py::int_>(shape)) shape = py::make_tuple(shape);
        for (auto d : shape.cast<py::tuple>()) {
            long long n = d.cast<long long>();
            if (n <= 0)
                fail("tensor '" + s.name + "' has a dimension of " + std::to_string(n) +
                     ": every dimension must be 1 or more");
            s.shape.push_back(static_cast<py::ssize_t>(n));
            s.size *= static_cast<std::uint64_t>(n);
        }
        if (!seen.emplace(s.name, 0).second)
            fail("tensor '" + s.name + "' is named twice: give each tensor its own name");
        out.push_back(std::move(s));
    }
    if (out.empty()) fail("no tensors: give connect() the model's (name, shape) pairs");
    return out;
}

ps::client_config config_of(int index, int num_workers, const std::vector<tensor_spec>& tensors,
                            const std::optional<ps::training_settings>& settings, double timeout, bool share_memory,
                            ps::wire_precision precision, std::vector<std::string> worker_names)
{
    ps::client_config c;
    c.index = index;
    c.num_workers = num_workers;
    for (const auto& t : tensors) {
        c.tensor_sizes.push_back(t.size);
        c.num_params += t.size;
    }
    c.timeout = whole_seconds(timeout, "timeout");
    c.share_memory = share_memory;
    c.precision = precision;
    c.worker_names = std::move(worker_names);
    if (settings) {
        for (const auto& t : settings->tables) c.table_dims.push_back(t.dim);
        if (index == 0) c.settings = settings;
    }
    return c;
}

}  // namespace

ps::wire_precision wire_precision_of(const std::string& word)
{
    const auto p = ps::wire_precision_named(word);
    if (!p) fail("wire_precision '" + word + "' is none pstrain knows: use 'fp32' or 'bf16'");
    return *p;
}

py::object make_client(std::shared_ptr<void> owner, ps::transport& net, int index, int num_workers,
                       const py::list& tensors, const py::object& settings, double timeout, bool share_memory,
                       ps::wire_precision precision, std::vector<std::string> worker_names,
                       std::vector<std::shared_ptr<ps::client>>* keep)
{
    auto specs = tensors_of(tensors);
    std::optional<ps::training_settings> s;
    if (!settings.is_none()) s = settings_of_dict(settings.cast<py::dict>());
    auto config = config_of(index, num_workers, specs, s, timeout, share_memory, precision, std::move(worker_names));
    auto dims = config.table_dims;
    std::shared_ptr<ps::client> c;
    if (index == 0) c = std::make_shared<ps::chief_client>(net, config);
    else c = std::make_shared<ps::client>(net, config);
    if (keep) keep->push_back(c);
    if (index == 0) return py::cast(py_chief_client(std::move(owner), c, std::move(specs), std::move(dims)));
    return py::cast(py_client(std::move(owner), c, std::move(specs), std::move(dims)));
}

}  // namespace pstrain::python
