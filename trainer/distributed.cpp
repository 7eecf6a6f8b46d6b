#include "trainer/distributed.hpp"

#include "common/error.hpp"
#include "common/log.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/ps/server.hpp"
#include "trainer/signals.hpp"
#include "trainer/worker.hpp"

#include <fmt/format.h>

namespace pstrain::trainer {

int run_distributed(const train_options& o, bootstrap::job j)
{
    log::set_prefix(fmt::format("pstrain[{}]", j.name()));
    if (o.replicas_to_aggregate > j.num_workers)
        throw error(fmt::format("--replicas-to-aggregate {} is more than the {} workers: use at most {}",
                                o.replicas_to_aggregate, j.num_workers, j.num_workers));
    if (!o.checkpoint_dir.empty()) {
        checkpoint::prepare_directory(o.checkpoint_dir);  // every task: it fails here, before any training
        catch_termination();
    }
    log::debug("role from {}: {} of {} ps + {} workers", j.source, j.name(), j.num_ps, j.num_workers);
    transport::context ctx;
    transport::worker w(ctx, o.progress == "spin" ? transport::progress_mode::spin : transport::progress_mode::event);
    auto peers = bootstrap::connect(j, w, std::chrono::seconds(o.bootstrap_timeout));
    auto close_all = [&](bool force) {
        for (auto* list : {&peers.fast, &peers.peers, &peers.accepted})
            for (auto& ep : *list)
                if (ep) ep->close(std::chrono::milliseconds(force ? 100 : 500), force);
    };
    int code = 1;
    try {
        code = j.me.role == role::ps ? ps::run_server(o, j, w, peers) : run_worker(o, j, w, peers);
    } catch (...) {
        close_all(true);  // drops what is still queued for lost peers
        throw;
    }
    close_all(code != 0);
    log::debug("progress: {} spins, {} sleeps on the event fd", w.spins(), w.sleeps());
    return code;
}

}  // namespace pstrain::trainer
