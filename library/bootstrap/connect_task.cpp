// pstrain/bootstrap.hpp over the bootstrap's job and connect.
#include "pstrain/bootstrap.hpp"

#include "library/bootstrap/job.hpp"

namespace pstrain::ps {

std::optional<connected_task> connect_task(const bootstrap_options& o)
{
    bootstrap::classic_flags flags{o.ps_hosts, o.worker_hosts, o.job_name, o.task_index};
    auto j = bootstrap::detect_job(flags);
    if (!j) return std::nullopt;
    connected_task t;
    t.me.is_ps = j->me.role == role::ps;
    t.me.index = j->me.index;
    t.me.num_ps = j->num_ps;
    t.me.num_workers = j->num_workers;
    t.me.name = j->name();
    t.me.source = j->source;
    for (int i = 0; i < j->num_workers; ++i) t.worker_names.push_back(j->peer_name(role::worker, i));
    pstrain::ucx::heartbeat_config beats;
    beats.interval = o.heartbeat_interval;
    t.net = bootstrap::connect(*j, pstrain::ucx::progress_mode::event, o.timeout, beats);
    return t;
}

}  // namespace pstrain::ps
