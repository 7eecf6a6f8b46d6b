#include "trainer/worker.hpp"

#include "common/error.hpp"
#include "common/log.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/data/sampler.hpp"
#include "trainer/progress.hpp"
#include "trainer/ps/client.hpp"
#include "trainer/ps/shard.hpp"
#include "trainer/session.hpp"
#include "trainer/signals.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pstrain::trainer {
namespace {

using clock = std::chrono::steady_clock;
using ps::msg;

class worker_task {
public:
    worker_task(const train_options& o, const bootstrap::job& j, transport::worker& w, bootstrap::connections& c)
        : o_(o), j_(j), w_(w), c_(c), s_(open_session(o)), n_(s_.net->num_params()),
          client_(j, w, c, n_, std::chrono::seconds(o.peer_timeout), o.shared_memory == "auto"),
          pin_(*s_.backend, client_.buffers().data(), client_.buffers().size_bytes()),
          sampler_(s_.data.train.rows, j.num_workers, j.me.index, o.seed, o.sample_with_replacement),
          replicas_(o.replicas_to_aggregate > 0 ? o.replicas_to_aggregate : j.num_workers), schedule_(o)
    {
    }

    int run()
    {
        if (j_.is_chief()) prog_.emplace(o_.train_steps, o_.log_every, o_.metrics_file);
        start();
        std::int64_t next_eval = o_.eval_every > 0 ? (client_.global_step() / o_.eval_every + 1) * o_.eval_every : 0;
        std::int64_t last_step = client_.global_step(), local_steps = 0;
        auto t0 = clock::now();
        schedule_.attempted();
        std::vector<std::uint32_t> rows;
        while (!client_.done()) {
            sampler_.next_batch(static_cast<std::size_t>(o_.batch_size), rows);
            ++batches_;
            double loss = s_.net->compute_gradients(client_.params(), s_.data.train, rows, client_.grads());
            check_loss(loss, client_.global_step());
            client_.push(batches_);
            ++local_steps;
            if (prog_) {
                const std::int64_t per_step = o_.sync_replicas ? replicas_ : 1;
                prog_->step(client_.global_step(), loss, (client_.global_step() - last_step) * per_step * o_.batch_size);
                last_step = client_.global_step();
                if (next_eval > 0 && client_.global_step() >= next_eval && !client_.done()) {
                    evaluate_on_test(s_, client_.params(), client_.global_step(), *prog_);
                    next_eval = (client_.global_step() / o_.eval_every + 1) * o_.eval_every;
                }
                if (!o_.checkpoint_dir.empty() && !client_.done()) {
                    if (termination_requested()) return stop_for_preemption();
                    if (schedule_.due(client_.global_step())) save_checkpoint();
                }
            }
        }
        const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
        log::debug("{} local steps, stopped at global step {}", local_steps, client_.global_step());
        if (client_.stopped()) {
            log::info("the chief stopped the job at global step {} (SIGTERM): exiting with status {} so that a requeued "
                      "job resumes from the checkpoint", client_.global_step(), preempted_exit_status);
            return preempted_exit_status;
        }
        if (!prog_) return 0;
        const bool saved = o_.checkpoint_dir.empty() || schedule_.last_saved() == client_.global_step() || save_checkpoint();
        auto done = done_line(evaluate_on_test(s_, client_.params(), client_.global_step(), *prog_), seconds, *prog_, j_.num_ps,
                              j_.num_workers, o_.sync_replicas ? "sync" : "async");
        client_.shutdown();
        print_done(done);
        if (!saved) {
            log::error("the final checkpoint was not written (see the error above): the result of this run is only in the "
                       "line above");
            return 1;
        }
        return 0;
    }

private:
    // The chief restores the newest complete checkpoint or initialises
    // every shard; the others pull.  Everyone resumes its data position.
    void start()
    {
        if (j_.is_chief()) {
            auto m = o_.checkpoint_dir.empty() ? std::nullopt : checkpoint::find_latest(o_.checkpoint_dir);
            if (m) {
                check_compatible(*m, s_, o_);
                client_.restore(m->global_step);
                schedule_.saved(static_cast<std::int64_t>(m->global_step));
                log::info("restored {} from {}/{} (global step {}, saved {} by {} ps tasks); {} training to step {}",
                          s_.net->describe(), o_.checkpoint_dir, checkpoint::manifest_name(m->global_step), m->global_step,
                          m->created, m->shards.size(), o_.sync_replicas ? "sync" : "async", o_.train_steps);
            } else {
                s_.net->initialize(client_.params(), o_.seed);
                log::info("initialised {} ({} parameters) on {} ps tasks; {} training, {} steps", s_.net->describe(), n_,
                          j_.num_ps,
                          o_.sync_replicas ? fmt::format("sync ({} of {} workers per step)", replicas_, j_.num_workers)
                                           : std::string("async"),
                          o_.train_steps);
                client_.init();
            }
        } else {
            client_.pull();
        }
        if (auto step = client_.restored_step()) resume_data_position(*step);
    }

    // Draws the batches this worker had drawn before the checkpoint, so the
    // data order goes on where it stopped.
    void resume_data_position(std::uint64_t step)
    {
        const auto m = checkpoint::read_manifest(o_.checkpoint_dir, checkpoint::manifest_name(step));
        batches_ = resumed_batches(m, o_, j_.num_workers, j_.me.index);
        sampler_.skip_batches(batches_, static_cast<std::size_t>(o_.batch_size));
        log::debug("data position restored: {} batches drawn (epoch {})", batches_, sampler_.epoch());
    }

    // Every PS writes its shard, then the chief checks it can see them all
    // on the shared path and writes the manifest.  Returns false (the error
    // said why; the previous checkpoint is intact) when it could not.
    bool save_checkpoint()
    {
        schedule_.attempted();
        const auto t0 = clock::now();
        auto step = static_cast<std::uint64_t>(client_.global_step());
        for (int attempt = 0; attempt < 20; ++attempt) {
            const auto& replies = client_.save(step);
            std::uint64_t newest = step;
            bool moved_on = false;
            for (std::size_t p = 0; p < replies.size(); ++p) {
                const auto status = static_cast<ps::save_status>(replies[p].status);
                if (status == ps::save_status::failed) {
                    log::error("checkpoint at global step {} failed: {} could not write its shard (its error line says "
                               "why); the previous checkpoint is intact", step, j_.peer_name(role::ps, static_cast<int>(p)));
                    return false;
                }
                if (status == ps::save_status::moved_on) {
                    moved_on = true;
                    newest = std::max(newest, replies[p].step);
                }
            }
            if (moved_on) {
                step = newest;
                continue;
            }
            auto m = manifest_for(s_, o_, step, o_.sync_replicas ? "sync" : "async");
            std::uint64_t bytes = 0;
            for (std::size_t p = 0; p < replies.size(); ++p) {
                checkpoint::shard_entry e;
                e.file = checkpoint::shard_name(step, static_cast<int>(p), j_.num_ps);
                e.range = client_.shard_map()[p];
                e.bytes = replies[p].extra;
                e.crc32 = replies[p].aux;
                e.step = replies[p].step;
                bytes += e.bytes;
                m.shards.push_back(e);
            }
            try {
                // The chief must see every shard: proof that the path is shared.
                for (std::size_t p = 0; p < m.shards.size(); ++p) {
                    auto d = checkpoint::read_new_shard(o_.checkpoint_dir, m.shards[p].file, std::chrono::seconds(10));
                    if (p == 0) m.worker_batches = d.meta.worker_batches;
                }
                checkpoint::write_manifest(o_.checkpoint_dir, m);
            } catch (const error& e) {
                log::error("checkpoint at global step {} failed: {} (seen from {}): --checkpoint-dir must be a path every node "
                           "shares; the previous checkpoint is intact", step, e.what(), j_.peer_name(role::worker, j_.me.index));
                return false;
            }
            schedule_.saved(static_cast<std::int64_t>(step));
            checkpoint::prune(o_.checkpoint_dir, o_.keep_checkpoints);
            const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
            if (prog_)
                prog_->record({{"event", "checkpoint"}, {"global_step", step}, {"manifest", checkpoint::manifest_name(step)},
                               {"bytes", bytes}, {"seconds", seconds}});
            log::info("checkpoint at global step {} saved: {}/{} ({} shards, {:.1f} MB, {:.2f}s)", step, o_.checkpoint_dir,
                      checkpoint::manifest_name(step), m.shards.size(), bytes / 1e6, seconds);
            return true;
        }
        log::warn("checkpoint skipped: the PS tasks kept moving past the chief's step (backup workers); trying again later");
        return false;
    }

    int stop_for_preemption()
    {
        log::info("SIGTERM at global step {}: saving a checkpoint, then stopping every task", client_.global_step());
        const bool saved = schedule_.last_saved() == client_.global_step() || save_checkpoint();
        client_.shutdown(true);
        if (!saved) {
            log::error("stopped at global step {} without a new checkpoint (see the error above): a requeued job resumes "
                       "from the previous one", client_.global_step());
            return 1;
        }
        log::info("stopped at global step {}: exiting with status {} so that a requeued job resumes from {}/{}",
                  client_.global_step(), preempted_exit_status, o_.checkpoint_dir, checkpoint::manifest_name(schedule_.last_saved()));
        return preempted_exit_status;
    }

    const train_options& o_;
    const bootstrap::job& j_;
    transport::worker& w_;
    bootstrap::connections& c_;
    session s_;
    std::size_t n_;
    ps::client client_;
    // The model reads the parameters and writes the gradients in the
    // client's exchange buffers; page-locked on a GPU.
    compute::host_pin pin_;
    data::sampler sampler_;
    int replicas_;
    std::uint64_t batches_ = 0;         // batches drawn, across restarts
    checkpoint_schedule schedule_;      // the chief's: when to checkpoint, the newest one's step
    std::optional<progress> prog_;      // the chief's progress lines and metrics file
};

}  // namespace

int run_worker(const train_options& o, const bootstrap::job& j, transport::worker& w, bootstrap::connections& peers)
{
    worker_task t(o, j, w, peers);
    return t.run();
}

}  // namespace pstrain::trainer
