#include "trainer/app/training_loop.hpp"
#include "trainer/app/ctr_work.hpp"
#include "trainer/data/augment.hpp"

#include "common/log.hpp"
#include "pstrain/client.hpp"
#include "pstrain/error.hpp"
#include "trainer/app/job_comment.hpp"
#include "trainer/app/report.hpp"
#include "trainer/app/checkpoint_schedule.hpp"
#include "trainer/app/data_split.hpp"
#include "trainer/app/evaluation.hpp"
#include "trainer/app/loss_guard.hpp"
#include "trainer/app/ps_recovery.hpp"
#include "trainer/app/resume.hpp"
#include "trainer/app/session.hpp"
#include "trainer/app/signals.hpp"
#include "trainer/checkpoint/checkpoint.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pstrain::trainer {
namespace {

using clock = std::chrono::steady_clock;

ps::client_config client_config_for(const train_options& o, const loop_role& who, const session& s)
{
    ps::client_config c;
    c.index = who.index;
    c.num_workers = who.slots();
    c.num_params = s.shape().num_params();
    for (const auto& t : s.shape().tensors()) c.tensor_sizes.push_back(t.size);
    const auto& ts = s.shape().tensors();
    if (std::any_of(ts.begin(), ts.end(), [](const model::tensor_spec& t) { return t.moving_average; }))
        for (const auto& t : ts)
            c.tensor_kinds.push_back(t.moving_average ? ps::client_config::tensor_kind::moving_average
                                                      : ps::client_config::tensor_kind::trainable);
    if (s.ctr)
        for (const auto& t : s.ctr->tables()) c.table_dims.push_back(static_cast<std::uint32_t>(t.dim));
    c.timeout = std::chrono::seconds(o.peer_timeout);
    c.share_memory = o.shared_memory;
    c.precision = o.wire_precision;
    c.worker_names = who.worker_names;
    if (who.ps_spares > 0) c.num_ps = who.num_ps;  // the peers after them are spares
    // The chief says how to train; a PS task started with other flags refuses it, naming the difference.
    if (who.index == 0) c.settings = training_settings_for(o);
    return c;
}

// Worker 0's client is the chief's, with the calls that start, save and
// end the job.
std::unique_ptr<ps::client> make_client(ps::transport& net, ps::client_config c)
{
    if (c.index == 0) return std::make_unique<ps::chief_client>(net, std::move(c));
    return std::make_unique<ps::client>(net, std::move(c));
}

progress_meter& meter_of(const loop_role& who)
{
    static progress_meter unwatched;
    return who.meter ? *who.meter : unwatched;
}

// Loading the data is the task's own work, not a stall.
session open_watched_session(const train_options& o, int worker, progress_meter& meter)
{
    progress_meter::busy busy(meter, "loading the data");
    return open_session(o, worker);
}

class training_loop {
public:
    training_loop(const train_options& o, const loop_role& who, ps::transport& net)
        : o_(o), who_(who), meter_(meter_of(who)), s_(open_watched_session(o, who.index, meter_)),
          n_(s_.shape().num_params()), owned_client_(make_client(net, client_config_for(o, who, s_))),
          client_(*owned_client_), watched_(who.dog, [this] { return client_.activity(); }),
          pin_(*s_.backend, client_.buffers().data(), client_.buffers().size_bytes()),
          replicas_(o.replicas_to_aggregate > 0 ? o.replicas_to_aggregate : who.slots()),
          split_(o, s_.data.train.rows, who.num_workers, who.index, who.slots()), schedule_(o),
          mode_(who.standalone    ? "standalone"
                : o.sync_replicas ? "sync"
                                  : "async"),
          recovery_(o, client_, chief() ? &chief_calls() : nullptr, meter_, recovery_parts())
    {
        if (o.bucket_mb > 0 && s_.net && (!o.sync_replicas || replicas_ >= who.slots())) plan_buckets();
        if (s_.ctr) {
            ctr_.emplace(o, *s_.ctr, client_, who.index, who.num_workers);
            if (chief()) {
                progress_meter::busy busy(meter_, "loading the held-out test.tsv");
                ctr_test_ = read_ctr_test_set(o, data::ctr_categorical_fields, data::ctr_numeric_fields);
                log::info("held-out: {} examples of {}/test.tsv{}", ctr_test_->examples->size(), o.data_dir,
                          ctr_test_->oracle_auc
                              ? fmt::format(" (the teacher's oracle AUC: {:.4f})", *ctr_test_->oracle_auc)
                              : "");
            }
            return;
        }
        split_.from_the_start();
        const data::augment_options aug{o.augment_shift, o.augment_flip};
        if (aug.enabled()) {
            // Each worker its own stream of shifts and flips.
            augment_.emplace(aug, s_.data.train, o.seed * 1000003u + static_cast<std::uint64_t>(who.index) + 1);
            identity_.resize(static_cast<std::size_t>(o.batch_size));
            for (std::size_t i = 0; i < identity_.size(); ++i) identity_[i] = static_cast<std::uint32_t>(i);
        }
    }

    // The chief's failure also goes into the job's comment, where an
    // operator's `scontrol show job` and `squeue -o %k` see which task and
    // node the job lost.
    int run()
    {
        try {
            return train();
        } catch (const std::exception& e) {
            if (comment_) comment_->update(failure_comment(client_.global_step(), e.what()), true);
            throw;
        }
    }

    int train()
    {
        // The chief decides what to resume before it writes anything (the
        // metrics file, TensorBoard events): a refused checkpoint leaves
        // the directory as it found it.
        std::optional<checkpoint::manifest> resumed;
        if (chief()) {
            if (auto id = job_comment::job_id(); id && o_.job_comment) comment_.emplace(*id);
            resumed = find_checkpoint();
            if (resumed && static_cast<std::int64_t>(resumed->global_step) >= o_.train_steps)
                return nothing_left(*resumed);
            open_the_reports();
        }
        start(resumed);
        if (!who_.standalone && chief()) record_the_live_workers();
        next_eval_ = next_evaluation();
        last_step_ = step();
        const auto t0 = clock::now();
        train_start_ = t0;
        schedule_.attempted();
        std::vector<std::uint32_t> rows;
        while (!client_.done()) try {
                if (auto stopped = one_step(rows)) return *stopped;
            } catch (const ps::lost_ps& e) {
                recovery_.replace(e, schedule_, report_ ? &*report_ : nullptr);
                last_step_ = step();
                if (o_.eval_every > 0) next_eval_ = next_evaluation();
            }
        return finish(std::chrono::duration<double>(clock::now() - t0).count());
    }

private:
    bool chief() const { return who_.index == 0; }
    // The chief's calls (make_client gave worker 0 a chief_client).
    ps::chief_client& chief_calls() { return dynamic_cast<ps::chief_client&>(client_); }
    std::int64_t step() const { return static_cast<std::int64_t>(client_.global_step()); }
    // The next multiple of --eval-every after this step (0: none).
    std::int64_t next_evaluation() const
    {
        return o_.eval_every > 0 ? (step() / o_.eval_every + 1) * o_.eval_every : 0;
    }

    // The chief's progress lines, metrics file, TensorBoard events and
    // the job's comment.
    void open_the_reports()
    {
        report_config rc;
        rc.train_steps = o_.train_steps;
        rc.log_every = o_.log_every;
        rc.metrics_file = o_.metrics_file;
        rc.tensorboard_dir = o_.tensorboard_dir;
        // The flag's value as typed (0.01, not the float's 0.0099999998).
        rc.learning_rate = std::strtod(fmt::format("{}", o_.learning_rate).c_str(), nullptr);
        rc.classifier = s_.shape().is_classifier();
        report_.emplace(rc);
        if (comment_)
            report_->on_status([this](const std::string& status, bool final) { comment_->update(status, final); });
    }

    // The overlapped step: the gradient is pushed in buckets from the
    // model's backward, each as soon as backward has completed it
    // (push_ready), and each PS applies a bucket (sync: once every worker's
    // is in; async: on arrival, as the step's one update) and sends its
    // values back while backward goes on (on a GPU, each layer's gradient
    // comes to the pinned exchange buffer on a copy stream while the next
    // layers' kernels run: device_staging::gradient_done_from).  Off with
    // backup workers (their step aggregates whole shards) and for one bucket.
    void plan_buckets()
    {
        const auto bytes = static_cast<std::size_t>(o_.bucket_mb * (1 << 20));
        buckets_ = model::backward_buckets(s_.net->tensors(), std::max<std::size_t>(bytes, 1));
        if (buckets_.size() < 2) return buckets_.clear();
        pushes_.reserve(buckets_.size());
        s_.net->on_gradient_ready([this](std::size_t from, double loss) { push_ready(from, loss); });
        if (!chief()) return;
        std::vector<std::string> sizes;
        for (const auto& b : buckets_)
            sizes.push_back(
                fmt::format("{:.2f} MB", static_cast<double>((b.end - b.begin) * sizeof(float)) / (1 << 20)));
        log::info("{} steps push the gradient in {} buckets as backward completes them, the last layers first "
                  "({}; --bucket-mb {})",
                  o_.sync_replicas ? "sync" : "async", buckets_.size(), fmt::join(sizes, ", "), o_.bucket_mb);
    }

    // Backward has completed the gradient from `from` on: every bucket
    // inside it not pushed yet is pushed.  A batch whose loss is not
    // finite pushes nothing.
    void push_ready(std::size_t from, double loss)
    {
        if (next_bucket_ == 0) {
            check_loss(loss, step());
            first_push_ = clock::now();
        }
        for (; next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= from; ++next_bucket_)
            pushes_.push_back(
                client_.async_push_bucket({buckets_[next_bucket_].begin, buckets_[next_bucket_].end}, position_));
    }

    // While this step's exchange is in flight: the next batch's rows
    // gathered into the model's input (model::prefetch), when the sampler
    // knows them without drawing.  For --profile, part of compute.
    void prefetch_next()
    {
        if (ctr_ || augment_ || !split_.dense()) return;
        if (!split_.sampler().peek_batch(static_cast<std::size_t>(o_.batch_size), next_rows_)) return;
        const auto c1 = clock::now();
        s_.net->prefetch(s_.data.train, next_rows_);
        compute_time_ += clock::now() - c1;
    }

    // --profile, the overlapped step: how much of the exchange, from the
    // first bucket's push to the last values in, ran while backward, and
    // then the next batch's gather, went on.
    std::string overlap_line() const
    {
        const auto ms = [&](std::chrono::nanoseconds t) {
            return std::chrono::duration<double, std::milli>(t).count() / static_cast<double>(local_steps_);
        };
        const double hidden = ms(overlapped_), span = hidden + ms(exposed_);
        return fmt::format(
            "overlap of {}: the exchange took {:.3f} ms per step from the first bucket's push to the "
            "last values in, {:.3f} ms ({:.1f}%) of it while backward and the next batch's gather went on",
            who_.name, span, hidden, span > 0 ? 100 * hidden / span : 0.0);
    }

    // One step: a batch's gradient pushed and the new values in; the
    // chief's exit status when it stops the job (SIGTERM).
    std::optional<int> one_step(std::vector<std::uint32_t>& rows)
    {
        ++position_;
        pushes_.clear();
        next_bucket_ = 0;
        const auto batch = compute(rows);
        check_loss(batch.loss, step());
        if (buckets_.empty()) {
            const auto push = client_.async_push(position_);
            prefetch_next();
            client_.wait(push);
        } else {
            prefetch_next();
            const auto work_done = clock::now();
            for (const auto t : pushes_) client_.wait(t);  // the next forward reads every bucket's values
            overlapped_ += work_done - first_push_;
            exposed_ += clock::now() - work_done;
        }
        if (ctr_) ctr_->finish();
        recovery_.went_on(report_ ? &*report_ : nullptr);
        if (!who_.standalone && !client_.done() &&
            split_.follow(client_.live_workers(), client_.global_step(), ctr_ ? &*ctr_ : nullptr))
            if (chief()) record_the_live_workers();  // for `pstrain status`
        meter_.tick();
        ++local_steps_;
        if (chief()) return chief_after_step(batch);
        return std::nullopt;
    }

    // The chief's part of a step: its progress line, evaluation and
    // checkpoint (or, after SIGTERM, the job's stop: its exit status).
    std::optional<int> chief_after_step(const model::batch_result& batch)
    {
        // Elastic sync: a step aggregates at most the live workers' gradients.
        const std::int64_t per_step = !o_.sync_replicas ? 1
                                      : o_.elastic      ? std::min<std::int64_t>(replicas_, split_.live().live)
                                                        : replicas_;
        const bool logged =
            report_->step(step(), batch.loss, batch.accuracy, (step() - last_step_) * per_step * o_.batch_size);
        last_step_ = step();
        if (logged && !client_.done()) report_->cluster(step(), client_.stats());
        if (next_eval_ > 0 && step() >= next_eval_ && !client_.done()) {
            progress_meter::busy busy(meter_, "evaluating");
            evaluate(step());
            next_eval_ = next_evaluation();
        }
        if (!o_.checkpoint_dir.empty() && !client_.done()) {
            if (termination_requested()) return stop_for_preemption();
            if (schedule_.due(step())) save_checkpoint();
        }
        return std::nullopt;
    }

    // After the last step: the profile and, on the chief, the final
    // checkpoint, evaluation and line; the exit status.
    int finish(double seconds)
    {
        log::debug("{} local steps, stopped at global step {}", local_steps_, step());
        if (ctr_ && ctr_->bad_lines() > 0)
            log::warn("{} malformed lines skipped in {} pass{} over this worker's share of {} (--skip-bad-lines)",
                      ctr_->bad_lines(), ctr_->epoch(), ctr_->epoch() == 1 ? "" : "es", o_.data_dir);
        if (o_.profile) {
            log::info("{}", profile_line(who_.name, client_.profile(),
                                         profile_part{"compute", ctr_ ? ctr_->model_time() : compute_time_}));
            if (!buckets_.empty() && local_steps_ > 0) log::info("{}", overlap_line());
        }
        if (client_.stopped()) {
            log::info(
                "the chief stopped the job at global step {} (SIGTERM): exiting with status {} so that a requeued "
                "job resumes from the checkpoint",
                step(), preempted_exit_status);
            return preempted_exit_status;
        }
        if (!chief()) {
            // Training ended: every PS lets this worker go, even one that
            // has not said so yet (async: its step is behind another's by
            // a push the chief has not made), instead of counting it lost.
            if (!who_.standalone) client_.leave();
            return 0;
        }
        // Async: the reply that said done may be one PS's while another's
        // values are older (the chief was stopped or slow while the other
        // workers made the last steps): the final checkpoint, evaluation
        // and line are of every PS's final values.
        if (!who_.standalone && !o_.sync_replicas) client_.wait(client_.async_pull());
        const bool saved = o_.checkpoint_dir.empty() || schedule_.last_saved() == step() || save_checkpoint();
        auto done = [&] {
            progress_meter::busy busy(meter_, "evaluating");
            // Every segment of the run: a requeued job's earlier ones are in the checkpoint it resumed.
            return done_line(evaluate(step()), trained_before_ + seconds,
                             samples_before_ + static_cast<std::uint64_t>(report_->samples()),
                             who_.standalone ? 0 : who_.num_ps,
                             std::max<int>(who_.num_workers, static_cast<int>(split_.live().live)), mode_);
        }();
        chief_calls().shutdown();
        if (who_.after_shutdown) who_.after_shutdown();
        if (who_.standalone && !s_.shape().is_classifier())
            log::info("linear model: weight {:.4f} (true 2), bias {:.4f} (true 10)", client_.params()[0],
                      client_.params()[1]);
        print_done(done);
        if (!saved) {
            log::error(
                "the final checkpoint was not written (see the error above): the result of this run is only in the "
                "line above");
            return 1;
        }
        report_->finish(done);  // only a run that lost nothing says "done" in its metrics (train.sh reads it)
        return 0;
    }

    // What a lost PS's recovery asks of the loop: the click-through rows in
    // flight abandoned; a dense model's data back at the restored step.
    ps_recovery::loop_parts recovery_parts()
    {
        ps_recovery::loop_parts p;
        p.abandon = [this] {
            if (ctr_) ctr_->abandon();
        };
        p.data_back_to = [this](std::uint64_t step) {
            if (!split_.dense()) return;  // a click-through model's reader goes on where it is
            split_.from_the_start();
            resume_data_position(step);
        };
        return p;
    }

    // One batch's gradient in the client's grads() (and, for a
    // click-through model, its rows' update sent).
    model::batch_result compute(std::vector<std::uint32_t>& rows)
    {
        if (ctr_) return ctr_->compute();
        split_.sampler().next_batch(static_cast<std::size_t>(o_.batch_size), rows);
        const data::dataset* examples = &s_.data.train;
        std::span<const std::uint32_t> batch_rows = rows;
        if (augment_) {
            // The augmented copies are rows 0..n-1 of a batch-sized dataset.
            augment_->make_batch(s_.data.train, rows, augmented_);
            examples = &augmented_;
            batch_rows = std::span<const std::uint32_t>(identity_).first(rows.size());
        }
        const auto c1 = clock::now();
        const auto r = s_.net->compute_gradients(client_.params(), *examples, batch_rows, client_.grads());
        compute_time_ += clock::now() - c1;
        return r;
    }

    // The live workers, for `pstrain status`: every change, and the count at the start.
    void record_the_live_workers()
    {
        report_->record({{"event", "workers"},
                         {"global_step", client_.global_step()},
                         {"alive", split_.live().live},
                         {"workers", who_.num_workers},
                         {"room", who_.slots()},
                         {"elastic", o_.elastic}});
    }

    // The chief's evaluation on the held-out data: one log line and an
    // "eval" event, returned.
    nlohmann::json evaluate(std::int64_t step)
    {
        if (!ctr_) return evaluate_on_test(s_, client_.params(), step, *report_);
        const auto m = ctr_->evaluate(*ctr_test_->examples);
        nlohmann::json fields{{"test_auc", m.auc}, {"test_logloss", m.logloss}, {"test_accuracy", m.accuracy}};
        if (ctr_test_->oracle_auc) fields["oracle_auc"] = *ctr_test_->oracle_auc;
        log::info("eval at global step {}: test AUC {:.4f}{}, log loss {:.4f}, accuracy {:.4f} ({} examples)", step,
                  m.auc, ctr_test_->oracle_auc ? fmt::format(" (oracle {:.4f})", *ctr_test_->oracle_auc) : "",
                  m.logloss, m.accuracy, m.examples);
        return record_evaluation(std::move(fields), step, *report_);
    }

    // The chief's checkpoint to resume: the newest complete one in
    // --checkpoint-dir, if --resume lets this job resume it (the error
    // line says why not) and it holds this model; none: start afresh.
    std::optional<checkpoint::manifest> find_checkpoint()
    {
        progress_meter::busy busy(meter_, "looking for a checkpoint to resume from");
        if (o_.checkpoint_dir.empty()) return std::nullopt;
        job_ = current_job([](const char* name) { return std::getenv(name); });
        if (o_.resume == resume_policy::own && !job_)
            throw error(resume_refusal(checkpoint::manifest{}, o_.checkpoint_dir, o_.resume, job_));
        auto m = checkpoint::find_latest(o_.checkpoint_dir);
        if (!m) return std::nullopt;
        if (auto why = resume_refusal(*m, o_.checkpoint_dir, o_.resume, job_); !why.empty()) throw error(why);
        check_compatible(*m, s_, o_);
        return m;
    }

    // A checkpoint already at --train-steps: the PS tasks take it (they
    // wait for it, and then tell every worker that training is done), and
    // the run ends with one line saying so, no evaluation and no final
    // line: nothing was trained.
    int nothing_left(const checkpoint::manifest& m)
    {
        client_.wait(chief_calls().async_restore(m.global_step));
        chief_calls().shutdown();
        if (who_.after_shutdown) who_.after_shutdown();
        log::info("{}", nothing_to_train(m, o_.checkpoint_dir, o_.train_steps));
        if (comment_)
            comment_->update(
                fmt::format("nothing to train: checkpoint at step {}, --train-steps {}", m.global_step, o_.train_steps),
                true);
        return 0;
    }

    // The chief restores `m` (find_checkpoint's) or initialises every
    // shard; the others pull.  Everyone resumes its data position.
    void start(const std::optional<checkpoint::manifest>& m)
    {
        if (chief()) {
            if (m) {
                trained_before_ = m->trained_seconds;
                samples_before_ = m->trained_samples;
                client_.wait(chief_calls().async_restore(m->global_step));
                schedule_.saved(static_cast<std::int64_t>(m->global_step));
                report_->starts_at(static_cast<std::int64_t>(m->global_step),
                                   o_.checkpoint_dir + "/" + checkpoint::manifest_name(m->global_step));
                log::info("restored {} from {}/{} (global step {}, saved {} by {} ps tasks); {} training to step {}",
                          s_.shape().describe(), o_.checkpoint_dir, checkpoint::manifest_name(m->global_step),
                          m->global_step, m->created, m->shards.size(), mode_, o_.train_steps);
            } else {
                report_->starts_at(0, "");
                s_.shape().initialize(client_.params(), o_.seed);
                log::info(
                    "initialised {} ({} parameters) on {} ps tasks; {} training, {} steps", s_.shape().describe(), n_,
                    who_.num_ps,
                    o_.sync_replicas
                        ? fmt::format("sync ({} of {} workers per step{})", std::min(replicas_, who_.num_workers),
                                      who_.num_workers,
                                      who_.slots() > who_.num_workers ? fmt::format(", room for {}", who_.slots()) : "")
                        : std::string(mode_),
                    o_.train_steps);
                client_.wait(chief_calls().async_init());
            }
        } else {
            client_.wait(client_.async_pull());
        }
        if (auto step = client_.restored_step()) resume_data_position(*step);
    }

    // Draws the batches this worker had drawn before the checkpoint, so the
    // data order goes on where it stopped.
    void resume_data_position(std::uint64_t step)
    {
        progress_meter::busy busy(meter_, "reading the checkpoint's manifest");
        const auto m = checkpoint::read_manifest(o_.checkpoint_dir, checkpoint::manifest_name(step));
        position_ = resumed_position(m, o_, who_.slots(), who_.index);
        if (ctr_) {
            ctr_->skip_batches(position_);
            log::debug("data position restored: {} batches read (epoch {})", position_, ctr_->epoch());
            return;
        }
        split_.sampler().skip_batches(position_, static_cast<std::size_t>(o_.batch_size));
        if (augment_) augment_->resume_after(position_);
        log::debug("data position restored: {} batches drawn (epoch {})", position_, split_.sampler().epoch());
    }

    // Every PS writes its shard (its snapshot hook), then the chief checks
    // it can see them all on the shared path and writes the manifest.
    // Returns false (the error said why; the previous checkpoint is intact)
    // when it could not.  With embedding tables, the table files go into
    // the manifest too (checkpoint::enter_snapshot_files).
    bool save_checkpoint()
    {
        using status = ps::snapshot_result::status;
        const auto t0 = clock::now();
        auto step = client_.global_step();
        schedule_.attempted(static_cast<std::int64_t>(step));
        for (int attempt = 0; attempt < 20; ++attempt) {
            const auto replies = chief_calls().snapshot(step);
            std::uint64_t newest = step;
            bool moved_on = false;
            for (std::size_t p = 0; p < replies.size(); ++p) {
                if (replies[p].outcome == status::failed) {
                    log::error(
                        "checkpoint at global step {} failed: ps {} could not write its shard (its error line says "
                        "why); the previous checkpoint is intact",
                        step, p);
                    return false;
                }
                if (replies[p].outcome == status::moved_on) {
                    moved_on = true;
                    newest = std::max(newest, replies[p].step);
                }
            }
            if (moved_on) {
                step = newest;
                continue;
            }
            auto m = manifest_for(s_, o_, step, mode_);
            m.job = job_;
            m.trained_seconds =
                trained_before_ +
                (train_start_ ? std::chrono::duration<double>(clock::now() - *train_start_).count() : 0.0);
            m.trained_samples = samples_before_ + (report_ ? static_cast<std::uint64_t>(report_->samples()) : 0);
            std::vector<checkpoint::shard_receipt> receipts;
            for (const auto& r : replies) receipts.push_back({r.bytes, static_cast<std::uint32_t>(r.checksum), r.step});
            std::uint64_t bytes = 0;
            progress_meter::busy busy(meter_, "checking the checkpoint's shards and writing its manifest");
            try {
                // The chief must see every shard (and table file): proof that the path is shared.
                bytes = checkpoint::enter_snapshot_files(o_.checkpoint_dir, m, receipts,
                                                         s_.ctr && !s_.ctr->tables().empty(), std::chrono::seconds(10));
                checkpoint::write_manifest(o_.checkpoint_dir, m);
            } catch (const error& e) {
                log::error("checkpoint at global step {} failed: {} (seen from {}): --checkpoint-dir must be a path "
                           "every node "
                           "shares; the previous checkpoint is intact",
                           step, e.what(), who_.name);
                return false;
            }
            schedule_.saved(static_cast<std::int64_t>(step));
            checkpoint::prune(o_.checkpoint_dir, o_.keep_checkpoints);
            const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
            if (report_)
                report_->record({{"event", "checkpoint"},
                                 {"global_step", step},
                                 {"manifest", checkpoint::manifest_name(step)},
                                 {"bytes", bytes},
                                 {"seconds", seconds}});
            log::info("checkpoint at global step {} saved: {}/{} ({} shards, {:.1f} MB, {:.2f}s)", step,
                      o_.checkpoint_dir, checkpoint::manifest_name(step), m.shards.size(), bytes / 1e6, seconds);
            return true;
        }
        log::warn(
            "checkpoint skipped: the PS tasks kept moving past the chief's step (backup workers); trying again later");
        return false;
    }

    int stop_for_preemption()
    {
        const auto step = static_cast<std::int64_t>(client_.global_step());
        log::info("SIGTERM at global step {}: saving a checkpoint, then stopping every task", step);
        const bool saved = schedule_.last_saved() == step || save_checkpoint();
        chief_calls().shutdown(true);
        // squeue shows this, not the last progress line, while a requeued
        // job waits (Slurm holds it about 2 minutes, PENDING (BeginTime)).
        if (comment_ && saved)
            comment_->update(
                fmt::format("stopped at step {} by SIGTERM, checkpoint saved: resumes from it when requeued",
                            schedule_.last_saved()),
                true);
        if (!saved) {
            log::error(
                "stopped at global step {} without a new checkpoint (see the error above): a requeued job resumes "
                "from the previous one",
                step);
            return 1;
        }
        log::info("stopped at global step {}: exiting with status {} so that a requeued job resumes from {}/{}", step,
                  preempted_exit_status, o_.checkpoint_dir, checkpoint::manifest_name(schedule_.last_saved()));
        return preempted_exit_status;
    }

    const train_options& o_;
    const loop_role& who_;
    progress_meter& meter_;
    session s_;
    std::size_t n_;
    std::unique_ptr<ps::client> owned_client_;  // the chief's is a chief_client
    ps::client& client_;
    watchdog::source watched_;  // the watchdog reads client_'s activity (goes before client_)
    // The model reads the parameters and writes the gradients in the
    // client's exchange buffers; page-locked on a GPU.
    compute::host_pin pin_;
    std::optional<ctr_work> ctr_;             // a click-through model's batches (dense models': split_'s sampler)
    std::optional<ctr_test_set> ctr_test_;    // the chief's held-out click-through examples
    std::optional<data::augmenter> augment_;  // --augment-shift / --augment-flip
    data::dataset augmented_;                 // the augmented batch
    std::vector<std::uint32_t> identity_;     // 0..batch-1
    std::vector<std::uint32_t> next_rows_;    // the next batch's, gathered ahead (prefetch_next)
    int replicas_;
    std::vector<model::flat_range> buckets_;       // sync, overlapped: the step's buckets, last first (none: one push)
    std::vector<ps::ticket> pushes_;               // this step's bucket pushes
    std::size_t next_bucket_ = 0;                  // the first bucket of this step not pushed yet
    clock::time_point first_push_;                 // this step's first bucket's push
    std::chrono::nanoseconds overlapped_{0};       // --profile: exchange time while backward or the gather went on
    std::chrono::nanoseconds exposed_{0};          // --profile: exchange time after backward and the gather
    data_split split_;                             // the data among the live workers (ps 0's, as last seen)
    std::uint64_t position_ = 0;                   // batches drawn, across restarts
    std::chrono::nanoseconds compute_time_{0};     // in the model's compute_gradients, for --profile
    checkpoint_schedule schedule_;                 // the chief's: when to checkpoint, the newest one's step
    std::optional<reporter> report_;               // the chief's progress lines and metrics file
    std::optional<job_comment> comment_;           // the chief's status in the Slurm job's comment
    const char* mode_;                             // in the final line and the manifest: sync, async or standalone
    std::optional<checkpoint::job_identity> job_;  // the chief's Slurm job, recorded in its manifests
    double trained_before_ = 0;                    // training seconds and examples of the segments before this one (the
    std::uint64_t samples_before_ = 0;             // checkpoint resumed), counted in the final line and the manifests
    std::optional<clock::time_point> train_start_;  // when this segment's training began
    std::int64_t next_eval_ = 0;                    // the chief's next evaluation's step (0: at the end only)
    std::int64_t last_step_ = 0;                    // the global step at the chief's last progress
    std::int64_t local_steps_ = 0;                  // this worker's steps in this segment
    ps_recovery recovery_;                          // --ps-spares: a lost PS's replacement
};

}  // namespace

int run_training_loop(const train_options& o, const loop_role& who, ps::transport& net)
{
    training_loop t(o, who, net);
    return t.run();
}

}  // namespace pstrain::trainer
