// pstrain._core: the Python bindings of libpstrain-ps (pybind11).  Thin
// over the C++ client: a Client owns a ps::client and names its tensors;
// param()/grad() are NumPy arrays over the client's exchange buffers (no
// copy) whose base is the Client, so the buffers live as long as any view.
// The calls that wait (wait, step, stats, snapshot, shutdown, connecting)
// release the GIL.  pstrain::error becomes pstrain.Error and
// pstrain::peer_error pstrain.PeerError with the peer's name in .peer.
//
// LocalCluster runs PS tasks in C++ threads over the library's loopback
// transport, for tests and notebooks: no Slurm, no UCX.
#include <pstrain/bootstrap.hpp>
#include <pstrain/client.hpp>
#include <pstrain/embedding.hpp>
#include <pstrain/error.hpp>
#include <pstrain/loopback.hpp>
#include <pstrain/server.hpp>
#include <pstrain/settings.hpp>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/numpy.h>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;
namespace ps = pstrain::ps;

namespace {

// ------------------------------------------------------------ errors

PyObject* error_type = nullptr;
PyObject* peer_error_type = nullptr;

[[noreturn]] void fail(const std::string& message) { throw pstrain::error(message); }

void raise_peer_error(const pstrain::peer_error& e)
{
    py::object type = py::reinterpret_borrow<py::object>(peer_error_type);
    py::object value = type(py::str(e.what()));
    value.attr("peer") = py::str(e.peer());
    PyErr_SetObject(peer_error_type, value.ptr());
}

void translate_errors(std::exception_ptr p)
{
    try {
        if (p) std::rethrow_exception(p);
    } catch (const pstrain::peer_error& e) {
        raise_peer_error(e);
    } catch (const pstrain::error& e) {
        PyErr_SetString(error_type, e.what());
    }
}

// ------------------------------------------------------------ settings

std::chrono::seconds whole_seconds(double s, const char* what)
{
    if (!(s > 0) || s > 1e9)
        fail(std::string(what) + " must be a positive number of seconds, got " + std::to_string(s));
    return std::chrono::seconds(static_cast<long long>(std::ceil(s)));
}

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

// {"optimizer": {...}, "sync": bool, "replicas_to_aggregate": int, "max_staleness": int or None,
//  "elastic": bool, "tables": [{...}]}
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

// ------------------------------------------------------------ arrays

std::string shape_text(const py::array& a)
{
    std::string s = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

std::string dtype_text(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

bool is_c_contiguous(const py::array& a) { return (a.flags() & py::array::c_style) != 0; }

// A 1-D C-contiguous uint64 or int64 array (int64 reinterpreted).
std::span<const std::uint64_t> keys_of(const py::handle& h, const char* name)
{
    if (!py::isinstance<py::array>(h))
        fail(std::string(name) + " must be a numpy array of uint64 or int64 keys: pass numpy.asarray(" + name +
             ", dtype=numpy.uint64)");
    auto a = py::reinterpret_borrow<py::array>(h);
    char kind = a.dtype().kind();
    if (a.ndim() != 1 || a.itemsize() != 8 || (kind != 'u' && kind != 'i') || !is_c_contiguous(a))
        fail(std::string(name) + " must be a 1-D C-contiguous uint64 or int64 array, got " + dtype_text(a) + " " +
             shape_text(a) + ": pass numpy.ascontiguousarray(" + name + ", dtype=numpy.uint64).ravel()");
    return {static_cast<const std::uint64_t*>(a.data()), static_cast<std::size_t>(a.size())};
}

// A C-contiguous float32 array of exactly n floats (writable when asked).
std::span<float> floats_of(const py::handle& h, const char* name, std::size_t n, bool writable)
{
    if (!py::isinstance<py::array>(h))
        fail(std::string(name) + " must be a numpy float32 array: pass numpy.asarray(" + name +
             ", dtype=numpy.float32)");
    auto a = py::reinterpret_borrow<py::array>(h);
    if (a.dtype().kind() != 'f' || a.itemsize() != 4 || !is_c_contiguous(a))
        fail(std::string(name) + " must be a C-contiguous float32 array, got " + dtype_text(a) + " " + shape_text(a) +
             ": pass numpy.ascontiguousarray(" + name + ", dtype=numpy.float32)");
    if (writable && !a.writeable()) fail(std::string(name) + " is read-only: pass a writable array");
    if (static_cast<std::size_t>(a.size()) != n)
        fail(std::string(name) + " has " + std::to_string(a.size()) + " floats, the keys need " + std::to_string(n) +
             " (len(keys) * dim): size it to match");
    return {static_cast<float*>(writable ? a.mutable_data() : const_cast<void*>(a.data())), n};
}

py::dict stats_dict(const ps::ps_stats& s)
{
    py::list workers;
    for (const auto& w : s.workers) {
        py::dict d;
        d["gradients"] = w.gradients;
        d["stale"] = w.stale;
        d["staleness_sum"] = w.staleness_sum;
        d["staleness_max"] = w.staleness_max;
        workers.append(d);
    }
    py::dict d;
    d["step"] = s.step;
    d["bytes_received"] = s.bytes_received;
    d["bytes_sent"] = s.bytes_sent;
    d["workers"] = workers;
    return d;
}

const char* outcome_name(ps::snapshot_result::status s)
{
    switch (s) {
    case ps::snapshot_result::status::taken: return "taken";
    case ps::snapshot_result::status::moved_on: return "moved_on";
    case ps::snapshot_result::status::failed: break;
    }
    return "failed";
}

// ------------------------------------------------------------ the client

struct tensor_spec {
    std::string name;
    std::vector<py::ssize_t> shape;
    std::uint64_t size = 1;
};

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

// The wire precision a word names ("fp32" or "bf16").
ps::wire_precision wire_precision_of(const std::string& word)
{
    const auto p = ps::wire_precision_named(word);
    if (!p) fail("wire_precision '" + word + "' is none pstrain knows: use 'fp32' or 'bf16'");
    return *p;
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

class py_client {
public:
    // `owner` keeps the transport alive (and is released after the client).
    py_client(std::shared_ptr<void> owner, std::shared_ptr<ps::client> c, std::vector<tensor_spec> tensors,
              std::vector<std::uint32_t> table_dims)
        : owner_(std::move(owner)), c_(std::move(c)), tensors_(std::move(tensors)), dims_(std::move(table_dims))
    {
        for (std::size_t k = 0; k < tensors_.size(); ++k) index_[tensors_[k].name] = k;
    }

    ps::client& c() { return *c_; }
    ps::chief_client& chief() { return static_cast<ps::chief_client&>(*c_); }

    std::size_t tensor_index(const std::string& name) const
    {
        auto it = index_.find(name);
        if (it == index_.end()) fail("no tensor named '" + name + "': connect() was given " + names_text());
        return it->second;
    }
    ps::shard_range range(const py::object& name) const
    {
        return name.is_none() ? c_->everything() : c_->tensor(tensor_index(name.cast<std::string>()));
    }
    // A float32 view of `buffer` for tensor `name`, whose base is `self`.
    static py::array view(py::object self, std::span<float> buffer, const std::string& name)
    {
        auto& me = self.cast<py_client&>();
        std::size_t k = me.tensor_index(name);
        auto r = me.c_->tensor(k);
        return py::array(py::dtype::of<float>(), me.tensors_[k].shape, buffer.data() + r.begin, self);
    }
    static py::array flat(py::object self, std::span<float> buffer)
    {
        return py::array(py::dtype::of<float>(), std::vector<py::ssize_t>{static_cast<py::ssize_t>(buffer.size())},
                         buffer.data(), self);
    }
    std::size_t dim(std::size_t table) const
    {
        if (table >= dims_.size())
            fail("no table " + std::to_string(table) + ": connect() was given " + std::to_string(dims_.size()) +
                 " tables in settings.tables");
        return dims_[table];
    }
    std::vector<std::string> names() const
    {
        std::vector<std::string> n;
        for (const auto& t : tensors_) n.push_back(t.name);
        return n;
    }

    // An array that must live until its ticket completes.
    void hold(ps::ticket t, py::object o) { held_[t] = std::move(o); }
    void release(ps::ticket t) { held_.erase(t); }

private:
    std::string names_text() const
    {
        std::string s;
        for (const auto& t : tensors_) s += (s.empty() ? "'" : ", '") + t.name + "'";
        return s;
    }

    std::shared_ptr<void> owner_;  // before c_: destroyed after it
    std::shared_ptr<ps::client> c_;
    std::vector<tensor_spec> tensors_;
    std::unordered_map<std::string, std::size_t> index_;
    std::vector<std::uint32_t> dims_;
    std::map<ps::ticket, py::object> held_;
};

struct py_chief_client : py_client {
    using py_client::py_client;
};

py::object make_client(std::shared_ptr<void> owner, ps::transport& net, int index, int num_workers,
                       const py::list& tensors, const py::object& settings, double timeout, bool share_memory,
                       ps::wire_precision precision, std::vector<std::string> worker_names,
                       std::vector<std::shared_ptr<ps::client>>* keep = nullptr)
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

// ------------------------------------------------------------ the task

struct py_context {
    std::shared_ptr<ps::connected_task> task;
    bool connected = false;

    py::object connect(const py::list& tensors, const py::object& settings, double timeout, bool share_memory,
                       const std::string& wire_precision)
    {
        if (task->me.is_ps) fail("this task is a ps task: only workers connect a client (run a server on ps tasks)");
        if (connected) fail("this task already has a client: call connect() once per task");
        std::shared_ptr<void> owner = task;
        auto c = make_client(owner, *task->net, task->me.index, task->me.num_workers, tensors, settings, timeout,
                             share_memory, wire_precision_of(wire_precision), task->worker_names);
        connected = true;
        return c;
    }
};

py::object connect_task(double timeout, double heartbeat_interval, const std::optional<std::string>& ps_hosts,
                        const std::optional<std::string>& worker_hosts, const std::optional<std::string>& job_name,
                        const std::optional<int>& task_index)
{
    ps::bootstrap_options o;
    o.timeout = whole_seconds(timeout, "timeout");
    if (heartbeat_interval < 0) fail("heartbeat_interval must be 0 (none) or more seconds");
    o.heartbeat_interval = std::chrono::milliseconds(static_cast<long long>(heartbeat_interval * 1000));
    o.ps_hosts = ps_hosts.value_or("");
    o.worker_hosts = worker_hosts.value_or("");
    o.job_name = job_name.value_or("");
    o.task_index = task_index.value_or(-1);
    std::optional<ps::connected_task> t;
    {
        py::gil_scoped_release unlocked;
        t = ps::connect_task(o);
    }
    if (!t) fail("no role: run under sbatch/srun --ps=N --workers=M, or set TF_CONFIG");
    return py::cast(py_context{std::make_shared<ps::connected_task>(std::move(*t))});
}

// ------------------------------------------------------------ LocalCluster

// The servers' run() in threads over one loopback network.  Clients made
// here are kept until the servers have ended (a server may write into a
// client's buffers until then).
class local_cluster {
public:
    local_cluster(int num_ps, int num_workers, const py::object& settings, bool share_memory,
                  const std::string& wire_precision)
        : num_workers_(num_workers), share_memory_(share_memory), precision_(wire_precision_of(wire_precision))
    {
        if (num_ps < 1 || num_workers < 1)
            fail(
                "a LocalCluster needs at least one ps and one worker: pass num_ps=1 or more and num_workers=1 or more");
        net_ = std::make_shared<ps::loopback_network>(num_ps, num_workers);
        ps::server_config config;
        config.num_ps = num_ps;
        config.share_memory = share_memory;
        config.precision = precision_;
        config.shutdown_wait = std::chrono::seconds(5);
        if (settings.is_none()) {
            config.settings_from_chief = true;
        } else {
            config.training = settings_of_dict(settings.cast<py::dict>());
        }
        for (int p = 0; p < num_ps; ++p) {
            config.index = p;
            servers_.push_back(std::make_unique<ps::server>(net_->ps(p), config, ps::server_hooks{}));
            ends_.emplace_back();
        }
        for (int p = 0; p < num_ps; ++p) threads_.emplace_back([this, p] { serve(p); });
    }
    ~local_cluster() { close(); }
    local_cluster(const local_cluster&) = delete;
    local_cluster& operator=(const local_cluster&) = delete;

    // wire_precision: the servers' unless given (another is refused at the hello).
    py::object connect(int index, const py::list& tensors, const py::object& settings, double timeout,
                       bool share_memory, const std::optional<std::string>& wire_precision)
    {
        if (closed_) fail("the LocalCluster is closed: make a new one");
        if (index < 0 || index >= num_workers_)
            fail("worker " + std::to_string(index) + " is not in this LocalCluster of " + std::to_string(num_workers_) +
                 " workers: use 0.." + std::to_string(num_workers_ - 1));
        std::vector<std::string> names;
        for (int w = 0; w < num_workers_; ++w) names.push_back("worker " + std::to_string(w));
        std::shared_ptr<void> owner = net_;
        return make_client(owner, net_->worker(index), index, num_workers_, tensors, settings, timeout,
                           share_memory && share_memory_,
                           wire_precision ? wire_precision_of(*wire_precision) : precision_, names, &clients_);
    }

    // Ends the servers (the workers' side of the network is cut first when
    // one still runs) and waits for their threads.
    void close()
    {
        if (closed_) return;
        closed_ = true;
        py::gil_scoped_release unlocked;
        for (int w = 0; w < num_workers_; ++w) net_->kill_worker(w);
        for (auto& t : threads_) t.join();
        servers_.clear();
        clients_.clear();
    }

    void kill_ps(int p) { net_->kill_ps(check_ps(p)); }
    void kill_worker(int w) { net_->kill_worker(w); }

    py::dict server_stats(int p)
    {
        auto& s = *servers_.at(static_cast<std::size_t>(check_ps(p)));
        auto sparse = s.sparse();
        py::dict d;
        d["global_step"] = s.global_step();
        d["stale_gradients"] = s.stale_gradients();
        d["keys_pulled"] = sparse.keys_pulled;
        d["keys_pushed"] = sparse.keys_pushed;
        d["error"] = ends_[static_cast<std::size_t>(p)].error;
        return d;
    }

private:
    struct end {
        std::string error;  // what the server's run() threw, if it did
    };

    int check_ps(int p) const
    {
        if (closed_ || p < 0 || p >= static_cast<int>(servers_.size()))
            fail("ps " + std::to_string(p) + " is not a running task of this LocalCluster");
        return p;
    }
    void serve(int p)
    {
        try {
            servers_[static_cast<std::size_t>(p)]->run();
        } catch (const std::exception& e) {
            ends_[static_cast<std::size_t>(p)].error = e.what();
        }
    }

    int num_workers_;
    bool share_memory_;
    ps::wire_precision precision_;
    bool closed_ = false;
    std::shared_ptr<ps::loopback_network> net_;
    std::vector<std::unique_ptr<ps::server>> servers_;
    std::vector<end> ends_;
    std::vector<std::thread> threads_;
    std::vector<std::shared_ptr<ps::client>> clients_;
};

// ------------------------------------------------------------ the module

// Runs a call that starts a request without the GIL: the first request of
// a client waits for its hello's answer (which a PS gives a worker only
// after the chief's hello: the chief may be another thread of this process).
template <typename F>
ps::ticket unlocked(F&& start)
{
    py::gil_scoped_release released;
    return start();
}

void bind_client(py::module_& m)
{
    py::class_<py_client>(m, "Client", "A worker's client of the PS tasks (see pstrain.Client).")
        .def(
            "param",
            [](py::object self, const std::string& name) {
                return py_client::view(self, self.cast<py_client&>().c().params(), name);
            },
            py::arg("name"), "A float32 view (no copy) of tensor `name`'s values in the exchange buffer.")
        .def(
            "grad",
            [](py::object self, const std::string& name) {
                return py_client::view(self, self.cast<py_client&>().c().grads(), name);
            },
            py::arg("name"), "A float32 view (no copy) of tensor `name`'s gradient in the exchange buffer.")
        .def_property_readonly(
            "params", [](py::object self) { return py_client::flat(self, self.cast<py_client&>().c().params()); },
            "The whole flat values buffer (a float32 view).")
        .def_property_readonly(
            "grads", [](py::object self) { return py_client::flat(self, self.cast<py_client&>().c().grads()); },
            "The whole flat gradients buffer (a float32 view).")
        .def_property_readonly("tensor_names", &py_client::names, "The tensors' names, in the flat vector's order.")
        .def(
            "pull",
            [](py_client& c, const py::object& name) {
                auto r = c.range(name);
                return unlocked([&] { return c.c().async_pull(r); });
            },
            py::arg("name") = py::none(), "Starts pulling tensor `name` (None: every tensor); returns a ticket.")
        .def(
            "push",
            [](py_client& c, const py::object& name, std::uint64_t position) {
                auto r = c.range(name);
                return unlocked([&] { return c.c().async_push(r, position); });
            },
            py::arg("name") = py::none(), py::arg("position") = 0,
            "Starts pushing the gradient of tensor `name` (None: every tensor); returns a ticket.")
        .def(
            "wait",
            [](py_client& c, ps::ticket t) {
                {
                    py::gil_scoped_release unlocked;
                    c.c().wait(t);
                }
                c.release(t);
            },
            py::arg("ticket"), "Completes a ticket (releases the GIL while it waits).")
        .def(
            "test",
            [](py_client& c, ps::ticket t) {
                bool done = c.c().test(t);
                if (done) c.release(t);
                return done;
            },
            py::arg("ticket"), "True when the ticket has completed (never waits).")
        .def(
            "step",
            [](py_client& c, std::uint64_t position) {
                py::gil_scoped_release unlocked;
                c.c().step(position);
            },
            py::arg("position") = 0, "Pushes every gradient and waits (sync: the step barrier).")
        .def(
            "pull_rows",
            [](py_client& c, std::size_t table, const py::object& keys, const py::object& out) {
                auto k = keys_of(keys, "keys");
                auto o = floats_of(out, "out", k.size() * c.dim(table), true);
                auto t = unlocked([&] { return c.c().async_pull_rows(table, k, o); });
                c.hold(t, out);
                return t;
            },
            py::arg("table"), py::arg("keys"), py::arg("out"),
            "Starts pulling the rows of `keys` of table `table` into `out`; returns a ticket.")
        .def(
            "lookup_rows",
            [](py_client& c, std::size_t table, const py::object& keys, const py::object& out) {
                auto k = keys_of(keys, "keys");
                auto o = floats_of(out, "out", k.size() * c.dim(table), true);
                auto t = unlocked([&] { return c.c().async_lookup_rows(table, k, o); });
                c.hold(t, out);
                return t;
            },
            py::arg("table"), py::arg("keys"), py::arg("out"),
            "Starts reading the rows of `keys` for evaluation (zeros for unseen keys); returns a ticket.")
        .def(
            "push_rows",
            [](py_client& c, std::size_t table, const py::object& keys, const py::object& grads) {
                auto k = keys_of(keys, "keys");
                auto g = floats_of(grads, "grads", k.size() * c.dim(table), false);
                return unlocked([&] { return c.c().async_push_rows(table, k, g); });
            },
            py::arg("table"), py::arg("keys"), py::arg("grads"),
            "Starts one update of the rows of unique `keys` with `grads`; returns a ticket.")
        .def(
            "stats",
            [](py_client& c) {
                std::vector<ps::ps_stats> s;
                {
                    py::gil_scoped_release unlocked;
                    s = c.c().stats();
                }
                py::list out;
                for (const auto& x : s) out.append(stats_dict(x));
                return out;
            },
            "Every PS's counters, one dict per PS (waits for the answers).")
        .def_property_readonly(
            "global_step", [](py_client& c) { return c.c().global_step(); },
            "PS 0's global step, as of the last reply.")
        .def(
            "leave",
            [](py_client& c) {
                py::gil_scoped_release unlocked;
                c.c().leave();
            },
            "This worker's program ends before the chief ended the job: every PS lets it go instead of counting it "
            "lost (not the chief's: it calls shutdown).  The client cannot be used after it.  Releases the GIL.")
        .def_property_readonly(
            "done", [](py_client& c) { return c.c().done(); }, "A reply said training is done.")
        .def_property_readonly(
            "stopped", [](py_client& c) { return c.c().stopped(); }, "A reply said training stopped for preemption.")
        .def_property_readonly(
            "restored_step", [](py_client& c) { return c.c().restored_step(); },
            "The snapshot step the PS tasks restored, or None.")
        .def_property_readonly(
            "live_workers",
            [](py_client& c) {
                const auto m = c.c().live_workers();
                return py::make_tuple(m.live, m.rank);
            },
            "(alive, rank): PS 0's count of the workers it has not lost and this worker's rank among them, as of "
            "its last values reply ((0, 0) before any); an elastic job re-splits its data by them.");

    py::class_<py_chief_client, py_client>(m, "ChiefClient",
                                           "The chief's client: a Client that starts, saves and ends the job.")
        .def(
            "init", [](py_chief_client& c) { return unlocked([&] { return c.chief().async_init(); }); },
            "Starts the PS tasks from params(); returns a ticket.")
        .def(
            "restore",
            [](py_chief_client& c, std::uint64_t step) {
                return unlocked([&] { return c.chief().async_restore(step); });
            },
            py::arg("step"), "Every PS restores its snapshot of `step`; returns a ticket.")
        .def(
            "snapshot",
            [](py_chief_client& c, std::uint64_t step) {
                std::vector<ps::snapshot_result> r;
                {
                    py::gil_scoped_release unlocked;
                    r = c.chief().snapshot(step);
                }
                py::list out;
                for (const auto& x : r) {
                    py::dict d;
                    d["outcome"] = outcome_name(x.outcome);
                    d["step"] = x.step;
                    d["bytes"] = x.bytes;
                    d["checksum"] = x.checksum;
                    out.append(d);
                }
                return out;
            },
            py::arg("step"), "Asks every PS for a snapshot at `step`; one dict per PS.")
        .def(
            "shutdown",
            [](py_chief_client& c, bool stop) {
                py::gil_scoped_release unlocked;
                c.chief().shutdown(stop);
            },
            py::arg("stop") = false, "Ends training on every PS (stop: for preemption).");
}

void bind_task(py::module_& m)
{
    py::class_<py_context>(m, "Context", "This task in the job: its role and peers (see pstrain.init).")
        .def_property_readonly(
            "role", [](const py_context& c) { return c.task->me.is_ps ? "ps" : "worker"; }, "\"ps\" or \"worker\".")
        .def_property_readonly(
            "task_index", [](const py_context& c) { return c.task->me.index; }, "The index within the role.")
        .def_property_readonly(
            "num_workers", [](const py_context& c) { return c.task->me.num_workers; }, "Workers in the job.")
        .def_property_readonly(
            "num_ps", [](const py_context& c) { return c.task->me.num_ps; }, "PS tasks in the job.")
        .def_property_readonly(
            "is_chief", [](const py_context& c) { return c.task->me.is_chief(); },
            "Worker 0, which initialises and ends the job.")
        .def_property_readonly(
            "name", [](const py_context& c) { return c.task->me.name; }, "How errors name this task (\"worker 1\").")
        .def_property_readonly(
            "source", [](const py_context& c) { return c.task->me.source; },
            "Where the role came from (PMIx, the flags, TF_CONFIG).")
        .def_property_readonly(
            "worker_names", [](const py_context& c) { return c.task->worker_names; },
            "How each worker is named in errors.")
        .def("connect", &py_context::connect, py::arg("tensors"), py::arg("settings") = py::none(),
             py::arg("timeout") = 600.0, py::arg("share_memory") = true, py::arg("wire_precision") = "fp32",
             "A client of the PS tasks for these tensors.");
    m.def("connect_task", &connect_task, py::arg("timeout") = 60.0, py::arg("heartbeat_interval") = 5.0,
          py::arg("ps_hosts") = py::none(), py::arg("worker_hosts") = py::none(), py::arg("job_name") = py::none(),
          py::arg("task_index") = py::none(), "Finds this task's role and connects it (see pstrain.init).");
}

void bind_local_cluster(py::module_& m)
{
    py::class_<local_cluster>(m, "LocalCluster", "PS tasks in threads of this process over the loopback transport.")
        .def(py::init<int, int, const py::object&, bool, const std::string&>(), py::arg("num_ps") = 1,
             py::arg("num_workers") = 1, py::arg("settings") = py::none(), py::arg("share_memory") = true,
             py::arg("wire_precision") = "fp32",
             "Starts num_ps servers in threads; settings: a dict of the training settings, or None (the chief's).")
        .def("connect", &local_cluster::connect, py::arg("index"), py::arg("tensors"), py::arg("settings") = py::none(),
             py::arg("timeout") = 60.0, py::arg("share_memory") = true, py::arg("wire_precision") = py::none(),
             "A client for worker `index`.")
        .def("close", &local_cluster::close, "Ends the servers and waits for them.")
        .def("kill_ps", &local_cluster::kill_ps, py::arg("index"), "PS `index` dies: its peers see it fail.")
        .def("kill_worker", &local_cluster::kill_worker, py::arg("index"), "Worker `index` dies.")
        .def("server_stats", &local_cluster::server_stats, py::arg("index"),
             "PS `index`'s global step, stale gradients, rows pulled and pushed, and its error if it ended with one.");
}

void bind_errors(py::module_& m)
{
    error_type =
        PyErr_NewExceptionWithDoc("pstrain._core.Error", "pstrain's errors: one line naming the problem and the fix.",
                                  PyExc_RuntimeError, nullptr);
    peer_error_type = PyErr_NewExceptionWithDoc("pstrain._core.PeerError",
                                                "An error from or about one peer; .peer names it (\"ps 0 (n1)\").",
                                                error_type, nullptr);
    m.attr("Error") = py::handle(error_type);
    m.attr("PeerError") = py::handle(peer_error_type);
    py::register_exception_translator(&translate_errors);
}

}  // namespace

PYBIND11_MODULE(_core, m)
{
    m.doc() = "pstrain's parameter-server library (libpstrain-ps) for Python; use the pstrain package.";
    bind_errors(m);
    bind_client(m);
    bind_task(m);
    bind_local_cluster(m);
    m.def(
        "shard_of_key", [](std::uint64_t key, std::size_t num_ps) { return ps::shard_of_key(key, num_ps); },
        py::arg("key"), py::arg("num_ps"), "The PS (of num_ps) that holds the rows of `key`.");
}
