#include "trainer/app/serve.hpp"

#include "common/log.hpp"
#include "library/bootstrap/job.hpp"
#include "pstrain/error.hpp"
#include "trainer/app/options.hpp"
#include "trainer/app/tasks.hpp"

#include <string>

#include <CLI/CLI.hpp>

namespace pstrain::trainer {

int serve_command(int argc, char** argv)
{
    CLI::App app{"pstrain serve: a parameter-server task for workers whose program says how to train (pstrain's "
                 "Python package: the model's shapes, the optimizer, sync or async and the embedding tables come "
                 "in the chief's hello, so no model flags); its role comes from srun --mpi=pmix with --ps/--workers, "
                 "the classic flags or TF_CONFIG; the chief's shutdown ends it",
                 "pstrain serve"};
    train_options o;
    std::string progress = "event", shared_memory = "auto";
    app.add_option("--checkpoint-dir", o.checkpoint_dir,
                   "the shared directory the chief's checkpoints write this PS's shard into, and restore it from");
    app.add_option("--full-checkpoint-every", o.full_checkpoint_every,
                   "embedding tables: every Nth checkpoint saves every row, the others only the rows changed since")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    app.add_option("--threads", o.threads,
                   "update threads for a large shard (default: OMP_NUM_THREADS, else the CPUs Slurm gave the task)")
        ->check(CLI::Range(1, 1024));
    app.add_option("--shared-memory", shared_memory,
                   "auto (read gradients from and write values into the memory of workers on this host) or off")
        ->check(CLI::IsMember({"auto", "off"}))
        ->capture_default_str();
    app.add_option("--progress", progress, "event (block on UCX's event fd) or spin (busy-poll)")
        ->check(CLI::IsMember({"event", "spin"}))
        ->capture_default_str();
    app.add_option("--bootstrap-timeout", o.bootstrap_timeout, "seconds to wait for every peer at start-up")
        ->check(CLI::Range(1, 86400))
        ->capture_default_str();
    app.add_option("--heartbeat-interval", o.heartbeat_interval,
                   "seconds between heartbeats; a peer silent for 6 of them is lost (0: none)")
        ->check(CLI::Range(0.0, 3600.0))
        ->capture_default_str();
    app.add_option("--stall-timeout", o.stall_timeout,
                   "seconds without progress after which the task names what it waits for, writes its stacks and "
                   "exits with status 124 (0: never)")
        ->check(CLI::Range(0, 7 * 86400))
        ->capture_default_str();
    app.add_option("--ps-hosts,--ps_hosts", o.ps_hosts, "without PMIx: comma list of the PS tasks' host:port");
    app.add_option("--worker-hosts,--worker_hosts", o.worker_hosts,
                   "without PMIx: comma list of the workers' host:port");
    app.add_option("--job-name,--job_name", o.job_name, "without PMIx: ps")->check(CLI::IsMember({"ps", "worker"}));
    app.add_option("--task-index,--task_index", o.task_index, "without PMIx: index within --job-name")
        ->check(CLI::Range(0, 65535));
    app.add_flag("--profile", o.profile, "at the end, log where the task's time went");
    app.add_option("--log-level", o.log_level, "error, warn, info or debug")
        ->check(CLI::IsMember({"error", "warn", "info", "debug"}))
        ->capture_default_str();
    if (auto exit_status = parse_tool_command(app, argc, argv, "pstrain serve")) return *exit_status;
    o.progress = progress == "spin" ? ucx_progress::spin : ucx_progress::event;
    o.shared_memory = shared_memory == "auto";
    log::set_prefix("pstrain serve");
    try {
        log::set_level(log::parse_level(o.log_level));
        auto job = bootstrap::detect_job({o.ps_hosts, o.worker_hosts, o.job_name, o.task_index});
        if (!job) {
            log::error("no role given: run pstrain serve under srun --mpi=pmix with --ps=N --workers=M (torch-train.sh "
                       "does), set TF_CONFIG, or give --ps-hosts/--worker-hosts/--job-name/--task-index");
            return 2;
        }
        return run_serving_ps(o, std::move(*job));
    } catch (const error& e) {
        log::error("{}", e.what());
    } catch (const std::bad_alloc&) {
        log::error("out of memory: add PS tasks, or ask Slurm for more memory (--mem)");
    } catch (const std::exception& e) {
        log::error("internal error: {}", e.what());
    }
    return 1;
}

}  // namespace pstrain::trainer
