#include "pstrain/server.hpp"

#include "common/denormals.hpp"
#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "library/ps/activity_recorder.hpp"
#include "library/ps/dense_step.hpp"
#include "library/ps/membership.hpp"
#include "library/ps/process_fence.hpp"
#include "library/ps/protocol.hpp"
#include "library/ps/request_check.hpp"
#include "library/ps/served_shard.hpp"
#include "library/ps/server_state.hpp"
#include "library/ps/sparse_service.hpp"
#include "library/ps/staleness_bound.hpp"
#include "library/ps/startup.hpp"
#include "library/ps/worker_link.hpp"

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
// the sparse service (sparse_service.hpp), the membership for a worker
// that is lost, leaves or comes back (membership.hpp), startup for a
// rollback, or itself for hello, snapshot, stats and shutdown.
// All of it runs on the thread that called run(); the public accessors
// read its counters from any thread.
class server::impl {
public:
    impl(transport& net, server_config c, server_hooks h)
        : activity_(peer_names(net)), net_(net), cfg_(std::move(c)), hooks_(std::move(h)),
          links_(net, activity_, profile_), bound_(links_.size(), unbounded_staleness),
          members_(net, links_, bound_, cfg_, state_), sparse_(cfg_.training.tables, hooks_, links_, state_, profile_),
          startup_(net, links_, cfg_, hooks_, members_, sparse_, activity_, profile_)
    {
        if (cfg_.spare) cfg_.index = 0;  // until the chief's take_over says whose place it takes
        startup_.take_own_settings();
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

    void start()
    {
        const auto hello = startup_.receive_hello();
        num_params_ = hello.num_params;
        startup_.receive_hello_payload(hello);
        startup_.take_settings(startup_.chief_settings(hello));
        startup_.take_precision(hello);
        const bool sync = cfg_.training.sync;
        const auto range = startup_.plan_shard(hello);
        shard_ = startup_.allocate(range, sparse_.slot_floats());
        startup_.apply_hello_payload(hello, *shard_);
        sparse_.hold_for_steps(sync && range.size() > 0);
        dense_.emplace(links_, *shard_, sparse_, state_, profile_, activity_, hooks_, sync, members_.replicas(),
                       sync ? nullptr : &bound_);
        members_.tell(*dense_);
        handle(0, std::nullopt);  // the chief's hello, as any other
        if (!links_[0].greeted) refused_chief();
        const bool restoring = startup_.await_init_or_restore(*shard_, sparse_.tables(), state_);
        log::info("shard [{}, {}) of {} parameters ({:.1f} KB), {} mode{}, {} global step {}", range.begin, range.end,
                  num_params_, wire::dense_bytes(range) / 1000.0, sync ? "sync" : "async", members_.pace_words(),
                  restoring ? "restored from the checkpoint at" : "starting at", state_.step);
        state_.done = hooks_.step_completed && hooks_.step_completed(state_.step);
        activity_.progressed();
        for (std::size_t i = 1; i < links_.size(); ++i)
            if (!links_[i].lost) links_.post(i);
        dense_->reply_values(0, range, false, values_status::ok);
        if (cfg_.spare) startup_.stand_in(state_.step);
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
        if (cfg_.spare && !startup_.await_take_over()) return server_outcome::done;
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
        } else if (cfg_.training.sync) {
            // The step waits for the gradients it has not got.
            activity_.begin(dense_->step_begun() ? "the missing gradients of a sync step"
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
        if (links_.back(i)) return members_.back(i);
        if (!p.ready() || !p.recv.ok()) return members_.lost(i);
        p.posted = false;
        std::optional<std::uint64_t> received;
        if (p.in.payload_bytes > 0) {
            p.payload_posted = false;
            received = p.payload_recv.ok() ? p.payload_recv.length() : ~std::uint64_t(0);
        }
        const bool whole = !received || *received == p.in.payload_bytes;
        if (!whole && net_.failed(i)) return members_.lost(i);
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
        c.sync_pushes = cfg_.training.sync && !state_.done;
        c.buckets = members_.replicas_wanted() >= static_cast<int>(links_.size());
        c.step = state_.step;
        if (c.sync_pushes && dense_) {
            c.step_buckets = dense_->step_buckets();
            c.step_applied = dense_->step_applied();
            if (dense_->contributed(i)) c.pushed_to_step = state_.step;
        }
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
        case wire::kind::rollback:
            return startup_.roll_back(i, wire::body<wire::rollback>(in).step, *shard_, *dense_, state_);
        case wire::kind::leave: return members_.left(i);
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
        if (!members_.admit(i)) return;
        std::string why;
        const bool mapped = links_.map_buffers(i, h, range, cfg_.share_memory, why);
        if (!why.empty())
            return links_.refuse(
                i, wire::refusal_of(wire::refusal_code::bad_buffers, h.params_address, h.grads_address),
                fmt::format("refused the hello of {}: its exchange buffers at {:#x} and {:#x} are not inside "
                            "the memory its rkey maps ({}): is another program talking to this PS?",
                            net_.peer_name(i), h.params_address, h.grads_address, why));
        members_.welcomed(i);
        p.greeted = true;
        wire::welcome w{range.begin, range.end, num_params_, mapped ? 1u : 0u};
        if (mapped) {
            // Whom a worker on this host kills before a spare takes this
            // PS's place (process_fence.hpp).
            static const process_identity self = this_process();
            w.pid = self.pid;
            w.pid_namespace = self.pid_namespace;
            w.start_ticks = self.start_ticks;
        }
        links_.reply(i, wire::encode(w));
    }

    // The shard at the chief's step, through the snapshot hook.  In sync
    // mode every shard must hold the same step: a PS that has moved on
    // (backup workers finished a step without the chief) says so, and the
    // chief asks again at the newer step.  In async mode the shard is taken
    // as it is now, a few updates apart from the other shards.
    void on_snapshot(std::size_t i, const wire::snapshot& m)
    {
        wire::snapshot_done d;
        if (cfg_.training.sync && m.step != state_.step) {
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

    transport& net_;
    server_config cfg_;  // its training settings may be the chief's (startup::take_settings)
    const server_hooks hooks_;
    worker_links links_;
    staleness_bound bound_;  // async: the workers' clocks and the replies the bound holds
    membership members_;
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
