#include "pstrain/server.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "trainer/ps/activity_recorder.hpp"
#include "trainer/ps/phase_clock.hpp"
#include "trainer/ps/protocol.hpp"
#include "trainer/ps/shard.hpp"
#include "trainer/ps/update_pool.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <optional>
#include <stdexcept>

#include <unistd.h>

#include <fmt/format.h>

namespace pstrain::ps {

namespace {
constexpr auto far_future = std::chrono::hours(24 * 365);

std::vector<std::string> names_of(const transport& net)
{
    std::vector<std::string> names;
    for (std::size_t p = 0; p < net.num_peers(); ++p) names.push_back(net.peer_name(p));
    return names;
}
}  // namespace

struct peer_state {
    wire::frame in;                   // the message being handled
    float_buffer slot;                // its payload (a gradient, values, or a memory key)
    request recv, payload_recv;       // the posted receives
    bool posted = false, payload_posted = false;
    bool lost = false;
    bool greeted = false;             // its hello was welcomed: it may ask for more
    bool told_done = false;           // a reply said done or stopped: it leaves now
    std::uint64_t position = 0;       // its data position after its last gradient this shard has applied (or dropped)
    wire::frame out;                  // the reply in flight
    request send, payload_send;
    const float* sending = nullptr;   // the values buffer its reply payload reads until payload_send is done
    // Its exchange buffers, mapped here: element range_.begin of each (the
    // part of them this PS reads and writes, and all it checked is mapped).
    std::unique_ptr<peer_memory> mapping;
    float* mapped_params = nullptr;
    const float* mapped_grads = nullptr;
    // Sync: its gradient waits in the step being aggregated.
    bool contributed = false;
    bool contributed_shared = false;
    bool values_written = false;      // sync: the step wrote its new values into mapped_params already
    std::uint64_t pending_position = 0;  // the waiting gradient's: its position once the step is applied
    wire::worker_counters counters;   // its gradients, for stats
    std::vector<wire::worker_counters> stats_out;  // a stats reply's payload until payload_send is done
    std::vector<std::uint64_t> sparse_keys;        // the keys of its sparse request (copied out of the slot)
    std::vector<float> rows_out;                   // a rows reply's payload until payload_send is done
    // Sync: its row updates since its last dense gradient, held until the
    // step that gradient joins is applied (dropped with it when stale).
    // held[0, held_count) are in use; the vectors keep their capacity.
    struct held_rows {
        std::uint32_t table = 0;
        std::vector<std::uint64_t> keys;
        std::vector<float> grads;
    };
    std::vector<held_rows> held;
    std::size_t held_count = 0;

    // A whole message is here: its frame, and its payload if it has one.
    bool ready() { return posted && recv.done() && (!recv.ok() || in.payload_bytes == 0 || payload_recv.done()); }
};

class server::impl {
public:
    impl(transport& net, server_config c, server_hooks h)
        : activity_(names_of(net)), net_(net), cfg_(std::move(c)), hooks_(std::move(h)), workers_(net.num_peers()),
          replicas_(cfg_.replicas_to_aggregate > 0 ? cfg_.replicas_to_aggregate : static_cast<int>(net.num_peers()))
    {
        if (workers_.empty()) throw error("a parameter server needs at least one worker");
        if (cfg_.num_ps < 1 || cfg_.index < 0 || cfg_.index >= cfg_.num_ps)
            throw error(fmt::format("PS index {} is outside 0..{}", cfg_.index, cfg_.num_ps - 1));
        if (cfg_.sync && replicas_ > static_cast<int>(workers_.size()))
            throw error(fmt::format("sync training cannot aggregate {} gradients per step from {} workers", replicas_,
                                    workers_.size()));
        for (const auto& t : cfg_.tables) {
            tables_.emplace_back(t);
            max_dim_ = std::max<std::uint64_t>(max_dim_, t.dim);
        }
    }

    server_outcome run()
    {
        try {
            auto outcome = serve();
            release();
            return outcome;
        } catch (...) {
            release();
            throw;
        }
    }

    std::uint64_t step_ = 0, stale_ = 0;
    activity_recorder activity_;
    enum phase : std::size_t { starting, waiting, requests, updating, replying, draining, sparse };
    using profile_clock = phase_clock<7>;
    profile_clock profile_{{{{"start", "starting: the chief's hello, initialisation or restore"},
                             {"wait", "waiting for requests"},
                             {"requests", "checking and dispatching requests (snapshots and stats included)"},
                             {"update", "the optimizer's update (sync: with the sum of the step's gradients and the new "
                                        "values written into the mapped buffers of the workers on this host)"},
                             {"reply", "posting replies (async: writing values into mapped buffers)"},
                             {"drain", "waiting for earlier replies to leave before the values change"},
                             {"sparse", "the embedding tables' lookups and row updates (sparse pulls and pushes)"}}}};
    // Keys of sparse pulls (lookups included) and pushes served.
    std::atomic<std::uint64_t> keys_pulled_{0}, keys_pushed_{0};

private:
    using values_status = wire::values_status;

    // ------------------------------------------------------------ startup

    // The chief's hello says the model's size, hence this PS's range; its
    // next message initialises or restores the shard.  Nobody else is
    // served before that.
    void start()
    {
        auto& chief = workers_[0];
        const auto who = net_.peer_name(0);
        chief.recv = net_.recv(0, channel::control, &chief.in, sizeof chief.in);
        chief.posted = true;
        wait_for_chief(chief.recv, "said hello");
        chief.posted = false;
        if (auto bad = wire::check_envelope(chief.in))
            throw peer_error(who, fmt::format("{} sent a malformed first message: {}", who, wire::describe(*bad)));
        if (chief.in.kind != static_cast<std::uint16_t>(wire::kind::hello))
            throw peer_error(who, fmt::format("{} began with a {} message instead of hello: run the same pstrain in every task",
                                              who, wire::kind_name(chief.in.kind)));
        const auto h = wire::body<wire::hello>(chief.in);
        received(chief.in);
        num_params_ = h.num_params;
        range_ = make_partition(num_params_, cfg_.num_ps)[static_cast<std::size_t>(cfg_.index)];
        if (wire::float_bytes(range_.size()) == 0 && range_.size() > 0)
            throw peer_error(who, fmt::format("{} announced {} parameters: more than this machine can address", who, num_params_));
        check_shard_fits(who);
        try {
            shard_.emplace(range_, cfg_.optimizer);
            sum_.resize(range_.size());
            if (cfg_.update_threads > 1 && range_.size() >= threaded_update_elements) {
                pool_.emplace(cfg_.update_threads);
                log::info("{} threads share the updates of this PS's {} parameters", cfg_.update_threads, range_.size());
            }
            // A whole-shard gradient lands where the worker sends it from
            // (aligned_buffer.hpp); the slot also takes a memory key and
            // the largest sparse request.
            const std::size_t sparse_floats =
                tables_.empty() ? 0 : static_cast<std::size_t>(wire::max_sparse_keys * (2 + max_dim_));
            for (auto& p : workers_)
                p.slot = float_buffer(std::max({static_cast<std::size_t>(range_.size()), wire::max_key_bytes / sizeof(float),
                                                sparse_floats}),
                                      page_offset_of(range_.begin));
        } catch (const std::bad_alloc&) {
            throw peer_error(who, fmt::format("{} announced {} parameters: this PS cannot allocate its shard of {} ({:.1f} GB "
                                              "for each copy): use more PS tasks, or check that every task builds the same model",
                                              who, num_params_, range_.size(), range_.size() * 4 / 1e9));
        } catch (const std::length_error&) {
            throw peer_error(who, fmt::format("{} announced {} parameters: more than this machine can address", who, num_params_));
        }
        // The hello's key, then the rest goes through the usual receives.
        if (chief.in.payload_bytes > 0) {
            if (h.num_moving > wire::max_moving_ranges)
                throw peer_error(who, fmt::format("{} announced {} moving-average ranges (at most {})", who, h.num_moving,
                                                  wire::max_moving_ranges));
            const std::uint64_t moving_bytes = std::uint64_t(h.num_moving) * wire::moving_range_bytes;
            if (chief.in.payload_bytes < moving_bytes || chief.in.payload_bytes - moving_bytes > wire::max_key_bytes)
                throw peer_error(who, fmt::format("{} sent a hello of {} payload bytes for {} moving-average ranges and a memory "
                                                  "key of at most {} bytes", who, chief.in.payload_bytes, h.num_moving,
                                                  wire::max_key_bytes));
            // Received aside (the ranges may not fit the slot), the key then goes where map_buffers reads it.
            auto& payload = hello_payload_;  // a member: the receive may outlive this scope when the chief is lost
            payload.resize(chief.in.payload_bytes);
            chief.payload_recv = net_.recv(0, channel::payload, payload.data(), chief.in.payload_bytes);
            wait_for_chief(chief.payload_recv, "sent its memory key");
            std::memcpy(chief.slot.data(), payload.data(), chief.in.payload_bytes - moving_bytes);
            // The moving averages (a batch normalization's statistics) get no optimizer.
            std::vector<shard_range> moving(h.num_moving);
            const auto* bytes = payload.data() + (chief.in.payload_bytes - moving_bytes);
            for (std::size_t r = 0; r < moving.size(); ++r) {
                std::memcpy(&moving[r].begin, bytes + r * wire::moving_range_bytes, sizeof(std::uint64_t));
                std::memcpy(&moving[r].end, bytes + r * wire::moving_range_bytes + sizeof(std::uint64_t), sizeof(std::uint64_t));
                if (moving[r].end > num_params_)
                    throw peer_error(who, fmt::format("{} announced a moving-average range [{}, {}) past the model's {} parameters",
                                                      who, moving[r].begin, moving[r].end, num_params_));
            }
            try {
                shard_->set_moving_averages(moving);
            } catch (const error& e) {
                throw peer_error(who, fmt::format("{}: {}", who, e.what()));
            }
            if (!moving.empty()) log::info("{} moving-average range(s) of the model get no optimizer", moving.size());
        }
        greet(0);
        send_reply(0);
        while (!(workers_[0].ready())) {
            activity_recorder::scope waiting(activity_, "the chief's init or restore (it loads its data first)");
            activity_.pending(0, true);
            net_.wait_until([&] { return workers_[0].ready() || net_.failed(0); }, clock::now() + far_future);
            if (net_.failed(0)) throw peer_error(who, fmt::format("lost {} before it initialised the model: {}", who, net_.failure(0)));
        }
        chief.posted = false;
        if (!chief.recv.ok() || (chief.in.payload_bytes > 0 && !chief.payload_recv.ok()))
            throw peer_error(who, fmt::format("lost {} before it initialised the model: {}", who, chief.recv.failure()));
        if (chief.in.payload_bytes > 0) chief.payload_posted = false;
        received(chief.in);
        const bool restoring = chief.in.kind == static_cast<std::uint16_t>(wire::kind::restore);
        if (wire::check_envelope(chief.in) || (!restoring && chief.in.kind != static_cast<std::uint16_t>(wire::kind::init)))
            throw peer_error(who, fmt::format("{} did not initialise or restore the model after hello: run the same pstrain in "
                                              "every task", who));
        if (restoring) {
            const auto r = wire::body<wire::restore>(chief.in);
            if (!hooks_.restore) throw peer_error(who, fmt::format("{} asked to restore a snapshot, and this server has no restore hook", who));
            auto state = hooks_.restore(r.step, range_, num_params_);
            shard_->restore(state.values, state.state, state.updates);
            if (!tables_.empty()) {
                if (!hooks_.restore_tables)
                    throw peer_error(who, fmt::format("{} asked to restore a snapshot, and this server has embedding tables but no "
                                                      "restore_tables hook", who));
                hooks_.restore_tables(r.step, cfg_.index, cfg_.num_ps, tables_);
            }
            if (state.positions.size() == workers_.size())
                for (std::size_t i = 0; i < workers_.size(); ++i) workers_[i].position = state.positions[i];
            step_ = r.step;
            restored_ = r.step + 1;
        } else {
            const auto m = wire::body<wire::init>(chief.in);
            if (m.range_begin != range_.begin || m.range_end != range_.end ||
                chief.in.payload_bytes != wire::float_bytes(range_.size()) ||
                chief.payload_recv.length() != chief.in.payload_bytes)
                throw peer_error(who, fmt::format("{} initialised [{}, {}) with {} bytes, this PS holds [{}, {}): run the same "
                                                  "pstrain in every task", who, m.range_begin, m.range_end,
                                                  chief.in.payload_bytes, range_.begin, range_.end));
            shard_->assign(std::span<const float>(chief.slot.data(), range_.size()));
        }
        log::info("shard [{}, {}) of {} parameters ({:.1f} KB), {} mode{}, {} global step {}", range_.begin, range_.end,
                  num_params_, range_.size() * 4 / 1000.0, cfg_.sync ? "sync" : "async",
                  cfg_.sync ? fmt::format(" aggregating {} of {} workers", replicas_, workers_.size()) : "",
                  restoring ? "restored from the checkpoint at" : "starting at", step_);
        done_ = hooks_.step_completed && hooks_.step_completed(step_);
        activity_.progressed();
        for (std::size_t i = 1; i < workers_.size(); ++i) post(i);
        reply_values(0, range_, false, values_status::ok);
    }

    // The chief's hello decides the shard's size: before anything of that
    // size is allocated, what start() allocates (the values, the optimizer
    // state, the sum of a sync step and one receive buffer per worker) must
    // fit in this machine's memory, or in max_shard_bytes.
    void check_shard_fits(const std::string& who) const
    {
        const std::uint64_t copies = 2 + static_cast<std::uint64_t>(state_slots(cfg_.optimizer.kind)) + workers_.size();
        const std::uint64_t per_copy = wire::float_bytes(range_.size());
        const std::uint64_t limit = cfg_.max_shard_bytes > 0 ? cfg_.max_shard_bytes : physical_memory();
        if (limit == 0 || per_copy <= limit / copies) return;
        throw peer_error(who, fmt::format("{} announced {} parameters: this PS's shard of {} needs {} ({} copies: values, "
                                          "optimizer state, sums, one receive buffer per worker), more than {}: use more PS "
                                          "tasks, or check that every task builds the same model",
                                          who, num_params_, range_.size(), size_text(static_cast<double>(per_copy) * copies),
                                          copies, cfg_.max_shard_bytes > 0 ? fmt::format("the {} max_shard_bytes allows", size_text(limit))
                                                                           : fmt::format("this machine's {} of memory", size_text(limit))));
    }

    static std::string size_text(double bytes)
    {
        if (bytes >= 1e9) return fmt::format("{:.1f} GB", bytes / 1e9);
        if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
        return fmt::format("{} bytes", static_cast<std::uint64_t>(bytes));
    }

    static std::uint64_t physical_memory()
    {
        const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
        return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
    }

    void wait_for_chief(request& r, const char* what)
    {
        const auto who = net_.peer_name(0);
        {
            activity_recorder::scope waiting(activity_, "the chief's hello (it loads its data first)");
            activity_.pending(0, true);
            net_.wait_until([&] { return r.done() || net_.failed(0); }, clock::now() + far_future);
        }
        if (!r.done() || !r.ok())
            throw peer_error(who, fmt::format("lost {} before it {}: {}", who, what,
                                              net_.failed(0) ? net_.failure(0) : r.failure()));
    }

    // ------------------------------------------------------------ serving

    server_outcome serve()
    {
        start();
        for (;;) {
            if (shutdown_ && (everyone_told() || clock::now() > shutdown_deadline_)) {
                if (!everyone_told())
                    log::warn("not every worker came back for its last reply within {}s of the chief's shutdown: exiting",
                              cfg_.shutdown_wait.count());
                drain_sends();
                return stopped_ ? server_outcome::stopped : server_outcome::done;
            }
            std::optional<std::size_t> ready;
            {
                describe_wait();
                activity_recorder::ender end_of_wait(activity_);
                profile_clock::scope timed(profile_, phase::waiting);
                net_.wait_until(
                    [&] {
                        for (std::size_t i = 0; i < workers_.size(); ++i) {
                            auto& p = workers_[i];
                            if (!p.lost && (net_.failed(i) || p.ready())) {
                                ready = i;
                                return true;
                            }
                        }
                        return false;
                    },
                    shutdown_ ? shutdown_deadline_ : clock::now() + far_future);
            }
            if (!ready) continue;
            profile_clock::scope timed(profile_, requests);
            const std::size_t i = *ready;
            auto& p = workers_[i];
            // A whole message that came before the peer went (the chief's
            // shutdown, then its exit) is handled first: the loss is seen
            // on the next round.
            if (!p.ready() || !p.recv.ok()) {
                on_worker_lost(i);
                continue;
            }
            p.posted = false;
            if (p.in.payload_bytes > 0) {
                p.payload_posted = false;
                if (!p.payload_recv.ok() || p.payload_recv.length() != p.in.payload_bytes) {
                    if (net_.failed(i)) {
                        on_worker_lost(i);
                        continue;
                    }
                    refuse(i, wire::refusal_code::bad_length, p.in.payload_bytes,
                           p.payload_recv.ok() ? p.payload_recv.length() : ~std::uint64_t(0));
                    continue;
                }
            }
            received(p.in);
            handle(i);
            activity_.progressed();
        }
    }

    // What serve() waits for: the workers and the request it needs next.
    void describe_wait()
    {
        if (shutdown_) {
            activity_.begin("the workers' last requests after the chief ended the job", 0, false, true);
            for (std::size_t i = 0; i < workers_.size(); ++i) activity_.pending(i, !workers_[i].lost && !workers_[i].told_done);
        } else if (cfg_.sync) {
            // The step waits for the gradients it has not got.
            activity_.begin(count_ > 0 ? "the missing gradients of a sync step" : "the gradients of a sync step", step_, true);
            for (std::size_t i = 0; i < workers_.size(); ++i) activity_.pending(i, !workers_[i].lost && !workers_[i].contributed);
        } else {
            activity_.begin("a request (async: from any worker)");
            for (std::size_t i = 0; i < workers_.size(); ++i) activity_.pending(i, !workers_[i].lost);
        }
    }

    void received(const wire::frame& f) { bytes_in_ += sizeof f + f.payload_bytes; }

    // Posts worker i's next frame receive, and a payload receive if none is posted.
    void post(std::size_t i)
    {
        auto& p = workers_[i];
        p.recv = net_.recv(i, channel::control, &p.in, sizeof p.in);
        p.posted = true;
        if (!p.payload_posted) {
            p.payload_recv = net_.recv(i, channel::payload, p.slot.data(), p.slot.size() * sizeof(float));
            p.payload_posted = true;
        }
    }

    void handle(std::size_t i)
    {
        auto& p = workers_[i];
        if (auto bad = wire::check_envelope(p.in)) {
            refuse(i, *bad);
            return;
        }
        const auto payload_is = [&](std::uint64_t bytes) {
            if (p.in.payload_bytes == bytes) return true;
            refuse(i, wire::refusal_code::bad_length, bytes, p.in.payload_bytes);
            return false;
        };
        if (!p.greeted && p.in.kind != static_cast<std::uint16_t>(wire::kind::hello)) {
            refuse(i, wire::refusal_code::no_hello, 0, 0);
            return;
        }
        switch (static_cast<wire::kind>(p.in.kind)) {
        case wire::kind::hello:
            greet(i);
            send_reply(i);
            return;
        case wire::kind::pull: {
            const auto m = wire::body<wire::pull>(p.in);
            if (!check_range(i, m.range_begin, m.range_end) || !payload_is(0) || !check_shared(i, m.in_shared_memory)) return;
            reply_values(i, {m.range_begin, m.range_end}, m.in_shared_memory != 0, values_status::ok);
            return;
        }
        case wire::kind::push: {
            const auto m = wire::body<wire::push>(p.in);
            if (!check_range(i, m.range_begin, m.range_end) || !check_shared(i, m.in_shared_memory) ||
                !payload_is(m.in_shared_memory ? 0 : wire::float_bytes(m.range_end - m.range_begin)))
                return;
            on_push(i, m);
            return;
        }
        case wire::kind::snapshot:
            if (!from_chief(i) || !payload_is(0)) return;
            on_snapshot(i, wire::body<wire::snapshot>(p.in));
            return;
        case wire::kind::stats:
            if (!payload_is(0)) return;
            reply_stats(i);
            return;
        case wire::kind::sparse_pull: {
            const auto m = wire::body<wire::sparse_pull>(p.in);
            if (!check_sparse(i, m.table, m.count) || !payload_is(m.count * 8)) return;
            on_sparse_pull(i, m);
            return;
        }
        case wire::kind::sparse_push: {
            const auto m = wire::body<wire::sparse_push>(p.in);
            if (!check_sparse(i, m.table, m.count) || !payload_is(m.count * (8 + 4 * tables_[m.table].config().dim))) return;
            on_sparse_push(i, m);
            return;
        }
        case wire::kind::shutdown:
            if (!from_chief(i) || !payload_is(0)) return;
            on_shutdown(wire::body<wire::shutdown>(p.in).stop != 0);
            return;
        case wire::kind::init:
        case wire::kind::restore:
            // A repeated initialisation (the chief restarted its connection): the values stand.
            if (!from_chief(i)) return;
            reply_values(i, range_, false, values_status::ok);
            return;
        default:
            refuse(i, wire::refusal_code::bad_kind, p.in.kind, 0);
            return;
        }
    }

    bool check_range(std::size_t i, std::uint64_t begin, std::uint64_t end)
    {
        if (wire::range_inside(begin, end, range_)) return true;
        refuse(i, wire::refusal_code::bad_range, begin, end);
        return false;
    }

    bool check_shared(std::size_t i, std::uint32_t in_shared_memory)
    {
        if (!in_shared_memory || workers_[i].mapped_params) return true;
        refuse(i, wire::refusal_code::not_mapped, 0, 0);
        return false;
    }

    bool check_sparse(std::size_t i, std::uint32_t table, std::uint64_t count)
    {
        if (table >= tables_.size()) {
            refuse(i, wire::refusal_code::bad_table, table, tables_.size());
            return false;
        }
        if (count > wire::max_sparse_keys) {
            refuse(i, wire::refusal_code::too_many_keys, count, wire::max_sparse_keys);
            return false;
        }
        return true;
    }

    bool from_chief(std::size_t i)
    {
        if (i == 0) return true;
        refuse(i, wire::refusal_code::not_chief, 0, 0);
        return false;
    }

    void refuse(std::size_t i, wire::refusal_code code, std::uint64_t a, std::uint64_t b)
    {
        wire::refusal r;
        r.code = static_cast<std::uint32_t>(code);
        r.detail_begin = a;
        r.detail_end = b;
        refuse(i, r);
    }

    // The message broke the protocol: say so in the log and to the peer,
    // and go on serving the others.
    void refuse(std::size_t i, const wire::refusal& r)
    {
        log::error("refused a {} message from {}: {}", wire::kind_name(workers_[i].in.kind), net_.peer_name(i), wire::describe(r));
        begin_reply(i);
        workers_[i].out = wire::encode(r);
        send_reply(i);
    }

    // hello: the worker's model must be the chief's; map its buffers when
    // it offers them and the transport can.  The welcome is left in `out`.
    void greet(std::size_t i)
    {
        auto& p = workers_[i];
        const auto h = wire::body<wire::hello>(p.in);
        begin_reply(i);
        wire::refusal r;
        if (h.num_params != num_params_) {
            r.code = static_cast<std::uint32_t>(wire::refusal_code::model_mismatch);
            r.detail_begin = h.num_params;
            r.detail_end = num_params_;
        } else if (h.num_tables != tables_.size()) {
            r.code = static_cast<std::uint32_t>(wire::refusal_code::tables_mismatch);
            r.detail_begin = h.num_tables;
            r.detail_end = tables_.size();
        } else if (h.worker_index != i || h.num_workers != workers_.size()) {
            // Another task's place, or another job's size: its gradients would count as someone else's.
            r.code = static_cast<std::uint32_t>(wire::refusal_code::wrong_peer);
            r.detail_begin = h.worker_index;
            r.detail_end = h.num_workers;
            r.peer_index = static_cast<std::uint32_t>(i);
        }
        if (r.code != 0) {
            log::error("refused the hello of {}: {}", net_.peer_name(i), wire::describe(r));
            p.out = wire::encode(r);
            return;
        }
        std::string why;
        const bool mapped = map_buffers(i, h, why);
        if (!why.empty()) {
            r.code = static_cast<std::uint32_t>(wire::refusal_code::bad_buffers);
            r.detail_begin = h.params_address;
            r.detail_end = h.grads_address;
            log::error("refused the hello of {}: its exchange buffers at {:#x} and {:#x} are not inside the memory its key "
                       "maps ({}): is another program talking to this PS?", net_.peer_name(i), h.params_address,
                       h.grads_address, why);
            p.out = wire::encode(r);
            return;
        }
        p.greeted = true;
        wire::welcome w;
        w.range_begin = range_.begin;
        w.range_end = range_.end;
        w.num_params = num_params_;
        w.mapped = mapped ? 1 : 0;
        p.out = wire::encode(w);
    }

    // True when the worker's buffers are mapped here (same host, a
    // transport that can, share_memory on).  The whole of what this PS will
    // read and write, its range of both buffers, must lie in the memory the
    // worker's key maps (UCX's ucp_rkey_ptr checks no bounds: it adds an
    // offset to any address): when it does not, `why` says so and the hello
    // is refused.
    bool map_buffers(std::size_t i, const wire::hello& h, std::string& why)
    {
        auto& p = workers_[i];
        // The key comes before the moving-average ranges (the chief's hello).
        const std::uint64_t moving_bytes = std::uint64_t(h.num_moving) * wire::moving_range_bytes;
        const auto key_bytes = p.in.payload_bytes >= moving_bytes ? p.in.payload_bytes - moving_bytes : 0;
        if (!cfg_.share_memory || key_bytes == 0 || key_bytes > wire::max_key_bytes || h.params_address == 0 ||
            h.grads_address == 0 || range_.size() == 0)
            return false;
        std::unique_ptr<peer_memory> mapping;
        try {
            mapping = net_.map(i, std::span(reinterpret_cast<const std::uint8_t*>(p.slot.data()), key_bytes));
        } catch (const error& e) {
            log::debug("cannot map the buffers of {} ({}): messages it is", net_.peer_name(i), e.what());
            return false;
        }
        if (!mapping) return false;
        const auto params = wire::bytes_of(h.params_address, range_), grads = wire::bytes_of(h.grads_address, range_);
        if (!params || !grads) {
            why = fmt::format("elements [{}, {}) of them would lie past the end of a 64-bit address space", range_.begin,
                              range_.end);
            return false;
        }
        try {
            auto* params_here = static_cast<float*>(mapping->local_pointer(params->begin, params->bytes));
            auto* grads_here = static_cast<const float*>(mapping->local_pointer(grads->begin, grads->bytes));
            if (!params_here || !grads_here) return false;
            p.mapping = std::move(mapping);
            p.mapped_params = params_here;
            p.mapped_grads = grads_here;
            return true;
        } catch (const error& e) {
            why = e.what();
            return false;
        }
    }

    // ------------------------------------------------------------ replies

    // Waits until worker i's previous reply frame has left (the transport
    // may still read it), then clears it.
    void begin_reply(std::size_t i)
    {
        auto& p = workers_[i];
        if (!p.send.done()) {
            profile_clock::scope timed(profile_, draining);
            activity_recorder::scope waiting(activity_, "the send of its previous reply");
            activity_.pending(i, true);
            net_.wait_until([&] { return p.send.done() || net_.failed(i); }, clock::now() + far_future);
        }
        p.out = wire::frame{};
    }

    // Sends the frame in `out` and posts worker i's next receive.
    void send_reply(std::size_t i)
    {
        auto& p = workers_[i];
        bytes_out_ += sizeof p.out + p.out.payload_bytes;
        p.send = net_.send(i, channel::control, &p.out, sizeof p.out);
        if (!p.lost && !p.posted) post(i);
    }

    // The values of `part` to worker i: written into its mapped buffer
    // (`shared`), or sent.  A send may read them until it completes, so
    // they must not change meanwhile: sync waits for every reply of a step
    // before the next update; async writes each update into a spare buffer
    // no reply is reading (free_spare).
    void reply_values(std::size_t i, shard_range part, bool shared, values_status status)
    {
        profile_clock::scope timed(profile_, replying);
        auto& p = workers_[i];
        wait_for_payload_send(i);
        begin_reply(i);
        const auto sent = done_ ? (stopped_ ? values_status::stopped : values_status::done) : status;
        if (sent == values_status::done || sent == values_status::stopped) p.told_done = true;
        wire::values v;
        v.step = step_;
        v.range_begin = part.begin;
        v.range_end = part.end;
        v.restored = restored_;
        v.status = static_cast<std::uint32_t>(sent);
        v.in_shared_memory = shared ? 1 : 0;
        const auto values = shard_->values().subspan(part.begin - range_.begin, part.size());
        if (shared) {
            // The worker waits for this reply: its buffer is ours until the frame leaves.
            if (!std::exchange(p.values_written, false))
                std::copy(values.begin(), values.end(), p.mapped_params + (part.begin - range_.begin));
            bytes_out_ += values.size_bytes();
            p.sending = nullptr;
            p.out = wire::encode(v);
        } else {
            p.sending = shard_->values().data();
            p.out = wire::encode(v, values.size_bytes());
            p.payload_send = net_.send(i, channel::payload, values.data(), values.size_bytes());
        }
        send_reply(i);
    }

    // This PS's step and bytes, and every worker's gradients.
    void reply_stats(std::size_t i)
    {
        auto& p = workers_[i];
        wait_for_payload_send(i);
        begin_reply(i);
        p.stats_out.clear();
        for (const auto& w : workers_) p.stats_out.push_back(w.counters);
        wire::stats_reply r;
        r.step = step_;
        r.bytes_received = bytes_in_;
        r.bytes_sent = bytes_out_;
        r.num_workers = static_cast<std::uint32_t>(workers_.size());
        const auto bytes = p.stats_out.size() * sizeof(wire::worker_counters);
        p.sending = nullptr;
        p.out = wire::encode(r, bytes);
        p.payload_send = net_.send(i, channel::payload, p.stats_out.data(), bytes);
        send_reply(i);
    }

    // A values buffer that no reply in flight reads: the old values stay
    // where the replies being sent read them, without a copy.  At most one
    // more buffer than workers.
    float_buffer& free_spare()
    {
        for (auto& b : spares_)
            if (b.empty() || !read_by_a_reply(b.data())) return b;
        return spares_.emplace_back();
    }

    bool read_by_a_reply(const float* values)
    {
        for (std::size_t k = 0; k < workers_.size(); ++k)
            if (workers_[k].sending == values && !workers_[k].payload_send.done() && !net_.failed(k)) return true;
        return false;
    }

    // Worker i's previous reply payload has left (the transport may read it until then).
    void wait_for_payload_send(std::size_t i)
    {
        auto& p = workers_[i];
        if (p.payload_send.done()) return;
        profile_clock::scope timed(profile_, draining);
        activity_recorder::scope waiting(activity_, "the send of its previous reply's payload");
        activity_.pending(i, true);
        net_.wait_until([&] { return p.payload_send.done() || net_.failed(i); }, clock::now() + far_future);
    }

    // Before the values change: every reply in flight has left.
    void drain_sends()
    {
        profile_clock::scope timed(profile_, draining);
        activity_recorder::scope waiting(activity_, "the sends of the replies in flight, before the values change");
        for (std::size_t i = 0; i < workers_.size(); ++i)
            activity_.pending(i, (!workers_[i].send.done() || !workers_[i].payload_send.done()) && !net_.failed(i));
        net_.wait_until(
            [&] {
                for (std::size_t i = 0; i < workers_.size(); ++i)
                    if ((!workers_[i].send.done() || !workers_[i].payload_send.done()) && !net_.failed(i)) return false;
                return true;
            },
            clock::now() + far_future);
    }

    // Worker i's gradient of `part`: in its mapped buffer or in its payload slot.
    std::span<const float> gradient(std::size_t i, shard_range part, bool shared) const
    {
        const auto& p = workers_[i];
        return {shared ? p.mapped_grads + (part.begin - range_.begin) : p.slot.data(), part.size()};
    }

    // ----------------------------------------------------------- training

    void on_push(std::size_t i, const wire::push& m)
    {
        auto& p = workers_[i];
        const shard_range part{m.range_begin, m.range_end};
        const bool shared = m.in_shared_memory != 0;
        if (shared) bytes_in_ += wire::float_bytes(part.size());
        if (done_) {
            reply_values(i, part, shared, values_status::done);
            return;
        }
        if (!cfg_.sync) {
            const std::uint64_t staleness = step_ > m.step ? step_ - m.step : 0;
            ++p.counters.gradients;
            p.counters.staleness_sum += staleness;
            p.counters.staleness_max = std::max(p.counters.staleness_max, staleness);
            p.position = m.position;
            // In place unless a reply in flight still reads the values.
            {
                profile_clock::scope timed(profile_, updating);
                if (read_by_a_reply(shard_->values().data()))
                    shard_->apply_into(free_spare(), gradient(i, part, shared), part);
                else if (pool_ && part.size() >= threaded_update_elements)
                    apply_in_blocks(gradient(i, part, shared), part.begin - range_.begin);
                else
                    shard_->apply(gradient(i, part, shared), part);
            }
            advance();
            reply_values(i, part, shared, values_status::ok);
            return;
        }
        if (part != range_) {
            refuse(i, wire::refusal_code::needs_whole_shard, part.begin, part.end);
            return;
        }
        if (m.step != step_) {  // computed on older values: dropped, with its batch's row updates
            ++stale_;
            ++p.counters.stale;
            p.position = m.position;
            p.held_count = 0;
            reply_values(i, part, shared, values_status::stale);
            return;
        }
        // Its position counts once the step is applied: a snapshot of the
        // current step (the chief's request may come in between) must not
        // skip a batch whose gradient is not in it.
        p.contributed = true;
        p.contributed_shared = shared;
        p.pending_position = m.position;
        ++p.counters.gradients;
        if (++count_ < replicas_) return;
        drain_sends();
        apply_held_rows();
        apply_step();
        advance();
        answer_contributors();
    }

    // ------------------------------------------------------------ sparse

    // The keys of worker i's sparse request, out of its receive slot.
    std::span<const std::uint64_t> sparse_keys(std::size_t i, std::uint64_t count)
    {
        auto& p = workers_[i];
        p.sparse_keys.resize(count);
        if (count > 0) std::memcpy(p.sparse_keys.data(), p.slot.data(), count * 8);
        return p.sparse_keys;
    }

    void on_sparse_pull(std::size_t i, const wire::sparse_pull& m)
    {
        profile_clock::scope timed(profile_, sparse);
        auto& p = workers_[i];
        wait_for_payload_send(i);  // rows_out may still be read by the previous reply
        const auto keys = sparse_keys(i, m.count);
        auto& table = tables_[m.table];
        p.rows_out.resize(m.count * table.config().dim);
        // After training, and for evaluation, reads make no rows.
        if (done_ || (m.flags & wire::sparse_lookup)) {
            table.lookup(keys, p.rows_out);
        } else {
            const auto refused = table.refused_rows();
            table.pull(keys, p.rows_out, step_);
            if (refused == 0 && table.refused_rows() > 0) warn_table_full(m.table);
        }
        keys_pulled_.fetch_add(m.count, std::memory_order_relaxed);
        reply_rows(i, m.table, m.count);
    }

    // Once per table: memory is capped, new keys read as zeros from now on.
    void warn_table_full(std::uint32_t t)
    {
        const auto rows = tables_[t].config().max_rows;
        if (hooks_.table_full) return hooks_.table_full(t, rows);
        log::warn("embedding table {} is full on this PS ({} rows, its max_rows): new keys read as zeros and are not learned",
                  t, rows);
    }

    // Async: a row update applies on arrival.  Sync: it waits for the step
    // its worker's next dense gradient joins, and applies with it (in worker
    // order, before the dense update), so that the rows of a step's
    // snapshot hold exactly the updates of the batches its data positions
    // count, and a worker's pulls for a step read the rows of the step
    // before, like its dense values.  A PS without dense values has no
    // steps: there they apply on arrival.
    void on_sparse_push(std::size_t i, const wire::sparse_push& m)
    {
        profile_clock::scope timed(profile_, sparse);
        auto& p = workers_[i];
        wait_for_payload_send(i);
        const auto keys = sparse_keys(i, m.count);
        auto& table = tables_[m.table];
        const auto* grads = reinterpret_cast<const float*>(reinterpret_cast<const std::byte*>(p.slot.data()) + m.count * 8);
        const std::span<const float> row_grads{grads, m.count * table.config().dim};
        if (!done_ && cfg_.sync && range_.size() > 0) {
            std::uint64_t held = m.count;
            for (std::size_t h = 0; h < p.held_count; ++h) held += p.held[h].keys.size();
            if (held > max_held_keys) {
                refuse(i, wire::refusal_code::rows_without_step, held, max_held_keys);
                return;
            }
            if (p.held_count == p.held.size()) p.held.emplace_back();
            auto& h = p.held[p.held_count++];
            h.table = m.table;
            h.keys.assign(keys.begin(), keys.end());
            h.grads.assign(row_grads.begin(), row_grads.end());
        } else if (!done_) {
            table.push(keys, row_grads, step_);
        }
        keys_pushed_.fetch_add(m.count, std::memory_order_relaxed);
        p.rows_out.clear();
        reply_rows(i, m.table, 0);
    }

    // Sync: the held row updates of the step's contributors, in worker order
    // (nothing, not even a clock read, for a model without tables).
    void apply_held_rows()
    {
        if (tables_.empty()) return;
        profile_clock::scope timed(profile_, sparse);
        for (auto& w : workers_) {
            if (!w.contributed) continue;
            for (std::size_t h = 0; h < w.held_count; ++h) tables_[w.held[h].table].push(w.held[h].keys, w.held[h].grads, step_);
            w.held_count = 0;
        }
    }

    void reply_rows(std::size_t i, std::uint32_t table, std::uint64_t count)
    {
        auto& p = workers_[i];
        begin_reply(i);
        wire::rows r;
        r.step = step_;
        r.table = table;
        r.count = count;
        const auto sent = done_ ? (stopped_ ? values_status::stopped : values_status::done) : values_status::ok;
        if (sent != values_status::ok) p.told_done = true;
        r.status = static_cast<std::uint32_t>(sent);
        const auto bytes = p.rows_out.size() * sizeof(float);
        p.sending = nullptr;
        p.out = wire::encode(r, bytes);
        if (bytes > 0) {
            bytes_out_ += bytes;
            p.payload_send = net_.send(i, channel::payload, p.rows_out.data(), bytes);
        }
        send_reply(i);
    }

    // Sync: the mean of the step's gradients applied block by block, each
    // block's sum (in worker order, so a run is the same whatever the
    // arrival order), update and copies into the mapped buffers of the
    // contributors on this host done while the block is in cache; a large
    // shard's blocks spread over the update threads.
    void apply_step()
    {
        profile_clock::scope timed(profile_, updating);
        step_grads_.clear();
        step_copies_.clear();
        for (std::size_t k = 0; k < workers_.size(); ++k) {
            auto& w = workers_[k];
            if (!w.contributed) continue;
            w.position = w.pending_position;
            step_grads_.push_back(gradient(k, range_, w.contributed_shared).data());
            if (w.contributed_shared) {
                step_copies_.push_back(w.mapped_params);
                w.values_written = true;
            }
        }
        const float scale = 1.0f / static_cast<float>(replicas_);
        const std::uint64_t update = shard_->begin_update();
        const std::size_t n = range_.size();
        const float* values = shard_->values().data();
        const auto one_block = [&](std::size_t b) {
            const std::size_t at = b * update_block, len = std::min(update_block, n - at);
            float* sum = sum_.data() + at;
            std::fill(sum, sum + len, 0.0f);
            for (const float* g : step_grads_)
                for (std::size_t e = 0; e < len; ++e) sum[e] += g[at + e];
            for (std::size_t e = 0; e < len; ++e) sum[e] *= scale;
            shard_->apply_block({sum, len}, at, update);
            for (float* copy : step_copies_) std::copy(values + at, values + at + len, copy + at);
        };
        const std::size_t blocks = (n + update_block - 1) / update_block;
        if (pool_ && n >= threaded_update_elements)
            pool_->run(blocks, one_block);
        else
            for (std::size_t b = 0; b < blocks; ++b) one_block(b);
    }

    // Async: one gradient onto elements [at, at + grads.size()) of the shard, in place, on the update threads.
    void apply_in_blocks(std::span<const float> grads, std::size_t at)
    {
        const std::uint64_t update = shard_->begin_update();
        const std::size_t blocks = (grads.size() + update_block - 1) / update_block;
        pool_->run(blocks, [&](std::size_t b) {
            const std::size_t from = b * update_block;
            shard_->apply_block(grads.subspan(from, std::min(update_block, grads.size() - from)), at + from, update);
        });
    }

    // Sync: every gradient of the step gets the new values.
    void answer_contributors()
    {
        for (std::size_t k = 0; k < workers_.size(); ++k) {
            if (!workers_[k].contributed) continue;
            workers_[k].contributed = false;
            reply_values(k, range_, workers_[k].contributed_shared, values_status::ok);
        }
        count_ = 0;
    }

    void advance()
    {
        ++step_;
        profile_.step_done();
        for (auto& t : tables_) {
            const auto after = t.config().evict_after;
            if (after > 0 && step_ % std::max<std::uint64_t>(after / 10, 1) == 0) t.evict(step_);
        }
        activity_.progressed();
        if (!done_ && hooks_.step_completed && hooks_.step_completed(step_)) {
            done_ = true;
            log::info("global step {} reached: training done{}", step_,
                      cfg_.sync ? fmt::format(" ({} stale gradients dropped)", stale_) : "");
        }
    }

    // The shard at the chief's step, through the snapshot hook.  In sync
    // mode every shard must hold the same step: a PS that has moved on
    // (backup workers finished a step without the chief) says so, and the
    // chief asks again at the newer step.  In async mode the shard is taken
    // as it is now, a few updates apart from the other shards.
    void on_snapshot(std::size_t i, const wire::snapshot& m)
    {
        wire::snapshot_done d;
        if (cfg_.sync && m.step != step_) {
            d.status = static_cast<std::uint32_t>(wire::snapshot_status::moved_on);
            d.step = step_;
        } else if (!hooks_.snapshot) {
            log::error("the chief asked for a snapshot and this server has no snapshot hook");
            d.status = static_cast<std::uint32_t>(wire::snapshot_status::failed);
        } else {
            std::vector<std::uint64_t> positions;
            for (const auto& w : workers_) positions.push_back(w.position);
            shard_snapshot s;
            s.step = m.step;
            s.index = cfg_.index;
            s.num_ps = cfg_.num_ps;
            s.range = range_;
            s.num_params = num_params_;
            s.optimizer = shard_->optimizer().kind;
            s.values = shard_->values();
            s.state = shard_->state();
            s.updates = shard_->updates();
            s.positions = positions;
            s.tables = tables_;
            try {
                const auto receipt = hooks_.snapshot(s);
                d.status = static_cast<std::uint32_t>(wire::snapshot_status::taken);
                d.step = m.step;
                d.bytes = receipt.bytes;
                d.checksum = receipt.checksum;
            } catch (const error&) {
                d.status = static_cast<std::uint32_t>(wire::snapshot_status::failed);  // the hook said why
            }
        }
        begin_reply(i);
        workers_[i].out = wire::encode(d);
        send_reply(i);
    }

    // The chief ends training (or stops it for preemption): every worker
    // still training is told so on its next reply, then this PS exits.
    void on_shutdown(bool stop)
    {
        shutdown_ = true;
        shutdown_deadline_ = clock::now() + cfg_.shutdown_wait;
        workers_[0].told_done = true;
        if (stop && !done_) {
            stopped_ = true;
            log::info("the chief stopped the job at global step {} (SIGTERM): it resumes from the checkpoint", step_);
        } else {
            log::info("the chief ended the job at global step {}", step_);
        }
        // From now on every reply says done (or stopped): that is how the
        // other workers learn that training ended, and leave.
        done_ = true;
        // Sync: gradients waiting for a step that will not come are answered.
        answer_contributors();
    }

    bool everyone_told() const
    {
        return std::all_of(workers_.begin(), workers_.end(), [](const auto& w) { return w.lost || w.told_done; });
    }

    // ------------------------------------------------------------ failures

    void on_worker_lost(std::size_t i)
    {
        auto& p = workers_[i];
        p.lost = true;
        const auto why = net_.failed(i) ? net_.failure(i) : p.recv.failure();
        const auto who = net_.peer_name(i);
        if (done_) {
            if (i != 0 || shutdown_) return;  // workers leave once training is done
            throw peer_error(who, fmt::format("lost {} before it ended the job ({})", who, why));
        }
        int live = 0;
        for (auto& q : workers_) live += !q.lost;
        std::string fatal;
        if (i == 0)
            fatal = fmt::format("lost {} ({}): the chief initialises, evaluates and ends the job, training cannot go on", who, why);
        else if (cfg_.sync && live < replicas_)
            fatal = fmt::format("lost {} ({}): sync training aggregates {} gradients per step and only {} workers are left; "
                                "use --replicas-to-aggregate {} to run with backup workers",
                                who, why, replicas_, live, std::max<std::size_t>(1, workers_.size() - 1));
        else if (live == 0)
            fatal = fmt::format("lost {} ({}): no worker is left", who, why);
        if (fatal.empty()) {
            // In sync mode a gradient it gave to this step still counts.
            log::warn("lost {} ({}): going on with {} workers", who, why, live);
            return;
        }
        abort_all(i);
        throw peer_error(who, fatal);
    }

    // Tells every live worker why training ends, then gives the sends a moment.
    void abort_all(std::size_t lost)
    {
        std::vector<wire::frame> frames(workers_.size());
        std::vector<request> sends;
        for (std::size_t k = 0; k < workers_.size(); ++k) {
            if (workers_[k].lost || net_.failed(k)) continue;
            wire::abort a;
            a.lost_is_ps = 0;
            a.lost_index = static_cast<std::uint32_t>(lost);
            frames[k] = wire::encode(a);
            sends.push_back(net_.send(k, channel::control, &frames[k], sizeof frames[k]));
        }
        net_.wait_until([&] { return std::all_of(sends.begin(), sends.end(), [](auto& r) { return r.done(); }); },
                        clock::now() + std::chrono::seconds(2));
    }

    // Posted receives go back to the transport before it goes away.
    void release()
    {
        for (auto& p : workers_) {
            if (p.posted) p.recv.cancel();
            if (p.payload_posted) p.payload_recv.cancel();
        }
        net_.wait_until(
            [&] {
                return std::all_of(workers_.begin(), workers_.end(), [](auto& p) {
                    return (!p.posted || p.recv.done()) && (!p.payload_posted || p.payload_recv.done());
                });
            },
            clock::now() + std::chrono::seconds(1));
    }

    transport& net_;
    const server_config cfg_;
    const server_hooks hooks_;
    std::vector<peer_state> workers_;
    const int replicas_;
    std::uint64_t num_params_ = 0;
    shard_range range_;
    std::optional<parameter_shard> shard_;
    std::vector<std::uint8_t> hello_payload_;  // the chief's hello: its memory key, then the moving-average ranges
    bool done_ = false, stopped_ = false, shutdown_ = false;
    clock::time_point shutdown_deadline_;
    std::uint64_t restored_ = 0;  // 1 + the restored snapshot's step
    int count_ = 0;
    std::uint64_t bytes_in_ = 0, bytes_out_ = 0;  // for stats
    std::vector<float> sum_;
    // Sync: the step's gradients and the mapped buffers its values go to.
    std::vector<const float*> step_grads_;
    std::vector<float*> step_copies_;
    // Elements a block of an update takes (16 KB: it stays in the L1 cache
    // between its sum, its update and its copies).
    static constexpr std::size_t update_block = 4096;
    // Sync: the row updates one worker may have held for its next step (16
    // full messages; a batch's unique keys of every table fit many times),
    // so that a worker that never pushes its dense gradient cannot grow a
    // PS's memory without bound.
    static constexpr std::uint64_t max_held_keys = 16 * wire::max_sparse_keys;
    // A shard this large spreads its updates over cfg_.update_threads.
    static constexpr std::size_t threaded_update_elements = std::size_t(1) << 18;
    std::optional<update_pool> pool_;
    std::vector<embedding_table> tables_;   // sparse: this PS's rows of each table
    std::uint64_t max_dim_ = 0;
    std::vector<float_buffer> spares_;  // async: buffers for the next values
};

server::server(transport& net, server_config config, server_hooks hooks)
    : impl_(std::make_unique<impl>(net, std::move(config), std::move(hooks)))
{
}

server::~server() = default;

server_outcome server::run() { return impl_->run(); }
std::uint64_t server::global_step() const { return impl_->step_; }
std::uint64_t server::stale_gradients() const { return impl_->stale_; }
ps::activity server::activity() const { return impl_->activity_.snapshot(); }
time_profile server::profile() const { return impl_->profile_.snapshot(); }
sparse_traffic server::sparse() const
{
    return {impl_->keys_pulled_.load(std::memory_order_relaxed), impl_->keys_pushed_.load(std::memory_order_relaxed)};
}

}  // namespace pstrain::ps
