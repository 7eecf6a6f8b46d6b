// pstrain-bench: push+pull goodput between one worker and one PS, through
// the trainer's own code (ps::client on the worker side, the real PS server
// with SGD on the other), over a static spec on loopback.
//
//   pstrain-bench server --port P [--progress event|spin]
//   pstrain-bench client --port P --bytes S [--iters N] [--warmup W]
//   srun -n2 --ps=1 --workers=1 --mpi=pmix pstrain-bench pmix --bytes S ...
//
// The pmix form is the production path (PMIx bootstrap, a fast endpoint
// for payloads); the static form's endpoints all detect failures, which
// costs UCX's zero-copy paths.
//
// The client prints one JSON line: bytes, iterations, seconds, and goodput
// in MiB/s counting both directions (2 * S per round trip), the unit
// ucx_perftest reports.  bench/ps-goodput runs both beside ucx_perftest.
#include "common/log.hpp"
#include "pstrain/client.hpp"
#include "pstrain/error.hpp"
#include "pstrain/server.hpp"
#include "library/bootstrap/job.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

using namespace pstrain;

namespace {

bootstrap::job make_job(role r, int port)
{
    bootstrap::job j;
    j.how = bootstrap::mode::static_spec;
    j.source = "pstrain-bench";
    j.spec.ps = {fmt::format("127.0.0.1:{}", port)};
    j.spec.worker = {fmt::format("127.0.0.1:{}", port + 1)};
    j.num_ps = j.num_workers = 1;
    j.me = {r, 0};
    return j;
}

}  // namespace

int main(int argc, char** argv)
{
    CLI::App app{"pstrain-bench: push+pull goodput between a worker and a PS"};
    int port = 26000, iters = 2000, warmup = 100;
    std::size_t bytes = 318040;
    std::string progress = "event", shared_memory = "auto";
    bool sync = false;
    app.require_subcommand(1);
    auto* server = app.add_subcommand("server", "run the PS side");
    auto* client = app.add_subcommand("client", "run the worker side and print the result");
    auto* pmix = app.add_subcommand("pmix", "under srun --ps=1 --workers=1 --mpi=pmix: both sides by role");
    for (auto* sub : {server, client, pmix}) {
        sub->add_option("--port", port, "the PS's port")->check(CLI::Range(1024, 65000));
        sub->add_option("--progress", progress)->check(CLI::IsMember({"event", "spin"}));
        sub->add_flag("--sync", sync, "the PS in sync mode (default: async, as the trainer's default)");
        sub->add_option("--shared-memory", shared_memory,
                        "auto (the PS maps the worker's buffers on one host) or off (messages)")
            ->check(CLI::IsMember({"auto", "off"}));
    }
    for (auto* sub : {client, pmix}) {
        sub->add_option("--bytes", bytes, "message size: the shard's bytes")
            ->check(CLI::Range(std::size_t(4), std::size_t(1) << 30));
        sub->add_option("--iters", iters)->check(CLI::Range(1, 100000000));
        sub->add_option("--warmup", warmup)->check(CLI::Range(0, 1000000));
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        bootstrap::job j;
        if (*pmix) {
            auto found = bootstrap::detect_job({});
            if (!found || found->how != bootstrap::mode::pmix || found->num_ps != 1 || found->num_workers != 1)
                throw error(
                    "pstrain-bench pmix: run it as srun -n2 --ps=1 --workers=1 --mpi=pmix pstrain-bench pmix ...");
            j = *found;
        } else {
            j = make_job(*server ? role::ps : role::worker, port);
        }
        const auto mode = progress == "spin" ? ucx::progress_mode::spin : ucx::progress_mode::event;
        if (j.me.role == role::ps) {
            log::set_prefix("pstrain-bench[ps]");
            auto net = bootstrap::connect(j, mode, std::chrono::seconds(30));
            ps::server_config c;
            c.training.optimizer.kind = ps::optimizer_kind::sgd;
            c.training.optimizer.learning_rate = 1e-9f;
            c.training.sync = sync;
            c.share_memory = shared_memory == "auto";
            ps::server s(*net, c, {});
            s.run();
            net->close(false);
            return 0;
        }
        log::set_prefix("pstrain-bench[worker]");
        auto net = bootstrap::connect(j, mode, std::chrono::seconds(30));
        const std::size_t n = bytes / sizeof(float);
        ps::client_config cc;
        cc.num_params = n;
        cc.timeout = std::chrono::seconds(60);
        cc.share_memory = shared_memory == "auto";
        double seconds = 0;
        bool mapped = false;
        {
            ps::chief_client c(*net, cc);  // the benchmark's one worker is the chief
            std::ranges::fill(c.params(), 0.5f);
            std::ranges::fill(c.grads(), 0.25f);
            c.wait(c.async_init());
            for (int i = 0; i < warmup; ++i) c.step(0);
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < iters; ++i) c.step(0);
            seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            c.shutdown();
            mapped = c.mapped(0);
        }
        const double moved = 2.0 * static_cast<double>(n * sizeof(float)) * iters;
        nlohmann::json result{{"bytes", n * sizeof(float)},
                              {"iters", iters},
                              {"seconds", seconds},
                              {"round_trip_us", seconds / iters * 1e6},
                              {"goodput_MiBps", moved / seconds / (1 << 20)},
                              {"progress", progress},
                              {"shared_memory", mapped}};
        fmt::print("{}\n", result.dump());
        net->close(false);
        return 0;
    } catch (const error& e) {
        log::error("{}", e.what());
        return 1;
    }
}
