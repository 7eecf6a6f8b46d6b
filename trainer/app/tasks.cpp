#include "trainer/app/tasks.hpp"

#include "common/denormals.hpp"
#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "pstrain/loopback.hpp"
#include "trainer/app/ctr_work.hpp"
#include "trainer/app/join_file.hpp"
#include "trainer/app/report.hpp"
#include "trainer/app/session.hpp"
#include "trainer/app/signals.hpp"
#include "trainer/app/threads.hpp"
#include "trainer/app/training_loop.hpp"
#include "trainer/checkpoint/checkpoint.hpp"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <exception>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <unistd.h>

namespace pstrain::trainer {

ps::server_config server_config_for(const train_options& o, int index, int num_ps)
{
    ps::server_config c;
    c.index = index;
    c.num_ps = num_ps;
    c.training = training_settings_for(o);
    c.share_memory = o.shared_memory;
    c.precision = o.wire_precision;
    // The PS computes as the rest of the process does (PSTRAIN_DENORMALS, early_init.cpp).
    c.flush_denormals = current_denormal_mode() == denormal_mode::flush;
    // A PS's CPUs share its large updates (threads.hpp: --threads, else Slurm's share).
    c.update_threads = fit_threads(
                           o.threads, [](const char* name) { return std::getenv(name); }, affinity_cpus())
                           .threads;
    return c;
}

ps::server_hooks server_hooks_for(const train_options& o, progress_meter* meter)
{
    static progress_meter unwatched;
    progress_meter* busy_meter = meter ? meter : &unwatched;
    ps::server_hooks h;
    const auto train_steps = static_cast<std::uint64_t>(o.train_steps);
    const std::string dir = o.checkpoint_dir;
    h.step_completed = [train_steps](std::uint64_t step) { return step >= train_steps; };
    std::vector<std::string> table_names;
    if (o.ctr) {
        const auto spec = model::make_wide_deep(wide_deep_config_for(o));
        for (const auto& t : spec->tables()) table_names.push_back(t.name);
    }
    h.table_full = [table_names](std::size_t table, std::uint64_t rows) {
        log::warn(
            "embedding table '{}' is full on this PS ({} rows, --max-table-rows): new keys read as zeros and are not "
            "learned; raise --max-table-rows, add PS tasks, or drop rare keys with --admit-after or --evict-after",
            table < table_names.size() ? table_names[table] : std::to_string(table), rows);
    };
    // Embedding tables: each PS's chain of table files (checkpoint/table_chain.hpp).
    auto chains = std::make_shared<checkpoint::table_chains>(o.full_checkpoint_every);
    h.snapshot = [dir, busy_meter, chains](const ps::shard_snapshot& s) {
        progress_meter::busy busy(*busy_meter, "writing its checkpoint shard");
        checkpoint::shard_meta m;
        m.global_step = s.step;  // the chief's step names the checkpoint (async: this shard may be a few updates on)
        m.ps_index = s.index;
        m.num_ps = s.num_ps;
        m.range = s.range;
        m.total_params = s.num_params;
        m.optimizer = ps::optimizer_name(s.optimizer);
        m.state_slots = ps::state_slots(s.optimizer);
        m.updates = s.updates;
        m.positions.assign(s.positions.begin(), s.positions.end());
        try {
            const auto t0 = std::chrono::steady_clock::now();
            auto e = checkpoint::write_shard(dir, m, s.values, s.state);
            log::debug("wrote {} ({} bytes) in {:.3f}s", e.file, e.bytes,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            if (!s.tables.empty()) {
                const auto t1 = std::chrono::steady_clock::now();
                const auto te = chains->save(dir, s.step, s.index, s.num_ps, s.tables);
                log::debug("wrote {} ({}, {} bytes) in {:.3f}s", te.file, te.full ? "full" : "incremental", te.bytes,
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
            }
            return ps::snapshot_receipt{e.bytes, e.crc32};
        } catch (const error& e) {
            log::error("checkpoint at global step {} failed: {}", s.step, e.what());
            throw;
        }
    };
    h.restore = [dir, busy_meter](std::uint64_t step, ps::shard_range range, std::uint64_t num_params) {
        progress_meter::busy busy(*busy_meter, "reading its checkpoint shard");
        const auto m = checkpoint::read_manifest(dir, checkpoint::manifest_name(step));
        if (m.num_params != num_params)
            throw error(
                fmt::format("{}/{} holds {} parameters but the chief's model has {} (another model, or a "
                            "checkpoint replaced while the job started): restore it with the model that wrote it, "
                            "or use another checkpoint directory",
                            dir, checkpoint::manifest_name(step), m.num_params, num_params));
        auto d = checkpoint::load_range(dir, m, range);
        return ps::shard_state{std::move(d.values), std::move(d.state), d.updates, m.positions};
    };
    h.restore_tables = [dir, busy_meter, chains](std::uint64_t step, int index, int num_ps,
                                                 std::span<ps::embedding_table> tables) {
        progress_meter::busy busy(*busy_meter, "reading its embedding table rows from the checkpoint");
        const auto m = checkpoint::read_manifest(dir, checkpoint::manifest_name(step));
        const auto t0 = std::chrono::steady_clock::now();
        const auto rows = chains->restore(dir, m, index, num_ps, tables);  // the next save starts this PS's own chain
        log::info("restored {} embedding rows (its keys' share of every saved PS's) from {} in {:.3f}s", rows,
                  checkpoint::manifest_name(step),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
    return h;
}

namespace {

// The end-of-job line of a staleness bound (`what`: how it was given):
// what the bound held.
std::string staleness_line(const std::string& what, const ps::staleness_counters& c)
{
    return fmt::format("{} {}: the fastest worker led the slowest by at most {} steps; {} replies held until the "
                       "slowest caught up, {:.3f}s in all",
                       what, c.bound, c.largest_lead, c.replies_held,
                       std::chrono::duration<double>(c.held_time).count());
}

// A PS task of pstrain's own workers, or (serving) of a program whose
// chief says how to train and when training ends.
enum class ps_kind { own, serving };

int run_ps_task(const train_options& o, const bootstrap::job& j, ps::transport& net, progress_meter& meter,
                watchdog* dog, ps_kind kind = ps_kind::own)
{
    // --ps-spares: the last K ps tasks are spares; the job's shards are the others'.
    const int serving = j.num_ps - o.ps_spares;
    auto config = server_config_for(o, j.me.index, serving);
    config.spare = j.me.index >= serving;
    // --max-workers: the slots after the job's workers wait for workers that join later.
    if (j.slots() > j.num_workers) config.started_workers = static_cast<std::size_t>(j.num_workers);
    if (config.spare)
        log::info("a spare for the job's {} ps task{}: waits to take the place of one that is lost", serving,
                  serving == 1 ? "" : "s");
    auto hooks = server_hooks_for(o, &meter);
    if (kind == ps_kind::serving) {
        config.settings_from_chief = true;
        hooks.step_completed = nullptr;  // the chief's shutdown ends training
    }
    ps::server s(net, config, hooks);
    watchdog::source watched(dog, [&s] { return s.activity(); });
    const auto outcome = s.run();
    if (const auto c = s.staleness(); c.bound >= 0)
        log::info("{}", staleness_line(kind == ps_kind::own ? "--max-staleness" : "the chief's max_staleness", c));
    if (o.profile) {
        log::info("{}", profile_line(j.peer_name(role::ps, j.me.index), s.profile()));
        if (o.ctr) log::info("{}", sparse_line(j.peer_name(role::ps, j.me.index), s.profile(), s.sparse()));
    }
    return outcome == ps::server_outcome::stopped ? preempted_exit_status : 0;
}

// The stall watchdog of --stall-timeout, none with 0.
std::unique_ptr<watchdog> watchdog_for(const train_options& o, progress_meter& meter, std::string task,
                                       bool sync_worker)
{
    if (o.stall_timeout <= 0) return nullptr;
    meter.warn_busy_after(std::chrono::seconds(o.stall_timeout) / 2, o.stall_timeout);
    watchdog_config c;
    c.timeout = std::chrono::seconds(o.stall_timeout);
    c.task = std::move(task);
    if (sync_worker) c.waiting_grace = std::max(std::chrono::milliseconds(3000), c.timeout / 5);
    return std::make_unique<watchdog>(meter, std::move(c));
}

loop_role role_of(const train_options& o, const bootstrap::job& j)
{
    loop_role r;
    r.index = j.me.index;
    r.num_ps = j.num_ps - o.ps_spares;  // the transport's peers after them are the spares
    r.ps_spares = o.ps_spares;
    r.num_workers = j.num_workers;
    r.worker_slots = j.slots();
    for (int i = 0; i < j.slots(); ++i) r.worker_names.push_back(j.peer_name(role::worker, i));
    r.name = j.peer_name(role::worker, j.me.index);
    return r;
}

// A worker's transport that casts the start-up vote (bootstrap::start_vote)
// before the first message of the PS protocol: by then the worker has
// loaded its data, built its model and (the chief) chosen its checkpoint,
// and every error before that is a start-up error, reported once per job.
class voting_transport final : public ps::transport {
public:
    voting_transport(ps::transport& net, std::function<void()> vote) : net_(net), vote_(std::move(vote)) {}
    bool voted() const { return voted_; }

    std::size_t num_peers() const override { return net_.num_peers(); }
    std::string peer_name(std::size_t peer) const override { return net_.peer_name(peer); }
    ps::transfer send(std::size_t peer, ps::channel ch, const void* data, std::size_t bytes) override
    {
        before_talking();
        return net_.send(peer, ch, data, bytes);
    }
    ps::transfer recv(std::size_t peer, ps::channel ch, void* buffer, std::size_t capacity) override
    {
        before_talking();
        return net_.recv(peer, ch, buffer, capacity);
    }
    bool wait_until(const std::function<bool()>& pred, ps::clock::time_point deadline) override
    {
        return net_.wait_until(pred, deadline);
    }
    bool failed(std::size_t peer) const override { return net_.failed(peer); }
    std::string failure(std::size_t peer) const override { return net_.failure(peer); }
    std::unique_ptr<ps::exchange_memory> allocate(std::size_t bytes) override { return net_.allocate(bytes); }
    std::unique_ptr<ps::peer_memory> map(std::size_t peer, std::span<const std::uint8_t> rkey) override
    {
        return net_.map(peer, rkey);
    }
    void close(bool force) override { net_.close(force); }

private:
    void before_talking()
    {
        if (voted_) return;
        voted_ = true;
        vote_();
    }

    ps::transport& net_;
    std::function<void()> vote_;
    bool voted_ = false;
};

}  // namespace

namespace {

// An --elastic chief under PMIx: the join file a worker started later in a
// lost one's place reads (join_file.hpp), in --checkpoint-dir; its path, or
// "" when there is none.
std::string offer_join(const train_options& o, const bootstrap::join_info& join, int started,
                       const std::string& startup_error, bool program = false)
{
    if (join.ps.empty() || !startup_error.empty()) return "";
    if (o.checkpoint_dir.empty()) {
        log::warn("--elastic: a lost worker can join this job again only through the join file that the chief "
                  "writes into --checkpoint-dir: give it one");
        return "";
    }
    try {
        const auto path = write_join_file(o.checkpoint_dir, join);
        if (program)  // pstrain serve: the workers are a program's (pstrain.init reads the file)
            log::info("a worker's program started later with PSTRAIN_JOIN={} PSTRAIN_JOIN_INDEX=I takes lost worker "
                      "I's place when the chief trains elastic (pstrain.torch's elastic=True; pstrain.init() joins "
                      "through the file)",
                      path);
        else
            log::info("--elastic: a worker started later takes lost worker I's place with `pstrain --join {} "
                      "--task-index I` and this job's other flags{}",
                      path,
                      join.num_workers > started ? fmt::format("; with --task-index {} to {} it joins as a new worker",
                                                               started, join.num_workers - 1)
                                                 : "");
        return path;
    } catch (const error& e) {
        log::warn("--elastic: {}: a lost worker cannot join this job again", e.what());
        return "";
    }
}

// The join file, removed when the job is over, however this task leaves:
// nobody joins it then, and its key is of no use to anyone.
struct offered_join {
    std::string path;
    ~offered_join()
    {
        if (!path.empty()) ::unlink(path.c_str());
    }
};

}  // namespace

int run_distributed(const train_options& o, bootstrap::job j)
{
    log::set_prefix(fmt::format("pstrain[{}]", j.name()));
    // Start-up errors of this task (and, below, of a worker's data, model
    // and checkpoint): voted on with the other tasks once connected, so
    // that the job reports each once (bootstrap::start_vote).
    std::string startup_error;
    try {
        if (auto why = job_shape_refusal(o, j.num_ps, j.num_workers)) throw error(*why);
        j.worker_slots = o.max_workers;
        if (!o.checkpoint_dir.empty()) {
            checkpoint::prepare_directory(o.checkpoint_dir);  // every task: it fails here, before any training
            catch_termination();
        }
    } catch (const error& e) {
        startup_error = e.what();
    }
    log::debug("role from {}: {} of {} ps + {} workers", j.source, j.name(), j.num_ps, j.num_workers);
    ucx::heartbeat_config beats;
    beats.interval = std::chrono::milliseconds(static_cast<long long>(o.heartbeat_interval * 1000 + 0.5));
    bootstrap::start_vote vote;
    bootstrap::join_info join;
    auto net =
        bootstrap::connect(j, o.progress == ucx_progress::spin ? ucx::progress_mode::spin : ucx::progress_mode::event,
                           std::chrono::seconds(o.bootstrap_timeout), beats, &vote, o.elastic, &join);
    const offered_join join_file{j.is_chief() ? offer_join(o, join, j.num_workers, startup_error) : ""};
    // The others may take a while to load their data.
    const auto vote_within = std::chrono::seconds(std::max(o.bootstrap_timeout, o.stall_timeout));
    if (!startup_error.empty() || j.me.role == role::ps) vote.cast(startup_error, vote_within);
    // From here on (the bootstrap has its own --bootstrap-timeout) a task
    // that makes no progress for --stall-timeout reports and exits.
    progress_meter meter;
    auto dog = watchdog_for(o, meter, j.peer_name(j.me.role, j.me.index),
                            j.me.role == role::worker && (o.sync_replicas || o.max_staleness >= 0));
    if (j.me.role == role::worker) {
        auto who = role_of(o, j);
        who.meter = &meter;
        who.dog = dog.get();
        voting_transport voting(*net, [&] {
            progress_meter::busy waiting(meter, "waiting for every task to start");
            vote.cast("", vote_within);
        });
        const int code = run_worker_task(o, who, voting, *net, [&](const std::exception_ptr& failure) {
            if (voting.voted()) return;
            try {
                std::rethrow_exception(failure);
            } catch (const error& e) {
                vote.cast(e.what(), vote_within);  // reports it here, or stops with a line naming who did
            } catch (...) {
                // Not a configuration error: this task's own line says what,
                // and the others learn that it could not start.
                try {
                    vote.cast("could not start (see its error line)", vote_within);
                } catch (...) {}
            }
        });
        log::debug("progress: {} spins, {} sleeps on the event fd", net->ucx_engine().spins(),
                   net->ucx_engine().sleeps());
        return code;
    }
    int code = 1;
    try {
        code = run_ps_task(o, j, *net, meter, dog.get());
    } catch (...) {
        progress_meter::busy closing(meter, "closing its connections");
        net->close(true);  // drops what is still queued for lost peers
        throw;
    }
    {
        progress_meter::busy closing(meter, "closing its connections");  // bounded by the transport
        net->close(code != 0);
    }
    log::debug("progress: {} spins, {} sleeps on the event fd", net->ucx_engine().spins(), net->ucx_engine().sleeps());
    return code;
}

int run_worker_task(const train_options& o, const loop_role& who, ps::transport& loop_net, ps::transport& net,
                    const std::function<void(const std::exception_ptr&)>& on_error)
{
    int code = 1;
    std::exception_ptr failure;
    try {
        code = run_training_loop(o, who, loop_net);
    } catch (...) {
        failure = std::current_exception();
        if (on_error) {
            try {
                on_error(failure);
            } catch (...) {
                failure = std::current_exception();
            }
        }
    }
    {
        std::optional<progress_meter::busy> closing;
        if (who.meter) closing.emplace(*who.meter, "closing its connections");  // bounded by the transport
        net.close(failure != nullptr);
    }
    if (failure) std::rethrow_exception(failure);
    return code;
}

int run_serving_ps(const train_options& o, bootstrap::job j)
{
    log::set_prefix(fmt::format("pstrain[{}]", j.name()));
    if (j.me.role != role::ps)
        throw error(fmt::format("pstrain serve runs a job's ps tasks and this task is {}: run the workers' program "
                                "there (torch-train.sh does)",
                                j.name()));
    if (auto why = job_shape_refusal(o, j.num_ps, j.num_workers, true)) throw error(*why);
    if (!o.checkpoint_dir.empty()) {
        checkpoint::prepare_directory(o.checkpoint_dir);
        catch_termination();
    }
    log::debug("role from {}: {} of {} ps + {} workers", j.source, j.name(), j.num_ps, j.num_workers);
    ucx::heartbeat_config beats;
    beats.interval = std::chrono::milliseconds(static_cast<long long>(o.heartbeat_interval * 1000 + 0.5));
    // No start-up vote: the workers' program (pstrain.init) casts none.
    // Under PMIx with a checkpoint directory (torch-train.sh gives one),
    // every PS listens for workers that join later, and ps 0 writes the
    // join file a program's pstrain.init() reads; the chief's settings say
    // whether the job takes them (elastic).
    const bool door = j.how == bootstrap::mode::pmix && !o.checkpoint_dir.empty();
    bootstrap::join_info join;
    auto net =
        bootstrap::connect(j, o.progress == ucx_progress::spin ? ucx::progress_mode::spin : ucx::progress_mode::event,
                           std::chrono::seconds(o.bootstrap_timeout), beats, nullptr, door, &join);
    const offered_join join_file{door && j.me.index == 0 ? offer_join(o, join, j.num_workers, "", true) : ""};
    progress_meter meter;
    auto dog = watchdog_for(o, meter, j.peer_name(j.me.role, j.me.index), false);
    int code = 1;
    try {
        code = run_ps_task(o, j, *net, meter, dog.get(), ps_kind::serving);
    } catch (...) {
        net->close(true);
        throw;
    }
    net->close(code != 0);
    return code;
}

int run_standalone(const train_options& o)
{
    log::set_prefix("pstrain[standalone]");
    if (!o.checkpoint_dir.empty()) {
        checkpoint::prepare_directory(o.checkpoint_dir);
        catch_termination();
    }
    // One process: its PS in a thread, the worker's loop here, the loopback
    // between them (the PS works in the loop's buffers in place).
    ps::loopback_network net(1, 1);
    progress_meter meter;
    auto dog = watchdog_for(o, meter, "the standalone trainer", false);
    ps::server server(net.ps(0), server_config_for(o, 0, 1), server_hooks_for(o, &meter));
    std::exception_ptr server_error;
    std::thread ps_thread([&] {
        try {
            server.run();
        } catch (...) {
            server_error = std::current_exception();
        }
    });
    loop_role who;
    who.name = "the standalone worker";
    who.standalone = true;
    who.after_shutdown = [&] { ps_thread.join(); };
    who.meter = &meter;
    who.dog = dog.get();
    int code = 1;
    try {
        code = run_training_loop(o, who, net.worker(0));
    } catch (...) {
        net.kill_worker(0);  // the PS sees its chief gone and ends
        if (ps_thread.joinable()) ps_thread.join();
        throw;
    }
    if (ps_thread.joinable()) ps_thread.join();
    if (server_error) std::rethrow_exception(server_error);
    if (o.max_staleness >= 0) log::info("{}", staleness_line("--max-staleness", server.staleness()));
    if (o.profile) {
        log::info("{}", profile_line("the standalone PS", server.profile()));
        if (o.ctr) log::info("{}", sparse_line("the standalone PS", server.profile(), server.sparse()));
    }
    return code;
}

}  // namespace pstrain::trainer
