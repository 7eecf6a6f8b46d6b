// pstrain._core: the Python bindings of libpstrain-ps (pybind11).  Thin
// over the C++ client: a Client owns a ps::client and names its tensors;
// param()/grad() are NumPy arrays over the client's exchange buffers (no
// copy) whose base is the Client, so the buffers live as long as any view.
// The calls that wait (wait, step, stats, snapshot, shutdown, connecting)
// release the GIL.  pstrain::error becomes pstrain.Error and
// pstrain::peer_error pstrain.PeerError with the peer's name in .peer.
//
// What the tests' LocalCluster module shares with it (the settings dict,
// making a Client) is in bindings.{hpp,cpp}; the LocalCluster harness itself
// is tests/python/local_cluster.cpp, built only for the tests.
#include "bindings.hpp"

#include <pstrain/bootstrap.hpp>
#include <pstrain/client.hpp>
#include <pstrain/embedding.hpp>
#include <pstrain/error.hpp>
#include <pstrain/settings.hpp>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/numpy.h>

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;
namespace ps = pstrain::ps;

namespace {

using pstrain::python::fail;
using pstrain::python::make_client;
using pstrain::python::py_chief_client;
using pstrain::python::py_client;
using pstrain::python::whole_seconds;
using pstrain::python::wire_precision_of;

// ------------------------------------------------------------ errors

PyObject* error_type = nullptr;
PyObject* peer_error_type = nullptr;

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
            [](py_client& c, const py::object& name, std::uint64_t position, bool skip, bool bucket) {
                auto r = c.range(name);
                return unlocked([&] {
                    return bucket ? c.c().async_push_bucket(r, position, skip) : c.c().async_push(r, position, skip);
                });
            },
            py::arg("name") = py::none(), py::arg("position") = 0, py::arg("skip") = false, py::arg("bucket") = false,
            "Starts pushing the gradient of tensor `name` (None: every tensor; a list of names: those tensors, "
            "next to each other in the vector: a bucket of a sync step); returns a ticket. skip: the gradient has "
            "inf or NaN and nothing of it is applied (sync: nothing of its step, on every PS; a skip is of every "
            "tensor). bucket: one bucket of an overlapped step, whose buckets cover every tensor once (async: "
            "each PS applies it on arrival as the step's one update and counts the step once the buckets are in).")
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
    m.def(
        "shard_of_key", [](std::uint64_t key, std::size_t num_ps) { return ps::shard_of_key(key, num_ps); },
        py::arg("key"), py::arg("num_ps"), "The PS (of num_ps) that holds the rows of `key`.");
}
