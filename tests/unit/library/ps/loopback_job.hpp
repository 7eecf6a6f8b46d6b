// A parameter-server job in one process for the PS tests: a loopback
// network, one server per PS task running in its own thread, and one client
// per worker that the test drives from its own thread, in the order it
// chooses.
#pragma once

#include "pstrain/client.hpp"
#include "pstrain/error.hpp"
#include "pstrain/loopback.hpp"
#include "pstrain/server.hpp"

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace pstrain::testing {

// How a server's run() ended.
struct run_end {
    bool returned = false;  // within the time finish() gave it
    std::optional<ps::server_outcome> outcome;
    bool threw = false;
    bool pstrain_error = false;  // the exception is a pstrain::error
    bool peer_error = false;     // ... and a pstrain::peer_error
    std::string who, what;       // its peer() and what()
};

struct job_options {
    std::uint64_t num_params = 6;
    bool share_memory = true;  // servers and clients
    std::vector<std::uint64_t> tensor_sizes;
    std::vector<ps::client_config::tensor_kind> tensor_kinds;
    std::chrono::seconds client_timeout{3};
    std::vector<std::uint32_t> table_dims;          // the clients' embedding tables
    std::optional<ps::training_settings> settings;  // the clients' (the chief sends them)
    // Each worker's wire precision, in worker order (empty: all fp32; a
    // shorter list: the rest fp32).
    std::vector<ps::wire_precision> precisions;
    // Spare PS tasks (server_config::spare), after the PS tasks: servers
    // num_ps .. num_ps + spares - 1.
    int spares = 0;
};

class ps_job {
public:
    ps_job(int num_ps, int num_workers, ps::server_config config, ps::server_hooks hooks = {}, job_options o = {})
        : net_(num_ps + o.spares, num_workers)
    {
        for (int w = 0; w < num_workers; ++w) {
            ps::client_config c;
            c.index = w;
            c.num_workers = num_workers;
            c.num_params = o.num_params;
            c.tensor_sizes = o.tensor_sizes;
            c.tensor_kinds = o.tensor_kinds;
            c.timeout = o.client_timeout;
            c.share_memory = o.share_memory;
            c.table_dims = o.table_dims;
            c.settings = o.settings;
            if (o.spares > 0) c.num_ps = num_ps;
            if (static_cast<std::size_t>(w) < o.precisions.size()) c.precision = o.precisions[w];
            if (w == 0) clients_.push_back(std::make_unique<ps::chief_client>(net_.worker(w), c));
            else clients_.push_back(std::make_unique<ps::client>(net_.worker(w), c));
            configs_.push_back(c);
        }
        config.num_ps = num_ps;
        config.share_memory = o.share_memory;
        for (int p = 0; p < num_ps + o.spares; ++p) {
            config.index = p < num_ps ? p : 0;
            config.spare = p >= num_ps;
            servers_.push_back(std::make_unique<ps::server>(net_.ps(p), config, hooks));
        }
        for (int p = 0; p < num_ps + o.spares; ++p) {
            std::promise<run_end> promise;
            ends_.push_back(promise.get_future());
            threads_.emplace_back([this, p, promise = std::move(promise)]() mutable { promise.set_value(serve(p)); });
        }
    }

    // A server still running (a test failed half-way) ends when its
    // workers are gone; the clients go after the servers, which may write
    // into their buffers until then.
    ~ps_job()
    {
        bool running = false;
        for (auto& e : ends_)
            if (e.valid() && e.wait_for(std::chrono::seconds(0)) != std::future_status::ready) running = true;
        if (running)
            for (std::size_t w = 0; w < clients_.size(); ++w) net_.kill_worker(static_cast<int>(w));
        for (auto& t : threads_) t.join();
    }

    ps::loopback_network& net() { return net_; }
    ps::client& worker(int w) { return *clients_.at(static_cast<std::size_t>(w)); }
    // A new client in killed worker w's place (not the chief), on a fresh
    // transport: worker(w) from now on.
    ps::client& restart_worker(int w)
    {
        auto& slot = clients_.at(static_cast<std::size_t>(w));
        auto& net = net_.restart_worker(w);
        retired_.push_back(std::move(slot));
        slot = std::make_unique<ps::client>(net, configs_.at(static_cast<std::size_t>(w)));
        return *slot;
    }
    // Worker 0's client, with the chief's calls.
    ps::chief_client& chief() { return static_cast<ps::chief_client&>(*clients_.at(0)); }
    // Only after finish(p) returned with `returned`.
    ps::server& server(int p) { return *servers_.at(static_cast<std::size_t>(p)); }
    int num_ps() const { return static_cast<int>(servers_.size()); }

    // Waits (at most `limit`) for PS p's run() to end.
    run_end finish(int p = 0, std::chrono::milliseconds limit = std::chrono::seconds(5))
    {
        auto& f = ends_.at(static_cast<std::size_t>(p));
        if (!f.valid()) return ended_.at(static_cast<std::size_t>(p));
        if (f.wait_for(limit) != std::future_status::ready) return {};
        ended_.resize(ends_.size());
        return ended_[static_cast<std::size_t>(p)] = f.get();
    }

private:
    run_end serve(int p)
    {
        run_end e;
        e.returned = true;
        try {
            e.outcome = servers_[static_cast<std::size_t>(p)]->run();
        } catch (const pstrain::peer_error& x) {
            e.threw = e.pstrain_error = e.peer_error = true;
            e.who = x.peer();
            e.what = x.what();
        } catch (const pstrain::error& x) {
            e.threw = e.pstrain_error = true;
            e.what = x.what();
        } catch (const std::exception& x) {
            e.threw = true;
            e.what = x.what();
        }
        return e;
    }

    ps::loopback_network net_;
    std::vector<ps::client_config> configs_;
    std::vector<std::unique_ptr<ps::client>> clients_, retired_;  // retired_: killed and restarted ones
    std::vector<std::unique_ptr<ps::server>> servers_;
    std::vector<std::future<run_end>> ends_;
    std::vector<run_end> ended_;
    std::vector<std::thread> threads_;
};

inline std::vector<float> to_vector(std::span<const float> s) { return {s.begin(), s.end()}; }

inline void fill(std::span<float> to, const std::vector<float>& from)
{
    std::copy(from.begin(), from.end(), to.begin());
}

}  // namespace pstrain::testing
