#include "pstrain/client.hpp"
#include "pstrain/embedding.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "library/ps/activity_recorder.hpp"
#include "library/ps/exchange.hpp"
#include "library/ps/tensor_layout.hpp"
#include "library/ps/protocol.hpp"
#include "library/ps/row_requests.hpp"
#include "library/ps/spare_pool.hpp"
#include "library/ps/ticket_book.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pstrain::ps {

namespace {

bool asks_whole_model(wire::kind kind)
{
    return kind == wire::kind::init || kind == wire::kind::restore || kind == wire::kind::snapshot ||
           kind == wire::kind::stats || kind == wire::kind::rollback;
}

wire::kind reply_kind(wire::kind kind)
{
    return kind == wire::kind::snapshot ? wire::kind::snapshot_done
           : kind == wire::kind::stats  ? wire::kind::stats_reply
                                        : wire::kind::values;
}

client_config chiefs_config(client_config c)
{
    if (c.index != 0)
        throw error(fmt::format("worker {} made a chief_client: only worker 0, the chief, starts, saves and ends "
                                "the job (make a client)",
                                c.index));
    return c;
}

}  // namespace

// The client's state and its verbs.  The request/reply exchange
// (exchange.hpp) moves and checks the messages, the ticket book
// (ticket_book.hpp) keeps the calls in flight; what is asked, and what a
// reply means to the client, is decided here.
namespace {

// The tables' dims from the settings when only they name them; the two
// must agree when both do.
client_config with_table_dims(client_config c)
{
    if (!c.settings) return c;
    std::vector<std::uint32_t> dims;
    for (const auto& t : c.settings->tables) dims.push_back(t.dim);
    if (c.table_dims.empty()) c.table_dims = std::move(dims);
    else if (c.table_dims != dims)
        throw error(fmt::format("the client was given {} table dims and settings of {} tables with other dims: give "
                                "the dims once, in the settings",
                                c.table_dims.size(), dims.size()));
    return c;
}

// The job's PS tasks among the transport's peers (the rest are spares).
std::size_t ps_count(const transport& net, const client_config& c)
{
    if (c.num_ps < 0 || static_cast<std::size_t>(c.num_ps) > net.num_peers())
        throw error(fmt::format("the client was told of {} PS tasks and its transport has {} peers", c.num_ps,
                                net.num_peers()));
    return c.num_ps == 0 ? net.num_peers() : static_cast<std::size_t>(c.num_ps);
}

}  // namespace

// The client's state: it serves calls (ready), lost a PS that a spare can
// replace (healing: replace_lost_ps() first), or failed (broken: never
// again; break_down() is the one way there).
enum class client_state { ready, healing, broken };

class client::impl {
public:
    impl(transport& net, client_config c)
        : net_(net), cfg_(with_table_dims(std::move(c))), num_ps_(ps_count(net, cfg_)),
          partition_(make_partition(cfg_.num_params, static_cast<int>(num_ps_))),
          memory_(net.allocate(exchange_bytes(cfg_.num_params))), params_(static_cast<float*>(memory_->data())),
          grads_(params_ + cfg_.num_params), layout_(lay_out_tensors(cfg_)), tensors_(layout_.tensors),
          moving_(layout_.moving), mapped_(num_ps_, 0), base_step_(num_ps_, 0), activity_(peer_names(net)),
          exchange_(net, params_, cfg_.timeout, cfg_.worker_names, activity_, cfg_.precision),
          book_(partition_.size() + 1), spares_(net, exchange_, num_ps_, cfg_.index != 0)
    {
        if (num_ps_ == 0) throw error("a parameter-server client needs at least one PS");
    }

    ~impl()
    {
        // Receives still posted go back to the transport before the buffers
        // (and the frames of the operations) go.
        book_.for_each_op([](operation& op) {
            op.recv.cancel();
            op.payload_recv.cancel();
        });
        spares_.cancel();
        try {
            exchange_.wait_for(
                {}, nullptr,
                [&] {
                    bool all = true;
                    book_.for_each_op(
                        [&](operation& op) { all = all && op.recv.complete() && op.payload_recv.complete(); });
                    return all && spares_.settled();
                },
                std::chrono::seconds(1));
        } catch (...) {}
    }

    std::span<float> params() const { return {params_, cfg_.num_params}; }
    std::span<float> grads() const { return {grads_, cfg_.num_params}; }
    std::span<float> buffers() const { return {params_, 2 * cfg_.num_params}; }

    shard_range tensor(std::size_t k) const
    {
        if (k >= tensors_.size())
            throw error(fmt::format("tensor {} does not exist: the client has {} tensors", k, tensors_.size()));
        return tensors_[k];
    }

    ticket init() { return issue(wire::kind::init, everything(), 0, 0); }
    ticket restore(std::uint64_t step) { return issue(wire::kind::restore, everything(), step, 0); }
    ticket pull(shard_range r) { return issue(wire::kind::pull, r, 0, 0); }

    // Sparse requests: each key to its PS (shard_of_key), at most
    // wire::max_sparse_keys a message.
    ticket pull_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<float> out)
    {
        check_rows("async_pull_rows", table, keys, out.size(), "output");
        return issue_sparse(wire::kind::sparse_pull, table, keys, out.data(), {});
    }

    ticket lookup_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<float> out)
    {
        check_rows("async_lookup_rows", table, keys, out.size(), "output");
        return issue_sparse(wire::kind::sparse_pull, table, keys, out.data(), {}, wire::sparse_lookup);
    }

    ticket push_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<const float> grads)
    {
        check_rows("async_push_rows", table, keys, grads.size(), "gradient");
        return issue_sparse(wire::kind::sparse_push, table, keys, nullptr, grads);
    }
    ticket push(shard_range r, std::uint64_t position) { return issue(wire::kind::push, r, 0, position); }

    void wait(ticket t)
    {
        auto& pending = book_.at(t);
        try {
            complete(pending);
        } catch (...) {
            fail(t);
        }
        book_.close(t);
    }

    bool test(ticket t) { return exchange_.test(book_.at(t).ops); }

    std::vector<snapshot_result> snapshot(std::uint64_t step)
    {
        const auto t = ask_every_ps(wire::kind::snapshot, step);
        std::vector<snapshot_result> out;
        for (auto& op : book_.at(t).ops) {
            const auto d = wire::body<wire::snapshot_done>(op.in);
            snapshot_result r;
            r.outcome = d.status == static_cast<std::uint32_t>(wire::snapshot_status::taken)
                            ? snapshot_result::status::taken
                        : d.status == static_cast<std::uint32_t>(wire::snapshot_status::moved_on)
                            ? snapshot_result::status::moved_on
                            : snapshot_result::status::failed;
            r.step = d.step;
            r.bytes = d.bytes;
            r.checksum = d.checksum;
            out.push_back(r);
        }
        book_.close(t);
        return out;
    }

    std::vector<ps_stats> stats()
    {
        const auto t = ask_every_ps(wire::kind::stats, 0);
        std::vector<ps_stats> out;
        for (auto& op : book_.at(t).ops) {
            const auto r = wire::body<wire::stats_reply>(op.in);
            auto& s = out.emplace_back();
            s.step = r.step;
            s.bytes_received = r.bytes_received;
            s.bytes_sent = r.bytes_sent;
            for (const auto& c : op.counters)
                s.workers.push_back({c.gradients, c.stale, c.staleness_sum, c.staleness_max});
        }
        book_.close(t);
        return out;
    }

    // To every PS, and to every spare still waiting (a spare that is gone
    // by then is no loss).
    void shutdown(bool stop)
    {
        std::vector<std::size_t> peers;
        for (std::size_t p = 0; p < num_ps_; ++p) peers.push_back(exchange_.peer(p));
        for (const auto s : spares_.waiting()) peers.push_back(s);
        std::vector<wire::frame> frames(peers.size());
        std::vector<transfer> sends;
        for (std::size_t k = 0; k < peers.size(); ++k) {
            wire::shutdown m;
            m.stop = stop ? 1 : 0;
            frames[k] = wire::encode(m);
            sends.push_back(net_.send(peers[k], channel::control, &frames[k], sizeof frames[k]));
        }
        exchange_.wait_for(
            peers, "the send of the chief's shutdown message",
            [&] {
                for (std::size_t k = 0; k < sends.size(); ++k)
                    if (!sends[k].complete() && !net_.failed(peers[k])) return false;
                return true;
            },
            std::chrono::seconds(30));
        for (std::size_t k = 0; k < sends.size(); ++k) {
            const auto p = peers[k];
            if (k >= num_ps_) continue;
            if (!sends[k].complete() || !sends[k].ok())
                throw peer_error(net_.peer_name(p),
                                 fmt::format("telling {} that training ends failed: {}", net_.peer_name(p),
                                             sends[k].complete() ? sends[k].failure() : "no answer in 30s"));
        }
    }

    // A worker's last word (client::leave): to every PS; one that is gone
    // already is no loss.  Waits for the sends, at most 30 s.
    void leave()
    {
        if (cfg_.index == 0)
            throw error("the chief ends the job with shutdown(), and does not leave: call chief_client::shutdown()");
        if (left_) return;
        left_ = true;
        std::vector<std::size_t> peers;
        for (std::size_t p = 0; p < num_ps_; ++p) peers.push_back(exchange_.peer(p));
        std::vector<wire::frame> frames(peers.size(), wire::encode(wire::leave{}));
        std::vector<transfer> sends;
        for (std::size_t k = 0; k < peers.size(); ++k)
            if (!net_.failed(peers[k]))
                sends.push_back(net_.send(peers[k], channel::control, &frames[k], sizeof frames[k]));
        exchange_.wait_for(
            {}, "the send of this worker's leave message",
            [&] { return std::all_of(sends.begin(), sends.end(), [](transfer& t) { return t.complete(); }); },
            std::chrono::seconds(30));
    }

    // A worker's side of a lost PS's replacement (see client::replace_lost_ps).
    std::vector<std::size_t> replace_lost_ps()
    {
        const auto lost = abandon_calls_in_flight();
        for (const auto p : lost) {
            healing_step([&] { spares_.stand_in(p); });
            greet({p});
        }
        state_ = client_state::ready;
        return lost;
    }

    // The chief's side (see chief_client::replace_lost_ps).
    std::vector<std::size_t> replace_lost_ps(std::uint64_t step, bool rollback)
    {
        const auto lost = abandon_calls_in_flight();
        if (rollback) {
            std::vector<std::size_t> others;
            for (std::size_t p = 0; p < num_ps_; ++p)
                if (std::find(lost.begin(), lost.end(), p) == lost.end()) others.push_back(p);
            wait(issue_to(wire::kind::rollback, others, step));
        }
        for (const auto p : lost) {
            healing_step([&] { spares_.take_over(p, lost); });
            greet({p});
            wait(issue_to(wire::kind::restore, {p}, step));
        }
        state_ = client_state::ready;
        return lost;
    }

    shard_range everything() const { return {0, cfg_.num_params}; }
    std::size_t spares_left() const { return spares_.left(); }

    transport& net_;
    const client_config cfg_;
    const std::size_t num_ps_;  // the transport's first peers; the rest are spares
    const std::vector<shard_range> partition_;
    std::unique_ptr<exchange_memory> memory_;  // params, then grads
    float* params_;
    float* grads_;
    const tensor_layout layout_;
    const std::vector<shard_range>& tensors_;
    const std::vector<shard_range>& moving_;  // moving-average ranges, merged, in order
    std::vector<char> mapped_;                // per PS: it reads and writes the buffers in place
    std::vector<std::uint64_t> base_step_;    // per PS: the step of the values last received
    std::uint64_t global_step_ = 0;
    bool greeted_ = false, done_ = false, stopped_ = false;
    bool left_ = false;     // leave() was called
    bool started_ = false;  // the first request has been answered (the profile's start ends)
    std::optional<std::uint64_t> restored_;
    client::membership live_;  // ps 0's, from its last values reply
    activity_recorder activity_;
    client_clock profile_{{{{"outside", "outside the client's calls (the program's own work: computing gradients)"},
                            {"start", "the first words with every PS (waiting for the chief's initialisation)"},
                            {"issue", "encoding requests and posting their sends and receives"},
                            {"wait", "waiting for the replies"},
                            {"check", "checking the replies"}}}};

private:
    exchange exchange_;
    ticket_book book_;
    spare_pool spares_;  // the peers after the PS tasks'
    client_state state_ = client_state::ready;
    std::string broken_by_;  // what broke the client (broken)

    // The one way to break, in a catch block: the error caught is kept as
    // the reason and thrown on; every call from here on is refused.
    [[noreturn]] void break_down()
    {
        state_ = client_state::broken;
        try {
            throw;
        } catch (const std::exception& e) {
            broken_by_ = e.what();
            throw;
        } catch (...) {
            broken_by_ = "an error that is no std::exception";
            throw;
        }
    }

    // A step of a lost PS's replacement: its error breaks the client.
    template <typename F>
    auto healing_step(F&& f) -> decltype(f())
    {
        try {
            return f();
        } catch (...) {
            break_down();
        }
    }

    // In a catch block: ticket t's wait failed.  The ticket's receives from
    // other PS tasks may still be posted, into its frames and params(): the
    // book keeps it until the destructor takes them back (or a lost PS's
    // replacement has seen them complete).  When the loss itself is the
    // error and a spare is left for each lost PS, the error becomes lost_ps;
    // else the client breaks (naming every lost PS when too few spares are
    // left).  Rethrows.
    [[noreturn]] void fail(ticket t)
    {
        book_.retire(t);
        const auto lost = spares_.lost();
        try {
            throw;
        } catch (const peer_error& e) {
            if (const auto p = spares_.replaceable(lost, e.peer())) {
                state_ = client_state::healing;
                throw lost_ps(e.peer(), e.what(), *p, base_step_[*p]);
            }
        } catch (...) {}
        healing_step([&] { spares_.enough_for(lost); });
        break_down();
    }

    // Waits for the operations of ticket t; retires it when that fails.
    void wait_ops(ticket t)
    {
        try {
            exchange_.wait(book_.at(t).ops, profile_, started_ ? client_phase::waiting : client_phase::starting);
        } catch (...) {
            fail(t);
        }
    }

    // The first step of a lost PS's replacement (spare_pool::settle).
    std::vector<std::size_t> abandon_calls_in_flight()
    {
        if (state_ != client_state::healing)
            throw error("replace_lost_ps: no PS was lost (call it after a lost_ps error)");
        return healing_step([&] { return spares_.settle(book_); });
    }

    // `kind` (restore, rollback) to each PS of `which`, for its whole shard.
    ticket issue_to(wire::kind kind, const std::vector<std::size_t>& which, std::uint64_t step)
    {
        const ticket id = book_.open();
        auto& t = book_.at(id);
        for (const auto p : which) {
            auto& op = t.ops.emplace_back();
            op.ps = p;
            op.part = partition_[p];
            op.expected = reply_kind(kind);
            exchange_.post_and_send(op, encode_request(kind, op, step, 0));
        }
        return id;
    }

    // Sends `kind` to every PS and waits for every answer; the caller reads
    // them from the ticket's operations, then closes it.
    ticket ask_every_ps(wire::kind kind, std::uint64_t step)
    {
        const auto t = issue(kind, everything(), step, 0);
        wait_ops(t);
        return t;
    }

    // Before any request: the client can be used, and has said hello.
    void ready_to_issue()
    {
        if (state_ == client_state::broken)
            throw error("the parameter-server client failed earlier (see that error): it cannot be used again");
        if (left_) throw error("this worker left the job (client::leave): its client cannot be used again");
        if (state_ == client_state::healing)
            throw error("the parameter-server client lost a PS: replace_lost_ps() puts a spare in its place first");
        if (greeted_) return;
        client_clock::scope timed(profile_, client_phase::starting);
        greet();
    }

    // Sends `kind` to every PS whose shard meets `range`; returns its ticket.
    ticket issue(wire::kind kind, shard_range range, std::uint64_t step, std::uint64_t position)
    {
        client_clock::scope timed(profile_, client_phase::issuing);
        if (range.begin > range.end || range.end > cfg_.num_params)
            throw error(fmt::format("range [{}, {}) is outside the model's {} parameters", range.begin, range.end,
                                    cfg_.num_params));
        ready_to_issue();
        const ticket id = book_.open();
        auto& t = book_.at(id);
        for (std::size_t p = 0; p < partition_.size(); ++p) {
            shard_range part{std::max(range.begin, partition_[p].begin), std::min(range.end, partition_[p].end)};
            if (asks_whole_model(kind)) part = partition_[p];
            else if (part.begin >= part.end) continue;
            auto& op = t.ops.emplace_back();
            op.ps = p;
            op.part = part;
            op.expected = reply_kind(kind);
            op.shared = mapped_[p] && (kind == wire::kind::pull || kind == wire::kind::push);
            if (kind == wire::kind::stats) op.counters.assign(static_cast<std::size_t>(cfg_.num_workers), {});
            exchange_.post_and_send(op, encode_request(kind, op, step, position));
        }
        return id;
    }

    // The frame of op's request (into op.out); returns its payload, if any.
    const void* encode_request(wire::kind kind, operation& op, std::uint64_t step, std::uint64_t position)
    {
        const auto& part = op.part;
        const std::uint32_t shared = op.shared ? 1 : 0;
        switch (kind) {
        case wire::kind::init:
            op.out = wire::encode(wire::init{part.begin, part.end}, wire::dense_bytes(part));
            return params_ + part.begin;
        case wire::kind::restore: op.out = wire::encode(wire::restore{step}); return nullptr;
        case wire::kind::rollback: op.out = wire::encode(wire::rollback{step}); return nullptr;
        case wire::kind::pull: op.out = wire::encode(wire::pull{part.begin, part.end, shared}); return nullptr;
        case wire::kind::push:
            op.out = wire::encode(wire::push{base_step_[op.ps], part.begin, part.end, position, shared},
                                  op.shared ? 0 : wire::dense_bytes(part, cfg_.precision));
            if (op.shared) return nullptr;
            if (cfg_.precision == wire_precision::fp32) return grads_ + part.begin;
            wire::encode_numbers(grads_ + part.begin, part.size(), cfg_.precision, op.bytes);
            return op.bytes.data();
        case wire::kind::snapshot: op.out = wire::encode(wire::snapshot{step}); return nullptr;
        case wire::kind::stats: op.out = wire::encode(wire::stats{}); return nullptr;
        default: throw error("internal error: the client cannot issue this request");
        }
    }

    std::uint32_t table_dim(std::size_t table) const
    {
        if (table >= cfg_.table_dims.size())
            throw error(fmt::format("embedding table {} does not exist: the client was given {}", table,
                                    cfg_.table_dims.size()));
        return cfg_.table_dims[table];
    }

    // `floats` (the caller's output or gradient) holds one row per key.
    void check_rows(const char* verb, std::size_t table, std::span<const std::uint64_t> keys, std::size_t floats,
                    const char* of) const
    {
        const auto dim = table_dim(table);
        if (floats != keys.size() * dim)
            throw error(fmt::format("{}: {} keys of table {} (dim {}) need {} floats of {}, not {}", verb, keys.size(),
                                    table, dim, keys.size() * dim, of, floats));
    }

    ticket issue_sparse(wire::kind kind, std::size_t table, std::span<const std::uint64_t> keys, float* out,
                        std::span<const float> grads, std::uint32_t flags = 0)
    {
        client_clock::scope timed(profile_, client_phase::issuing);
        ready_to_issue();
        const std::uint32_t dim = cfg_.table_dims[table];
        const auto by_ps = places_by_ps(keys, partition_.size());
        const ticket id = book_.open();
        auto& t = book_.at(id);
        t.ops.reserve(row_messages(by_ps));  // never reallocated while in flight
        for (std::size_t p = 0; p < by_ps.size(); ++p) {
            const std::span<const std::uint32_t> places(by_ps[p]);
            for (std::size_t from = 0; from < places.size(); from += wire::max_sparse_keys) {
                auto& op = t.ops.emplace_back();
                op.ps = p;
                const auto part =
                    places.subspan(from, std::min<std::size_t>(wire::max_sparse_keys, places.size() - from));
                exchange_.post_and_send(op, fill_row_request(op, kind, static_cast<std::uint32_t>(table), dim, part,
                                                             keys, out, grads, flags, cfg_.precision));
            }
        }
        return id;
    }

    // The first words with every PS: the model's size and an offer of the
    // exchange buffers.  Each PS answers with its range and whether it
    // mapped them.
    void greet(const std::vector<std::size_t>& only = {})
    {
        greeted_ = true;
        std::vector<std::uint8_t> key;
        if (cfg_.share_memory) {
            key = memory_->packed_rkey();
            if (key.size() > wire::max_rkey_bytes) {
                log::debug("the transport's rkey is {} bytes: exchanges go through messages", key.size());
                key.clear();
            }
        }
        // The chief tells every PS which ranges hold moving averages, after the rkey.
        const auto moving = cfg_.index == 0 ? std::span<const shard_range>(moving_) : std::span<const shard_range>();
        // And the training settings, when it says them.
        const auto settings =
            cfg_.index == 0 && cfg_.settings ? wire::encode_settings(*cfg_.settings) : std::vector<std::uint8_t>();
        const auto payload = wire::hello_payload(key, moving, settings);
        const ticket id = book_.open();
        auto& t = book_.at(id);
        for (std::size_t p = 0; p < partition_.size(); ++p) {
            if (!only.empty() && std::find(only.begin(), only.end(), p) == only.end()) continue;
            auto& op = t.ops.emplace_back();
            op.ps = p;
            op.part = partition_[p];
            op.expected = wire::kind::welcome;
            op.out = wire::encode(hello_of(!key.empty(), moving.size(), settings.size()), payload.size());
            exchange_.post_and_send(op, payload.empty() ? nullptr : payload.data());
        }
        wait_ops(id);
        for (auto& op : t.ops) mapped_[op.ps] = wire::body<wire::welcome>(op.in).mapped != 0;
        book_.close(id);
        if (!only.empty()) return;
        log_exchange_paths();
        if (cfg_.precision != wire_precision::fp32)
            log::info("messages carry gradients, values and rows as {} (the PS tasks keep FP32; shared memory "
                      "stays FP32)",
                      name_of(cfg_.precision));
    }

    wire::hello hello_of(bool offer_buffers, std::size_t num_moving, std::size_t settings_bytes) const
    {
        wire::hello h;
        h.num_params = cfg_.num_params;
        h.worker_index = static_cast<std::uint32_t>(cfg_.index);
        h.num_workers = static_cast<std::uint32_t>(cfg_.num_workers);
        h.num_tables = static_cast<std::uint32_t>(cfg_.table_dims.size());
        if (offer_buffers) {
            h.params_address = reinterpret_cast<std::uintptr_t>(params_);
            h.grads_address = reinterpret_cast<std::uintptr_t>(grads_);
        }
        h.num_moving = static_cast<std::uint32_t>(num_moving);
        h.settings_bytes = static_cast<std::uint32_t>(settings_bytes);
        h.precision = static_cast<std::uint32_t>(cfg_.precision);
        return h;
    }

    // Which PS tasks map the buffers, in the log.
    void log_exchange_paths() const
    {
        if (!cfg_.share_memory) {
            log::info("gradients and parameters go through UCX messages with every PS (--shared-memory off)");
            return;
        }
        std::vector<std::string> shared, messages;
        for (std::size_t p = 0; p < partition_.size(); ++p)
            (mapped_[p] ? shared : messages).push_back(net_.peer_name(exchange_.peer(p)));
        if (messages.empty())
            log::info("gradients and parameters go through shared memory with {}", fmt::join(shared, ", "));
        else if (shared.empty())
            log::info("gradients and parameters go through UCX messages with {}", fmt::join(messages, ", "));
        else
            log::info("gradients and parameters go through shared memory with {} and through UCX messages with {}",
                      fmt::join(shared, ", "), fmt::join(messages, ", "));
    }

    void complete(pending_ticket& t)
    {
        client_clock::scope timed(profile_, client_phase::checking);
        exchange_.wait(t.ops, profile_, started_ ? client_phase::waiting : client_phase::starting);
        started_ = true;
        if (!t.ops.empty() && t.ops.front().out.kind == static_cast<std::uint16_t>(wire::kind::push))
            profile_.step_done();
        for (auto& op : t.ops) {
            if (op.expected == wire::kind::rows) {
                const auto r = wire::body<wire::rows>(op.in);
                if (op.ps == 0) global_step_ = std::max(global_step_, r.step);
                heard_status(static_cast<wire::values_status>(r.status));
                if (op.scatter_to) wire::scatter_rows(op.rows, op.places, op.dim, op.scatter_to);
                continue;
            }
            if (op.expected != wire::kind::values) continue;
            const auto v = wire::body<wire::values>(op.in);
            base_step_[op.ps] = v.step;
            if (op.ps == 0) {
                global_step_ = v.step;
                live_ = {v.live_workers, v.live_rank};
            }
            heard_status(static_cast<wire::values_status>(v.status));
            if (v.restored > 0) restored_ = v.restored - 1;
        }
    }

    void heard_status(wire::values_status s)
    {
        if (s == wire::values_status::done || s == wire::values_status::stopped) done_ = true;
        if (s == wire::values_status::stopped) stopped_ = true;
    }
};

client::client(transport& net, client_config config) : impl_(std::make_unique<impl>(net, std::move(config))) {}
client::~client() = default;

std::span<float> client::params() const { return impl_->params(); }
std::span<float> client::grads() const { return impl_->grads(); }
std::span<float> client::buffers() const { return impl_->buffers(); }
shard_range client::everything() const { return impl_->everything(); }
shard_range client::tensor(std::size_t k) const { return impl_->tensor(k); }
const std::vector<shard_range>& client::partition() const { return impl_->partition_; }
ticket client::async_pull(shard_range range) { return impl_->pull(range); }
ticket client::async_push(shard_range range, std::uint64_t position) { return impl_->push(range, position); }
ticket client::async_pull_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<float> out)
{
    return impl_->pull_rows(table, keys, out);
}
ticket client::async_lookup_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<float> out)
{
    return impl_->lookup_rows(table, keys, out);
}
ticket client::async_push_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<const float> grads)
{
    return impl_->push_rows(table, keys, grads);
}
void client::wait(ticket t) { impl_->wait(t); }
bool client::test(ticket t) { return impl_->test(t); }
std::vector<ps_stats> client::stats() { return impl_->stats(); }
std::vector<std::size_t> client::replace_lost_ps() { return impl_->replace_lost_ps(); }
std::size_t client::spares_left() const { return impl_->spares_left(); }
std::uint64_t client::global_step() const { return impl_->global_step_; }
bool client::done() const { return impl_->done_; }
void client::leave() { impl_->leave(); }
bool client::stopped() const { return impl_->stopped_; }
std::optional<std::uint64_t> client::restored_step() const { return impl_->restored_; }
client::membership client::live_workers() const { return impl_->live_; }
bool client::mapped(std::size_t p) const { return impl_->mapped_.at(p) != 0; }
ps::activity client::activity() const { return impl_->activity_.snapshot(); }
time_profile client::profile() const { return impl_->profile_.snapshot(); }

chief_client::chief_client(transport& net, client_config config) : client(net, chiefs_config(std::move(config))) {}
ticket chief_client::async_init() { return core().init(); }
ticket chief_client::async_restore(std::uint64_t step) { return core().restore(step); }
std::vector<snapshot_result> chief_client::snapshot(std::uint64_t step) { return core().snapshot(step); }
void chief_client::shutdown(bool stop) { core().shutdown(stop); }
std::vector<std::size_t> chief_client::replace_lost_ps(std::uint64_t step, bool rollback)
{
    return core().replace_lost_ps(step, rollback);
}

}  // namespace pstrain::ps
