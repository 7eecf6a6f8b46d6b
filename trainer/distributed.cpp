#include "trainer/distributed.hpp"

#include "common/error.hpp"
#include "common/log.hpp"
#include "trainer/ps/server.hpp"
#include "trainer/worker.hpp"

#include <fmt/format.h>

namespace pstrain::trainer {

int run_distributed(const train_options& o, bootstrap::job j)
{
    log::set_prefix(fmt::format("pstrain[{}]", j.name()));
    if (o.replicas_to_aggregate > j.num_workers)
        throw error(fmt::format("--replicas-to-aggregate {} is more than the {} workers: use at most {}",
                                o.replicas_to_aggregate, j.num_workers, j.num_workers));
    log::debug("role from {}: {} of {} ps + {} workers", j.source, j.name(), j.num_ps, j.num_workers);
    transport::context ctx;
    transport::worker w(ctx, o.progress == "spin" ? transport::progress_mode::spin : transport::progress_mode::event);
    auto peers = bootstrap::connect(j, w, std::chrono::seconds(o.bootstrap_timeout));
    int code = j.me.role == role::ps ? ps::run_server(o, j, w, peers) : run_worker(o, j, w, peers);
    for (auto& ep : peers.peers)
        if (ep) ep->close(std::chrono::milliseconds(500));
    for (auto& ep : peers.accepted)
        if (ep) ep->close(std::chrono::milliseconds(200));
    log::debug("progress: {} spins, {} sleeps on the event fd", w.spins(), w.sleeps());
    return code;
}

}  // namespace pstrain::trainer
