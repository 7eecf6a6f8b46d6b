#include "pstrain/client.hpp"
#include "pstrain/embedding.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "library/ps/activity_recorder.hpp"
#include "library/ps/client_requests.hpp"
#include "library/ps/exchange.hpp"
#include "library/ps/process_fence.hpp"
#include "library/ps/tensor_layout.hpp"
#include "library/ps/protocol.hpp"
#include "library/ps/row_requests.hpp"
#include "library/ps/spare_pool.hpp"
#include "library/ps/ticket_book.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pstrain::ps {

// The client's state and its verbs.  The request/reply exchange
// (exchange.hpp) moves and checks the messages, the ticket book
// (ticket_book.hpp) keeps the calls in flight, the spare pool
// (spare_pool.hpp) replaces a lost PS; what is asked, and what a reply
// means to the client, is decided here (its frames: client_requests.hpp).

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
          moving_(layout_.moving), mapped_(num_ps_, 0), fences_(num_ps_), base_step_(num_ps_, 0),
          activity_(peer_names(net)),
          exchange_(net, num_ps_, params_, cfg_.timeout, cfg_.worker_names, activity_, cfg_.precision),
          book_(partition_.size() + 1), spares_(net, exchange_, num_ps_, cfg_.index != 0)
    {
        if (num_ps_ == 0) throw error("a parameter-server client needs at least one PS");
        step_parts_.resize(num_ps_);
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
        const auto all_back = [&] {
            bool all = spares_.settled();
            book_.for_each_op([&](operation& op) { all = all && op.recv.complete() && op.payload_recv.complete(); });
            return all;
        };
        try {
            exchange_.wait_for({}, nullptr, all_back, std::chrono::seconds(1));
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
        const auto dim = check_rows(cfg_, "async_pull_rows", table, keys, out.size(), "output");
        return issue_sparse(dim, wire::kind::sparse_pull, table, keys, out.data(), {});
    }

    ticket lookup_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<float> out)
    {
        const auto dim = check_rows(cfg_, "async_lookup_rows", table, keys, out.size(), "output");
        return issue_sparse(dim, wire::kind::sparse_pull, table, keys, out.data(), {}, wire::sparse_lookup);
    }

    ticket push_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<const float> grads)
    {
        const auto dim = check_rows(cfg_, "async_push_rows", table, keys, grads.size(), "gradient");
        return issue_sparse(dim, wire::kind::sparse_push, table, keys, nullptr, grads);
    }
    // A step's pushes: the whole vector, or its buckets, each issued before
    // any is waited for; the first push after they were all waited for
    // begins the next step.
    ticket push(shard_range r, std::uint64_t position, push_marks marks)
    {
        last_position_ = position;
        if (step_pushes_.empty())
            for (auto& parts : step_parts_) parts.clear();
        const ticket id = issue(wire::kind::push, r, 0, position, marks);
        step_pushes_.push_back(id);
        for (const auto& op : book_.at(id).ops) step_parts_[op.ps].push_back(op.part);
        return id;
    }

    void wait(ticket t)
    {
        auto& pending = book_.at(t);
        const auto push = std::find(step_pushes_.begin(), step_pushes_.end(), t);
        const bool ends_step = push != step_pushes_.end() && step_pushes_.size() == 1;
        if (push != step_pushes_.end()) step_pushes_.erase(push);
        try {
            complete(pending);
        } catch (...) {
            fail(t);
        }
        book_.close(t);
        if (ends_step) profile_.step_done();
    }

    bool test(ticket t) { return exchange_.test(book_.at(t).ops); }

    std::vector<snapshot_result> snapshot(std::uint64_t step)
    {
        const auto t = ask_every_ps(wire::kind::snapshot, step);
        std::vector<snapshot_result> out;
        for (auto& op : book_.at(t).ops) out.push_back(snapshot_result_of(wire::body<wire::snapshot_done>(op.in)));
        book_.close(t);
        return out;
    }

    std::vector<ps_stats> stats()
    {
        const auto t = ask_every_ps(wire::kind::stats, 0);
        std::vector<ps_stats> out;
        for (auto& op : book_.at(t).ops) out.push_back(stats_of(wire::body<wire::stats_reply>(op.in), op.counters));
        book_.close(t);
        return out;
    }

    // To every PS, and to every spare still waiting (a spare that is gone
    // by then is no loss).
    void shutdown(bool stop)
    {
        auto peers = exchange_.ps_peers();
        for (const auto s : spares_.waiting()) peers.push_back(s);
        std::vector<wire::frame> frames(peers.size(), wire::encode(wire::shutdown{stop ? 1u : 0u}));
        std::vector<transfer> sends;
        for (std::size_t k = 0; k < peers.size(); ++k)
            sends.push_back(net_.send(peers[k], channel::control, &frames[k], sizeof frames[k]));
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
        const auto peers = exchange_.ps_peers();
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
    std::vector<std::size_t> replace_lost_ps(bool rollback)
    {
        const auto lost = settle(abandon_calls_in_flight(rollback));
        for (const auto p : lost) {
            const auto was = net_.peer_name(exchange_.peer(p));
            healing_step([&] { spares_.stand_in(p); });
            fence(p, was);
            greet({p});
        }
        state_ = client_state::ready;
        return lost;
    }

    // The chief's side (see chief_client::replace_lost_ps).
    std::vector<std::size_t> replace_lost_ps(std::uint64_t step, bool rollback)
    {
        // Sync: every reply owed first, then the rollback.  Async: the
        // spares first, then the replies owed, since the staleness bound
        // may hold the chief's until workers that wait for a spare push.
        auto lost = abandon_calls_in_flight(rollback);
        if (rollback) lost = settle(lost);
        const auto serving = spares_.serving(lost);
        if (rollback) wait(send(wire::kind::rollback, everything(), step, 0, &serving));
        for (const auto p : lost) {
            const auto was = net_.peer_name(exchange_.peer(p));
            healing_step([&] { spares_.take_over(p, lost); });
            fence(p, was);
            greet({p});
            const std::vector<std::size_t> only{p};
            wait(send(wire::kind::restore, everything(), step, 0, &only));
        }
        if (!rollback) settle(lost);
        state_ = client_state::ready;
        return lost;
    }

    // A lost PS (`name`) that mapped the buffers from another process on
    // this host is killed once a spare stands in for it, before the spare
    // maps them: stopped in the middle of an update, it would write the
    // rest of it over the spare's values when it ran again
    // (process_fence.hpp).
    void fence(std::size_t p, const std::string& name)
    {
        auto f = std::exchange(fences_[p], std::nullopt);
        if (!f) return;
        std::string why;
        switch (f->kill(std::chrono::seconds(5), why)) {
        case process_fence::outcome::gone: break;
        case process_fence::outcome::killed:
            log::info("{} is lost but still ran on this host, where it maps this worker's parameters: killed it "
                      "(pid {}) before its spare takes its place",
                      name, f->pid());
            break;
        case process_fence::outcome::failed:
            log::warn("{} (pid {}) is lost but may still run on this host, where it maps this worker's parameters, "
                      "and could not be killed ({}): should it run again, it may write an old update into them once; "
                      "--shared-memory off rules that out",
                      name, f->pid(), why);
            break;
        }
    }

    // Sync training, before settling: each serving PS this worker has no
    // push pending at gets a filler push (the gradient buffer as it is).
    // The lost PS may have answered the last step to some workers and not
    // to others, so that some pushed their next step and the others never
    // will: a serving PS holds those pushes for the missing gradients, and
    // when the chief's is among them it would wait for its reply before it
    // rolls back, while the rollback is its next message, which that PS
    // reads only after replying.  With every worker's filler the step
    // completes, and the chief's own filler or push is answered only once
    // every live worker has given one: no filler arrives after the
    // rollback, which discards what they did.
    // Each worker decides by what it had when it learned of the loss
    // (pushes_at_loss_): another worker's filler may have answered its held
    // push since, and a filler of the step after that would hold that step
    // for a push that never comes.  A reply of p in a ticket that stays
    // open (the lost PS's part never came) counts: the filler joins the
    // step p is at, not the one the ticket was for, which p would drop as
    // stale while it holds the other workers' pushes.
    // A filler is of the buckets this worker pushed to p in its last step,
    // in the order it pushed them: the buckets every worker pushes (a whole
    // shard would overlap the buckets the others hold there).
    void complete_held_steps()
    {
        for (const auto p : spares_.serving(spares_.lost())) {
            if (pushes_at_loss_.at(p).pushing) continue;
            base_step_[p] = pushes_at_loss_[p].step;
            const std::vector<std::size_t> only{p};
            if (step_parts_[p].empty()) send(wire::kind::push, partition_[p], 0, last_position_, &only);
            for (const auto& part : step_parts_[p]) send(wire::kind::push, part, 0, last_position_, &only);
        }
    }

    // When a loss is learned: for each PS, whether a push to it was
    // unanswered, and the step of its newest reply (see complete_held_steps).
    void note_pushes_at_loss()
    {
        pushes_at_loss_.assign(num_ps_, {});
        for (std::size_t p = 0; p < num_ps_; ++p) pushes_at_loss_[p].step = base_step_[p];
        book_.for_each_op([&](operation& op) {
            if (op.ps >= num_ps_) return;
            auto& at = pushes_at_loss_[op.ps];
            if (op.out.kind == static_cast<std::uint16_t>(wire::kind::push) && op.pending()) at.pushing = true;
            if (op.whole() && op.in.kind == static_cast<std::uint16_t>(wire::kind::values))
                at.step = std::max(at.step, wire::body<wire::values>(op.in).step);
        });
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
    const std::vector<shard_range>& moving_;            // moving-average ranges, merged, in order
    std::vector<char> mapped_;                          // per PS: it reads and writes the buffers in place
    std::vector<std::optional<process_fence>> fences_;  // per PS that maps them from another process here
    std::vector<std::uint64_t> base_step_;              // per PS: the step of the values last received
    struct push_at_loss {
        bool pushing = false;    // a push to the PS was unanswered
        std::uint64_t step = 0;  // the step of its newest reply
    };
    std::vector<push_at_loss> pushes_at_loss_;  // per PS, when a loss was learned (note_pushes_at_loss)
    std::uint64_t global_step_ = 0;
    std::uint64_t last_position_ = 0;  // the data position of the last push
    std::vector<ticket> step_pushes_;  // the current step's push tickets not waited for yet
    // Per PS: the parts of the flat vector the current (or last) step's
    // pushes sent it, in order: its buckets, or its whole shard.
    std::vector<std::vector<shard_range>> step_parts_;
    bool greeted_ = false, done_ = false, stopped_ = false;
    bool left_ = false;     // leave() was called
    bool started_ = false;  // the first request has been answered (the profile's start ends)
    std::optional<std::uint64_t> restored_;
    client::membership live_;  // ps 0's, from its last values reply
    activity_recorder activity_;
    client_clock profile_{client_phase_names};

private:
    exchange exchange_;
    ticket_book book_;
    spare_pool spares_;  // the peers after the PS tasks'
    client_state state_ = client_state::ready;
    std::string broken_by_;  // what broke the client (broken)
    hello_message hello_;    // the last greet()'s

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
                note_pushes_at_loss();
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

    // The first steps of a lost PS's replacement: with `rollback` (sync)
    // the serving PS tasks' held steps completed (complete_held_steps),
    // then every call in flight abandoned (spare_pool::abandon).  Returns
    // the lost PS tasks.
    std::vector<std::size_t> abandon_calls_in_flight(bool rollback)
    {
        if (state_ != client_state::healing)
            throw error("replace_lost_ps: no PS was lost (call it after a lost_ps error)");
        return healing_step([&] {
            if (rollback) complete_held_steps();
            step_pushes_.clear();
            return spares_.abandon(book_);
        });
    }

    // Then the replies the serving PS tasks owe (spare_pool::settle);
    // returns the PS tasks lost by then.
    std::vector<std::size_t> settle(const std::vector<std::size_t>& lost)
    {
        return healing_step([&] { return spares_.settle(book_, lost); });
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
    ticket issue(wire::kind kind, shard_range range, std::uint64_t step, std::uint64_t position, push_marks marks = {})
    {
        client_clock::scope timed(profile_, client_phase::issuing);
        check_range(range, cfg_.num_params);
        ready_to_issue();
        return send(kind, range, step, position, nullptr, marks);
    }

    // `kind` to every PS (of `*only`, when given: maybe none) whose shard meets `range`.
    ticket send(wire::kind kind, shard_range range, std::uint64_t step, std::uint64_t position,
                const std::vector<std::size_t>* only = nullptr, push_marks marks = {})
    {
        const ticket id = book_.open();
        auto& t = book_.at(id);
        for (std::size_t p = 0; p < partition_.size(); ++p) {
            if (only && std::find(only->begin(), only->end(), p) == only->end()) continue;
            shard_range part{std::max(range.begin, partition_[p].begin), std::min(range.end, partition_[p].end)};
            if (asks_whole_model(kind)) part = partition_[p];
            else if (part.begin >= part.end) continue;
            auto& op = t.ops.emplace_back();
            op.ps = p;
            op.part = part;
            op.expected = reply_kind(kind);
            op.shared = mapped_[p] && (kind == wire::kind::pull || kind == wire::kind::push);
            if (kind == wire::kind::stats) op.counters.assign(static_cast<std::size_t>(cfg_.num_workers), {});
            const request_source from{params_, grads_, base_step_, cfg_.precision, &hello_};
            exchange_.post_and_send(op, encode_request(kind, op, from, step, position, marks));
        }
        return id;
    }

    ticket issue_sparse(std::uint32_t dim, wire::kind kind, std::size_t table, std::span<const std::uint64_t> keys,
                        float* out, std::span<const float> grads, std::uint32_t flags = 0)
    {
        client_clock::scope timed(profile_, client_phase::issuing);
        ready_to_issue();
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
        auto key = cfg_.share_memory ? memory_->packed_rkey() : std::vector<std::uint8_t>();
        if (key.size() > wire::max_rkey_bytes) {
            log::debug("the transport's rkey is {} bytes: exchanges go through messages", key.size());
            key.clear();
        }
        hello_ = hello_of(cfg_, params_, grads_, key, moving_);
        const auto id = send(wire::kind::hello, everything(), 0, 0, only.empty() ? nullptr : &only);
        wait_ops(id);
        for (auto& op : book_.at(id).ops) {
            const auto w = wire::body<wire::welcome>(op.in);
            mapped_[op.ps] = w.mapped != 0;
            fences_[op.ps].reset();
            std::string why;
            if (w.mapped && !(fences_[op.ps] = process_fence::open({w.pid, w.pid_namespace, w.start_ticks}, why)))
                log::debug("no fence on {}, which maps this worker's buffers: {}",
                           net_.peer_name(exchange_.peer(op.ps)), why);
        }
        book_.close(id);
        if (!only.empty()) return;
        log_exchange_paths();
        if (cfg_.precision != wire_precision::fp32)
            log::info("messages carry gradients, values and rows as {} (the PS tasks keep FP32; shared memory "
                      "stays FP32)",
                      name_of(cfg_.precision));
    }

    // Which PS tasks map the buffers, in the log.
    void log_exchange_paths() const
    {
        std::vector<std::string> shared, messages;
        for (std::size_t p = 0; p < partition_.size(); ++p)
            (mapped_[p] ? shared : messages).push_back(net_.peer_name(exchange_.peer(p)));
        log::info("{}", exchange_paths(cfg_.share_memory, shared, messages));
    }

    void complete(pending_ticket& t)
    {
        client_clock::scope timed(profile_, client_phase::checking);
        exchange_.wait(t.ops, profile_, started_ ? client_phase::waiting : client_phase::starting);
        started_ = true;
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
ticket client::async_push(shard_range range, std::uint64_t position, bool skip)
{
    return impl_->push(range, position, {.skip = skip});
}
ticket client::async_push_bucket(shard_range range, std::uint64_t position, bool skip)
{
    return impl_->push(range, position, {.skip = skip, .bucket = true});
}
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
std::vector<std::size_t> client::replace_lost_ps(bool rollback) { return impl_->replace_lost_ps(rollback); }
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
