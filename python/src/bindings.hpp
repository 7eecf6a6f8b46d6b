// The parts of pstrain's Python bindings that the product module
// (pstrain._core, core.cpp) and the tests' LocalCluster module
// (tests/python/local_cluster.cpp, built only by tests/python/run-python-tests)
// share: the settings dict as the library's training_settings, the wire
// precision by name, and a Client made over a transport.
//
// Both modules compile bindings.cpp; the Client types are registered once,
// by pstrain._core (which the test module imports first): pybind11 finds a
// type across modules by its C++ name, so they live in a named namespace.
// Called with the GIL held, from any thread that holds it.
#pragma once

#include <pstrain/client.hpp>
#include <pstrain/error.hpp>
#include <pstrain/settings.hpp>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pstrain::python {

namespace py = pybind11;
namespace ps = pstrain::ps;

// Throws pstrain::error (pstrain.Error in Python) with `message`.
[[noreturn]] void fail(const std::string& message);

// `s` seconds rounded up; refuses (fail) one not in (0, 1e9], naming `what`.
std::chrono::seconds whole_seconds(double s, const char* what);

// {"optimizer": {...}, "sync": bool, "replicas_to_aggregate": int, "max_staleness": int or None,
//  "elastic": bool, "tables": [{...}]}
ps::training_settings settings_of_dict(const py::dict& d);

// The wire precision a word names ("fp32" or "bf16").
ps::wire_precision wire_precision_of(const std::string& word);

// A tensor of connect()'s (name, shape) pairs, and its count of floats.
struct tensor_spec {
    std::string name;
    std::vector<py::ssize_t> shape;
    std::uint64_t size = 1;
};

// pstrain.Client: the C++ client, its tensors by name, its tables' row
// widths, and the arrays that pending tickets write into (kept alive until
// their ticket completes).  pstrain.ChiefClient is py_chief_client.
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
    // None: every tensor; a name: that tensor; a list of names: the
    // tensors, next to each other in the vector (a bucket).
    ps::shard_range range(const py::object& name) const
    {
        if (name.is_none()) return c_->everything();
        if (py::isinstance<py::str>(name)) return c_->tensor(tensor_index(name.cast<std::string>()));
        const auto names = name.cast<std::vector<std::string>>();
        if (names.empty()) fail("an empty list of tensor names: give at least one");
        std::vector<ps::shard_range> parts;
        for (const auto& n : names) parts.push_back(c_->tensor(tensor_index(n)));
        std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
        for (std::size_t k = 1; k < parts.size(); ++k)
            if (parts[k].begin != parts[k - 1].end)
                fail("tensors " + names_of(names) +
                     " are not next to each other in the vector: give tensors that are, or one at a time");
        return {parts.front().begin, parts.back().end};
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
    static std::string names_of(const std::vector<std::string>& names)
    {
        std::string s;
        for (const auto& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
        return s;
    }
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

// A Client (worker `index` 0: a ChiefClient) of the PS tasks over `net` for
// the (name, shape) pairs `tensors`; `owner` keeps the transport alive;
// `keep`, when given, also holds the C++ client.
py::object make_client(std::shared_ptr<void> owner, ps::transport& net, int index, int num_workers,
                       const py::list& tensors, const py::object& settings, double timeout, bool share_memory,
                       ps::wire_precision precision, std::vector<std::string> worker_names,
                       std::vector<std::shared_ptr<ps::client>>* keep = nullptr);

}  // namespace pstrain::python
