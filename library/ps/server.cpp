#include "pstrain/server.hpp"

#include "common/denormals.hpp"
#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "library/ps/activity_recorder.hpp"
#include "library/ps/dense_step.hpp"
#include "library/ps/protocol.hpp"
#include "library/ps/request_check.hpp"
#include "library/ps/served_shard.hpp"
#include "library/ps/server_state.hpp"
#include "library/ps/sparse_service.hpp"
#include "library/ps/staleness_bound.hpp"
#include "library/ps/startup.hpp"
#include "library/ps/worker_link.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include <fmt/format.h>

namespace pstrain::ps {

namespace {
constexpr auto far_future = std::chrono::hours(24 * 365);
}  // namespace

// The dispatcher: starts the server (startup.hpp), then takes each
// worker's messages in turn, checks them (request_check.hpp) and hands
// each to the collaborator that serves it: the dense step (dense_step.hpp),
// the sparse service (sparse_service.hpp), or itself for hello, snapshot,
// stats and shutdown; and it decides what the loss of a worker means.
// All of it runs on the thread that called run(); the public accessors
// read its counters from any thread.
class server::impl {
public:
    impl(transport& net, server_config c, server_hooks h)
        : activity_(peer_names(net)), net_(net), cfg_(std::move(c)), hooks_(std::move(h)),
          links_(net, activity_, profile_), bound_(links_.size(), unbounded_staleness),
          sparse_(cfg_.tables, hooks_, links_, state_, profile_), startup_(net, links_, cfg_, hooks_)
    {
        if (links_.size() == 0) throw error("a parameter server needs at least one worker");
        if (cfg_.started_workers > links_.size())
            throw error(fmt::format("{} workers start with the job, and the transport has room for {}",
                                    cfg_.started_workers, links_.size()));
        if (cfg_.started_workers > 0 && cfg_.started_workers < links_.size()) {
            if (!cfg_.elastic)
                throw error("room for workers that join later is for elastic jobs: set server_config::elastic");
            // The slots of workers that join later: lost until one does.
            for (std::size_t i = cfg_.started_workers; i < links_.size(); ++i) {
                links_[i].lost = true;
                bound_.lost(i);
            }
        }
        if (cfg_.spare) cfg_.index = 0;  // until the chief's take_over says whose place it takes
        if (cfg_.num_ps < 1 || cfg_.index < 0 || cfg_.index >= cfg_.num_ps)
            throw error(fmt::format("PS index {} is outside 0..{}", cfg_.index, cfg_.num_ps - 1));
        if (!cfg_.settings_from_chief) configure(error_from_here);
        links_.set_precision(cfg_.precision);
    }

    server_outcome run()
    {
        std::optional<scoped_denormal_mode> denormals;
        if (cfg_.flush_denormals) denormals.emplace(denormal_mode::flush);
        try {
            auto outcome = serve();
            links_.release();
            return outcome;
        } catch (...) {
            links_.release();
            throw;
        }
    }

    training_state state_;
    activity_recorder activity_;
    server_clock profile_{server_phase_names()};
    std::uint64_t keys_pulled() const { return sparse_.keys_pulled(); }
    std::uint64_t keys_pushed() const { return sparse_.keys_pushed(); }
    staleness_counters staleness() const { return bound_.counters(); }

private:
    using values_status = wire::values_status;

    // ------------------------------------------------------------ start-up

    // How the settings are checked: a server's own when it is made, the
    // chief's when its hello brings them.
    enum settings_origin { error_from_here, error_from_chief };

    // Sync's gradients per step, async's staleness bound and the embedding
    // tables, from cfg_'s settings.
    void configure(settings_origin origin)
    {
        if (cfg_.sync && cfg_.max_staleness >= 0) {
            const auto what =
                fmt::format("a staleness bound ({}) is for async training, and this job is sync", cfg_.max_staleness);
            if (origin == error_from_here) throw error(what + ": leave it out, or train async");
            throw peer_error(net_.peer_name(0),
                             fmt::format("{} asks for {}: leave it out, or train async", net_.peer_name(0), what));
        }
        bound_.set_bound(cfg_.sync ? unbounded_staleness : cfg_.max_staleness);
        replicas_ = replicas_wanted();
        // Elastic: no more than the live workers (the room for workers that
        // join later has none yet); the check below is against the room.
        const int at_start = cfg_.elastic ? std::min(replicas_, links_.live()) : replicas_;
        if (cfg_.sync && replicas_ > static_cast<int>(links_.size())) {
            const auto what = fmt::format("sync training cannot aggregate {} gradients per step from {} workers",
                                          replicas_, links_.size());
            if (origin == error_from_here) throw error(what);
            throw peer_error(net_.peer_name(0), fmt::format("{} asks for {}: aggregate at most {}", net_.peer_name(0),
                                                            what, links_.size()));
        }
        replicas_ = at_start;
        sparse_.set_tables(cfg_.tables);
    }

    // The chief's training settings, adopted (settings_from_chief) or
    // checked against this server's own.
    void take_settings(const std::optional<training_settings>& chief)
    {
        const auto who = net_.peer_name(0);
        if (cfg_.settings_from_chief) {
            if (!chief)
                throw peer_error(who, fmt::format("{} did not say how to train (optimizer, sync or async, tables): a "
                                                  "PS task started without them (pstrain serve) serves programs whose "
                                                  "chief says them, as pstrain's Python package does; pstrain's "
                                                  "own workers need pstrain's own PS tasks, with the same flags",
                                                  who));
            adopt(cfg_, *chief);
            configure(error_from_chief);
            log::info("training as {} says: {} (learning rate {}), {}{}, {} embedding table(s)", who,
                      optimizer_name(cfg_.optimizer.kind), cfg_.optimizer.learning_rate, cfg_.sync ? "sync" : "async",
                      bound_words(), cfg_.tables.size());
        } else if (chief) {
            if (auto d = settings_difference(settings_of(cfg_), *chief, "this PS", who))
                throw peer_error(who, fmt::format("{} trains with other settings than this PS: {}: give every task of "
                                                  "the job the same flags",
                                                  who, *d));
        }
    }

    // A server without settings of its own takes the chief's wire precision
    // (every other worker's hello must say the same); others check it at
    // the chief's hello as at any other.
    void take_precision(const wire::hello& h)
    {
        if (!cfg_.settings_from_chief) return;
        const auto who = net_.peer_name(0);
        if (h.precision > static_cast<std::uint32_t>(wire_precision::bf16))
            throw peer_error(who, fmt::format("{} sends wire precision {}, none this PS knows: run the same pstrain "
                                              "version in every task",
                                              who, h.precision));
        cfg_.precision = static_cast<wire_precision>(h.precision);
        links_.set_precision(cfg_.precision);
        if (cfg_.precision != wire_precision::fp32)
            log::info("gradients and values travel as {}, as {} says (FP32 here)", name_of(cfg_.precision), who);
    }

    void start()
    {
        const auto hello = startup_.receive_hello();
        num_params_ = hello.num_params;
        startup_.receive_hello_payload(hello);
        take_settings(startup_.chief_settings(hello));
        take_precision(hello);
        const auto range = startup_.plan_shard(hello);
        shard_ = startup_.allocate(range, sparse_.slot_floats());
        startup_.apply_hello_payload(hello, *shard_);
        sparse_.hold_for_steps(cfg_.sync && range.size() > 0);
        dense_.emplace(links_, *shard_, sparse_, state_, profile_, activity_, hooks_, cfg_.sync, replicas_,
                       cfg_.sync ? nullptr : &bound_);
        handle(0, std::nullopt);  // the chief's hello, as any other
        if (!links_[0].greeted) refused_chief();
        const bool restoring = startup_.await_init_or_restore(*shard_, sparse_.tables(), state_);
        log::info("shard [{}, {}) of {} parameters ({:.1f} KB), {} mode{}, {} global step {}", range.begin, range.end,
                  num_params_, wire::dense_bytes(range) / 1000.0, cfg_.sync ? "sync" : "async",
                  cfg_.sync ? fmt::format(" aggregating {} of {} workers{}{}", replicas_, links_.live(),
                                          cfg_.elastic ? " (elastic: fewer when workers are lost)" : "",
                                          links_.live() < static_cast<int>(links_.size()) && cfg_.elastic
                                              ? fmt::format(", room for {} workers", links_.size())
                                              : "")
                            : bound_words(),
                  restoring ? "restored from the checkpoint at" : "starting at", state_.step);
        state_.done = hooks_.step_completed && hooks_.step_completed(state_.step);
        activity_.progressed();
        for (std::size_t i = 1; i < links_.size(); ++i)
            if (!links_[i].lost) links_.post(i);
        dense_->reply_values(0, range, false, values_status::ok);
        if (cfg_.spare) stand_in();
    }

    // A spare waits for the chief: its take_over names the lost PS whose
    // place this one takes.  A shutdown instead: the job ended without
    // needing this spare (false).
    bool await_take_over()
    {
        const auto who = net_.peer_name(0);
        auto& chief = links_[0];
        chief.recv = net_.recv(0, channel::control, &chief.in, sizeof chief.in);
        chief.posted = true;
        log::info("a spare PS: waiting until the chief needs it in a lost PS's place");
        {
            server_clock::scope timed(profile_, waiting);
            activity_.set_idle(true);  // a program's watchdog sees no stall in this wait
            links_.wait_for(0, "the chief's take_over (a spare waits until a PS is lost)",
                            [&] { return chief.recv.complete(); });
            activity_.set_idle(false);
        }
        chief.posted = false;
        if (!chief.recv.complete() || !chief.recv.ok())
            throw peer_error(who, fmt::format("lost {} while this spare waited: {}", who,
                                              net_.failed(0) ? net_.failure(0) : chief.recv.failure()));
        if (auto bad = wire::check_envelope(chief.in))
            throw peer_error(who, fmt::format("{} sent this spare a malformed message: {}", who, wire::describe(*bad)));
        links_.received(chief.in);
        if (chief.in.kind == static_cast<std::uint16_t>(wire::kind::shutdown)) {
            log::info("the chief ended the job: this spare was not needed");
            return false;
        }
        if (chief.in.kind != static_cast<std::uint16_t>(wire::kind::take_over))
            throw peer_error(who, fmt::format("{} sent a {} message to a spare PS, which waits for take_over: run the "
                                              "same pstrain in every task",
                                              who, wire::kind_name(chief.in.kind)));
        const auto m = wire::body<wire::take_over>(chief.in);
        if (m.num_ps != static_cast<std::uint32_t>(cfg_.num_ps) || m.index >= m.num_ps)
            throw peer_error(who, fmt::format("{} asks this spare to take the place of ps {} of {}, and this spare "
                                              "was started for a job of {} PS tasks: give every task the same flags",
                                              who, m.index, m.num_ps, cfg_.num_ps));
        cfg_.index = static_cast<int>(m.index);
        log::info("taking the place of lost ps {}: its shard comes from the chief's restore", cfg_.index);
        return true;
    }

    // The spare holds the lost PS's shard: every other worker is told,
    // and says hello.
    void stand_in()
    {
        wire::standing_in m;
        m.step = state_.step;
        m.index = static_cast<std::uint32_t>(cfg_.index);
        for (std::size_t i = 1; i < links_.size(); ++i)
            if (!links_[i].lost && !net_.failed(i)) links_.reply(i, wire::encode(m));
        log::info("standing in for ps {} from global step {}", cfg_.index, state_.step);
    }

    // Async's staleness bound in words, for the start-up lines.
    std::string bound_words() const
    {
        if (!bound_.bounded()) return "";
        return fmt::format(" (a worker at most {} pushes ahead of the slowest)", cfg_.max_staleness);
    }

    // The chief's hello was refused: once the refusal has left, nothing
    // can be served.
    [[noreturn]] void refused_chief()
    {
        const auto who = net_.peer_name(0);
        links_.wait_for(0, "the send of the refusal of its hello", [&] { return links_[0].send.complete(); });
        throw peer_error(who, fmt::format("refused the hello of {} (the chief): {}", who,
                                          wire::describe(wire::body<wire::refusal>(links_[0].out))));
    }

    // ------------------------------------------------------------ serving

    server_outcome serve()
    {
        if (cfg_.spare && !await_take_over()) return server_outcome::done;
        start();
        for (;;) {
            if (state_.shutdown && (links_.everyone_told() || clock::now() > shutdown_deadline_)) {
                if (!links_.everyone_told())
                    log::warn(
                        "not every worker came back for its last reply within {}s of the chief's shutdown: exiting",
                        cfg_.shutdown_wait.count());
                links_.drain_sends();
                return state_.stopped ? server_outcome::stopped : server_outcome::done;
            }
            std::optional<std::size_t> ready;
            {
                describe_wait();
                activity_recorder::ender end_of_wait(activity_);
                server_clock::scope timed(profile_, waiting);
                ready = links_.wait_any(state_.shutdown ? shutdown_deadline_ : clock::now() + far_future);
            }
            if (!ready) continue;
            server_clock::scope timed(profile_, requests);
            take(*ready);
        }
    }

    // What serve() waits for: the workers and the request it needs next.
    void describe_wait()
    {
        const auto n = links_.size();
        if (state_.shutdown) {
            activity_.begin("the workers' last requests after the chief ended the job", 0, false, true);
            for (std::size_t i = 0; i < n; ++i) activity_.pending(i, !links_[i].lost && !links_[i].told_done);
        } else if (cfg_.sync) {
            // The step waits for the gradients it has not got.
            activity_.begin(dense_->contributions() > 0 ? "the missing gradients of a sync step"
                                                        : "the gradients of a sync step",
                            state_.step, true);
            for (std::size_t i = 0; i < n; ++i) activity_.pending(i, !links_[i].lost && !dense_->contributed(i));
        } else if (bound_.holding()) {
            // A worker too far ahead waits for the slowest ones' gradients.
            activity_.begin("the gradients of the slowest workers (async: the staleness bound holds a reply)",
                            state_.step, true);
            for (std::size_t i = 0; i < n; ++i) activity_.pending(i, bound_.slowest(i));
        } else {
            activity_.begin("a request (async: from any worker)");
            for (std::size_t i = 0; i < n; ++i) activity_.pending(i, !links_[i].lost);
        }
    }

    // Worker i's message is here, or it was lost.  A whole message that
    // came before the peer went (the chief's shutdown, then its exit) is
    // handled first: the loss is seen on the next round.
    void take(std::size_t i)
    {
        auto& p = links_[i];
        if (links_.back(i)) return on_worker_back(i);
        if (!p.ready() || !p.recv.ok()) return on_worker_lost(i);
        p.posted = false;
        std::optional<std::uint64_t> received;
        if (p.in.payload_bytes > 0) {
            p.payload_posted = false;
            received = p.payload_recv.ok() ? p.payload_recv.length() : ~std::uint64_t(0);
        }
        const bool whole = !received || *received == p.in.payload_bytes;
        if (!whole && net_.failed(i)) return on_worker_lost(i);
        if (whole) links_.received(p.in);
        handle(i, received);
        if (whole) activity_.progressed();
    }

    // Every message: checked, then served or refused.
    void handle(std::size_t i, std::optional<std::uint64_t> received)
    {
        if (auto bad = check_request(links_[i].in, received, context_of(i))) return links_.refuse(i, *bad);
        dispatch(i);
    }

    request_context context_of(std::size_t i) const
    {
        request_context c;
        c.worker = i;
        c.num_workers = links_.size();
        c.greeted = links_[i].greeted;
        c.mapped = links_[i].mapped_params != nullptr;
        c.range = shard_->range();
        c.num_params = num_params_;
        c.whole_shard_pushes = cfg_.sync && !state_.done;
        if (c.whole_shard_pushes && dense_ && dense_->contributed(i)) c.pushed_to_step = state_.step;
        c.table_dims = sparse_.dims();
        c.precision = cfg_.precision;
        return c;
    }

    void dispatch(std::size_t i)
    {
        const auto& in = links_[i].in;
        switch (static_cast<wire::kind>(in.kind)) {
        case wire::kind::hello: return on_hello(i);
        case wire::kind::pull: {
            const auto m = wire::body<wire::pull>(in);
            return dense_->reply_values(i, {m.range_begin, m.range_end}, m.in_shared_memory != 0, values_status::ok);
        }
        case wire::kind::push: return dense_->on_push(i, wire::body<wire::push>(in));
        case wire::kind::snapshot: return on_snapshot(i, wire::body<wire::snapshot>(in));
        case wire::kind::stats: return links_.reply_stats(i, state_.step);
        case wire::kind::sparse_pull: return sparse_.on_pull(i, wire::body<wire::sparse_pull>(in));
        case wire::kind::sparse_push: return sparse_.on_push(i, wire::body<wire::sparse_push>(in));
        case wire::kind::shutdown: return on_shutdown(wire::body<wire::shutdown>(in).stop != 0);
        case wire::kind::rollback: return on_rollback(i, wire::body<wire::rollback>(in).step);
        case wire::kind::leave: return on_leave(i);
        case wire::kind::init:
        case wire::kind::restore:
            // A repeated initialisation (the chief restarted its connection): the values stand.
            return dense_->reply_values(i, shard_->range(), false, values_status::ok);
        default: return links_.refuse(i, wire::refusal_of(wire::refusal_code::bad_kind, in.kind));
        }
    }

    // hello (checked: the worker's model is the chief's): map its buffers
    // when it offers them and the transport can, and welcome it.
    void on_hello(std::size_t i)
    {
        auto& p = links_[i];
        const auto h = wire::body<wire::hello>(p.in);
        const auto& range = shard_->range();
        if (p.rejoining && !cfg_.elastic) {
            p.rejoining = false;
            links_.refuse(i, wire::refusal_of(wire::refusal_code::not_elastic),
                          fmt::format("refused the hello of {}, a new process in place of the lost one: this job is "
                                      "not elastic (start it with --elastic to take workers back)",
                                      net_.peer_name(i)));
            p.lost = true;  // as it was: this PS goes on without it
            return;
        }
        std::string why;
        const bool mapped = links_.map_buffers(i, h, range, cfg_.share_memory, why);
        if (!why.empty())
            return links_.refuse(
                i, wire::refusal_of(wire::refusal_code::bad_buffers, h.params_address, h.grads_address),
                fmt::format("refused the hello of {}: its exchange buffers at {:#x} and {:#x} are not inside "
                            "the memory its rkey maps ({}): is another program talking to this PS?",
                            net_.peer_name(i), h.params_address, h.grads_address, why));
        if (p.rejoining) {
            p.rejoining = false;
            rejoined(i);
        }
        p.greeted = true;
        links_.reply(i, wire::encode(wire::welcome{range.begin, range.end, num_params_, mapped ? 1u : 0u}));
    }

    // A lost worker's place was taken by a new process (a restarted task):
    // its link starts over, and its hello says whether it may stay.
    void on_worker_back(std::size_t i)
    {
        links_.renew(i);
        links_[i].rejoining = true;
        if (new_worker(i))
            log::info("{} is connected: a new worker in room the job kept for one, at global step {}",
                      net_.peer_name(i), state_.step);
        else log::info("{} is back: a new process took its place at global step {}", net_.peer_name(i), state_.step);
    }

    // Worker i is the first process in a slot that had none at the start
    // (server_config::started_workers).
    bool new_worker(std::size_t i) const
    {
        return cfg_.started_workers > 0 && i >= cfg_.started_workers && net_.reconnections(i) == 1;
    }

    // Elastic training takes worker i back: sync steps aggregate its
    // gradient again (up to replicas_to_aggregate); async, its clock starts
    // level with the slowest worker's.
    void rejoined(std::size_t i)
    {
        bound_.back(i);
        const char* joined = new_worker(i) ? "joined" : "joined again";
        if (!cfg_.sync) return log::info("{} {} at global step {}", net_.peer_name(i), joined, state_.step);
        const auto [was, from] = aggregate_the_live_workers();
        log::info("{} {}: elastic sync training aggregates {} gradients per step from global step {} (was {})",
                  net_.peer_name(i), joined, replicas_, from, was);
    }

    // Sync: the gradients per step the settings ask for (0: every worker).
    int replicas_wanted() const
    {
        return cfg_.replicas_to_aggregate > 0 ? cfg_.replicas_to_aggregate : static_cast<int>(links_.size());
    }

    // Elastic sync: a step aggregates what the settings ask for, or the
    // live workers' gradients when fewer are alive; a step that has that
    // many already is applied now.  Returns the count it replaces and the
    // global step from which the new one counts (before that step's update).
    std::pair<int, std::uint64_t> aggregate_the_live_workers()
    {
        const std::uint64_t from = state_.step;
        const int was = std::exchange(replicas_, std::min(replicas_wanted(), links_.live()));
        if (dense_) dense_->set_replicas(replicas_);
        return {was, from};
    }

    // The shard at the chief's step, through the snapshot hook.  In sync
    // mode every shard must hold the same step: a PS that has moved on
    // (backup workers finished a step without the chief) says so, and the
    // chief asks again at the newer step.  In async mode the shard is taken
    // as it is now, a few updates apart from the other shards.
    void on_snapshot(std::size_t i, const wire::snapshot& m)
    {
        wire::snapshot_done d;
        if (cfg_.sync && m.step != state_.step) {
            d.status = static_cast<std::uint32_t>(wire::snapshot_status::moved_on);
            d.step = state_.step;
        } else if (!hooks_.snapshot) {
            log::error("the chief asked for a snapshot and this server has no snapshot hook");
            d.status = static_cast<std::uint32_t>(wire::snapshot_status::failed);
        } else {
            d = take_snapshot(m.step);
        }
        links_.reply(i, wire::encode(d));
    }

    wire::snapshot_done take_snapshot(std::uint64_t step)
    {
        std::vector<std::uint64_t> positions;
        for (std::size_t k = 0; k < links_.size(); ++k) positions.push_back(links_[k].position);
        const auto& shard = shard_->shard();
        shard_snapshot s;
        s.step = step;
        s.index = cfg_.index;
        s.num_ps = cfg_.num_ps;
        s.range = shard.range();
        s.num_params = num_params_;
        s.optimizer = shard.optimizer().kind;
        s.values = shard.values();
        s.state = shard.state();
        s.updates = shard.updates();
        s.positions = positions;
        s.tables = sparse_.tables();
        wire::snapshot_done d;
        try {
            const auto receipt = hooks_.snapshot(s);
            for (auto& table : sparse_.tables()) table.clear_changed();  // stored: the next snapshot starts from here
            d.status = static_cast<std::uint32_t>(wire::snapshot_status::taken);
            d.step = step;
            d.bytes = receipt.bytes;
            d.checksum = receipt.checksum;
        } catch (const error&) {
            d.status = static_cast<std::uint32_t>(wire::snapshot_status::failed);  // the hook said why
        }
        return d;
    }

    // Sync: a lost PS's replacement restored the snapshot at `step`, and
    // every shard goes back to it, so that the model stays one step's.
    // Gradients still waiting for the current step are answered first (the
    // chief asks once every worker has its replies); replies in flight
    // leave before the values change; the tables start empty and take the
    // snapshot's rows.  The reply is the shard's values.
    void on_rollback(std::size_t i, std::uint64_t step)
    {
        if (!cfg_.sync)
            return links_.refuse(i, wire::refusal_of(wire::refusal_code::bad_kind, links_[i].in.kind),
                                 fmt::format("refused {}'s rollback: only sync training rolls every shard back (async "
                                             "restores only the lost PS's shard)",
                                             net_.peer_name(i)));
        const std::uint64_t was = state_.step;
        dense_->answer_waiting();
        for (std::size_t k = 0; k < links_.size(); ++k) sparse_.drop_held(k);  // their steps are trained again
        links_.drain_sends();
        sparse_.set_tables(cfg_.tables);
        try {
            startup_.restore(step, *shard_, sparse_.tables(), state_);
        } catch (const peer_error&) {
            throw;
        } catch (const error& e) {
            throw peer_error(net_.peer_name(0),
                             fmt::format("cannot roll back to the snapshot at global step {}: {}", step, e.what()));
        }
        log::warn("rolled back from global step {} to the snapshot at global step {}, as the chief asked (a lost PS's "
                  "replacement restored it): the {} steps since are trained again",
                  was, step, was > step ? was - step : 0);
        state_.done = hooks_.step_completed && hooks_.step_completed(state_.step);
        activity_.progressed();
        dense_->reply_values(i, shard_->range(), false, values_status::ok);
    }

    // The chief ends training (or stops it for preemption): every worker
    // still training is told so on its next reply, then this PS exits.
    void on_shutdown(bool stop)
    {
        state_.shutdown = true;
        shutdown_deadline_ = clock::now() + cfg_.shutdown_wait;
        links_[0].told_done = true;
        if (stop && !state_.done) {
            state_.stopped = true;
            log::info("the chief stopped the job at global step {} (SIGTERM): it resumes from the checkpoint",
                      state_.step);
        } else {
            log::info("the chief ended the job at global step {}", state_.step);
        }
        // From now on every reply says done (or stopped): that is how the
        // other workers learn that training ended, and leave.
        state_.done = true;
        // Sync: gradients waiting for a step that will not come are answered;
        // async: replies held by the staleness bound too.
        dense_->answer_waiting();
        dense_->release_held();
    }

    // ------------------------------------------------------------ failures

    // Worker i's program ended and said so (client::leave; never the
    // chief's): it goes as a lost worker of an elastic job does, whatever
    // the settings, for it ended its part of the training: a sync step from
    // now on aggregates the live workers' gradients when fewer are left
    // than it asks for.  Its connection's end is not a loss.
    void on_leave(std::size_t i)
    {
        links_[i].lost = true;
        bound_.lost(i);
        const auto who = net_.peer_name(i);
        if (state_.done) return;
        if (cfg_.sync && links_.live() < replicas_) {
            const auto [was, from] = aggregate_the_live_workers();
            log::info("{} left (its program ended): sync training aggregates {} gradients per step from global step "
                      "{} (was {})",
                      who, replicas_, from, was);
        } else {
            log::info("{} left (its program ended): going on with {} workers", who, links_.live());
        }
        if (dense_) dense_->release_held();
    }

    void on_worker_lost(std::size_t i)
    {
        auto& p = links_[i];
        p.lost = true;
        bound_.lost(i);
        const auto why = net_.failed(i) ? net_.failure(i) : p.recv.failure();
        const auto who = net_.peer_name(i);
        if (state_.done) {
            if (i == 0 && !state_.shutdown)
                throw peer_error(who, fmt::format("lost {} before it ended the job ({})", who, why));
            // Workers leave once a reply told them training is done; one
            // that went before its reply is named, however late it is found.
            if (!p.told_done)
                log::warn("lost {} ({}) after training ended at global step {}, before its last reply", who, why,
                          state_.step);
            return;
        }
        const int live = links_.live();
        if (cfg_.sync && cfg_.elastic && i != 0 && live < replicas_) {
            const auto [was, from] = aggregate_the_live_workers();
            return log::warn("lost {} ({}): elastic sync training goes on, aggregating {} gradients per step from "
                             "global step {} (was {}); {} workers alive",
                             who, why, replicas_, from, was, links_.live());
        }
        std::string fatal;
        if (i == 0)
            fatal = fmt::format(
                "lost {} ({}): the chief initialises, evaluates and ends the job, training cannot go on", who, why);
        else if (cfg_.sync && live < replicas_)
            fatal = fmt::format(
                "lost {} ({}): sync training aggregates {} gradients per step and only {} workers are left; "
                "use --replicas-to-aggregate {} to run with backup workers",
                who, why, replicas_, live, std::max<std::size_t>(1, links_.size() - 1));
        else if (live == 0) fatal = fmt::format("lost {} ({}): no worker is left", who, why);
        if (fatal.empty()) {
            // In sync mode a gradient it gave to this step still counts; in
            // async mode it is no longer the slowest that others wait for.
            log::warn("lost {} ({}): going on with {} workers", who, why, live);
            if (dense_) dense_->release_held();
            return;
        }
        links_.abort_all(i);
        throw peer_error(who, fatal);
    }

    transport& net_;
    server_config cfg_;  // its training settings may be the chief's (take_settings)
    const server_hooks hooks_;
    int replicas_ = 0;  // sync: gradients per step (configure())
    worker_links links_;
    staleness_bound bound_;  // async: the workers' clocks and the replies the bound holds
    sparse_service sparse_;
    startup startup_;
    std::uint64_t num_params_ = 0;         // the model's, from the chief's hello
    std::unique_ptr<served_shard> shard_;  // from start() on
    std::optional<dense_step> dense_;      // from start() on
    clock::time_point shutdown_deadline_;
};

server::server(transport& net, server_config config, server_hooks hooks)
    : impl_(std::make_unique<impl>(net, std::move(config), std::move(hooks)))
{}

server::~server() = default;

server_outcome server::run() { return impl_->run(); }
std::uint64_t server::global_step() const { return impl_->state_.step; }
std::uint64_t server::stale_gradients() const { return impl_->state_.stale; }
ps::activity server::activity() const { return impl_->activity_.snapshot(); }
time_profile server::profile() const { return impl_->profile_.snapshot(); }
sparse_traffic server::sparse() const { return {impl_->keys_pulled(), impl_->keys_pushed()}; }
staleness_counters server::staleness() const { return impl_->staleness(); }

}  // namespace pstrain::ps
