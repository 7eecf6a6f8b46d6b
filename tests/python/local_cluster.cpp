// pstrain._local_cluster: the tests' LocalCluster, PS tasks in C++ threads
// of the test process over the library's loopback transport (no Slurm, no
// UCX).  A test harness, not the product: tests/python/run-python-tests
// builds it beside pstrain._core into tests/python/pkg, and nothing
// installs it.  The Python class over it is tests/python/local_cluster.py.
//
// It makes its clients with the product's own code (python/src/bindings.cpp,
// compiled in here too) and returns them as pstrain._core's Client and
// ChiefClient, which this module imports first: pybind11 finds those types
// registered by pstrain._core (by their C++ names), and pstrain._core's
// error translation turns pstrain::error into pstrain.Error here as well.
#include "../../python/src/bindings.hpp"

#include <pstrain/loopback.hpp>
#include <pstrain/server.hpp>
#include <pstrain/settings.hpp>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace py = pybind11;
namespace ps = pstrain::ps;

namespace {

using pstrain::python::fail;
using pstrain::python::make_client;
using pstrain::python::settings_of_dict;
using pstrain::python::wire_precision_of;

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

}  // namespace

PYBIND11_MODULE(_local_cluster, m)
{
    m.doc() = "The tests' LocalCluster (PS tasks in threads over the loopback); not installed.";
    py::module_::import("pstrain._core");  // registers Client, ChiefClient and pstrain.Error
    bind_local_cluster(m);
}
