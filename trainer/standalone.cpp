#include "trainer/standalone.hpp"

#include "common/error.hpp"
#include "common/log.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/data/sampler.hpp"
#include "trainer/progress.hpp"
#include "trainer/ps/shard.hpp"
#include "trainer/session.hpp"
#include "trainer/signals.hpp"


namespace pstrain::trainer {
namespace {

// One process is its own PS: checkpoints are one shard and a manifest, in
// the same format as a distributed job's, so either restores the other.
class standalone_checkpoints {
public:
    explicit standalone_checkpoints(const train_options& o) : o_(o), schedule_(o) {}

    bool due(std::int64_t step) const { return schedule_.due(step); }

    bool save(const session& s, const ps::parameter_shard& shard, std::int64_t step, std::uint64_t batches)
    {
        schedule_.attempted();
        if (step == schedule_.last_saved()) return true;
        checkpoint::shard_meta meta;
        meta.global_step = static_cast<std::uint64_t>(step);
        meta.range = shard.range();
        meta.total_params = shard.range().size();
        meta.optimizer = o_.optimizer;
        meta.state_slots = ps::state_slots(shard.optimizer().kind);
        meta.updates = shard.updates();
        meta.worker_batches = {batches};
        auto m = manifest_for(s, o_, meta.global_step, "standalone");
        m.worker_batches = meta.worker_batches;
        try {
            m.shards.push_back(checkpoint::write_shard(o_.checkpoint_dir, meta, shard.values(), shard.state()));
            checkpoint::write_manifest(o_.checkpoint_dir, m);
        } catch (const error& e) {
            log::error("checkpoint at global step {} failed: {}", step, e.what());
            return false;
        }
        schedule_.saved(step);
        checkpoint::prune(o_.checkpoint_dir, o_.keep_checkpoints);
        log::info("checkpoint at global step {} saved: {}/{}", step, o_.checkpoint_dir, checkpoint::manifest_name(meta.global_step));
        return true;
    }

    void restored(std::int64_t step) { schedule_.saved(step); }

private:
    const train_options& o_;
    checkpoint_schedule schedule_;
};

}  // namespace

int run_standalone(const train_options& o)
{
    log::set_prefix("pstrain[standalone]");
    const bool checkpoints = !o.checkpoint_dir.empty();
    if (checkpoints) {
        checkpoint::prepare_directory(o.checkpoint_dir);
        catch_termination();
    }
    session s = open_session(o);
    progress prog(o.train_steps, o.log_every, o.metrics_file);

    const std::size_t n = s.net->num_params();
    ps::parameter_shard shard({0, n}, optimizer_from(o));
    std::vector<float> grads(n);
    data::sampler sampler(s.data.train.rows, 1, 0, o.seed, o.sample_with_replacement);
    std::vector<std::uint32_t> rows;
    std::uint64_t batches = 0;
    std::int64_t first = 1;
    standalone_checkpoints saver(o);

    auto latest = checkpoints ? checkpoint::find_latest(o.checkpoint_dir) : std::nullopt;
    if (latest) {
        check_compatible(*latest, s, o);
        auto d = checkpoint::load_range(o.checkpoint_dir, *latest, {0, n});
        shard.restore(d.values, d.state, d.updates);
        first = static_cast<std::int64_t>(latest->global_step) + 1;
        saver.restored(first - 1);
        batches = resumed_batches(*latest, o, 1, 0);
        sampler.skip_batches(batches, static_cast<std::size_t>(o.batch_size));
        log::info("restored {} from {}/{} (global step {}, saved {})", s.net->describe(), o.checkpoint_dir,
                  checkpoint::manifest_name(latest->global_step), latest->global_step, latest->created);
    } else {
        std::vector<float> init(n);
        s.net->initialize(init, o.seed);
        shard.assign(init);
    }

    for (std::int64_t step = first; step <= o.train_steps; ++step) {
        sampler.next_batch(static_cast<std::size_t>(o.batch_size), rows);
        ++batches;
        double loss = s.net->compute_gradients(shard.values(), s.data.train, rows, grads);
        check_loss(loss, step);
        shard.apply(grads);
        prog.step(step, loss, o.batch_size);
        if (o.eval_every > 0 && step % o.eval_every == 0 && step < o.train_steps)
            evaluate_on_test(s, shard.values(), step, prog);
        if (checkpoints && step < o.train_steps) {
            if (termination_requested()) {
                log::info("SIGTERM at global step {}: saving a checkpoint, then stopping", step);
                if (!saver.save(s, shard, step, batches)) return 1;
                log::info("stopped at global step {}: exiting with status {} so that a requeued job resumes from the checkpoint",
                          step, preempted_exit_status);
                return preempted_exit_status;
            }
            if (saver.due(step)) saver.save(s, shard, step, batches);
        }
    }
    const std::int64_t last = std::max<std::int64_t>(o.train_steps, first - 1);
    const bool saved = !checkpoints || saver.save(s, shard, last, batches);
    const double seconds = prog.seconds();
    auto done = done_line(evaluate_on_test(s, shard.values(), last, prog), seconds, prog, 0, 1, "standalone");
    if (!s.net->is_classifier())
        log::info("linear model: weight {:.4f} (true 2), bias {:.4f} (true 10)", shard.values()[0], shard.values()[1]);
    print_done(done);
    if (!saved) {
        log::error("the final checkpoint was not written (see the error above): the result of this run is only in the line above");
        return 1;
    }
    return 0;
}

}  // namespace pstrain::trainer
