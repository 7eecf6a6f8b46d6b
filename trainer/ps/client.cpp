#include "pstrain/client.hpp"
#include "pstrain/embedding.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "trainer/ps/activity_recorder.hpp"
#include "trainer/ps/phase_clock.hpp"
#include "trainer/ps/protocol.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pstrain::ps {

namespace {

// One request to one PS, part of a ticket.  Its frames live here until the
// transport is done with them.
struct operation {
    std::size_t ps = 0;
    shard_range part;
    wire::kind expected = wire::kind::values;  // the reply's kind
    bool shared = false;                       // through the mapped buffers
    wire::frame out, in;
    request send, payload_send, recv, payload_recv;
    std::vector<wire::worker_counters> counters;  // a stats reply's payload
    // Sparse: the keys sent (a pull's payload), a push's payload (keys then
    // gradients), the rows received and where each goes in the caller's out.
    std::vector<std::uint64_t> keys;
    std::vector<std::uint8_t> bytes;
    std::vector<float> rows;
    std::vector<std::uint32_t> places;
    float* scatter_to = nullptr;
    std::uint32_t table = 0, dim = 0;

    bool is_abort() { return recv.done() && recv.ok() && in.kind == static_cast<std::uint16_t>(wire::kind::abort); }
    bool pending()
    {
        return !recv.done() || !send.done() || !payload_send.done() ||
               (recv.ok() && in.payload_bytes > 0 && !payload_recv.done());
    }
    // A whole reply counts even if its PS goes away right after it (a PS
    // exits once the chief has ended training).
    bool whole()
    {
        return !pending() && recv.ok() && send.ok() && payload_send.ok() && (in.payload_bytes == 0 || payload_recv.ok());
    }
};

struct pending_ticket {
    std::vector<operation> ops;
};

// The exchange buffers' bytes: the values, then the gradients, of the whole
// vector.  Checked before they are allocated: 2 * 4 * num_params must not wrap.
std::size_t exchange_bytes(std::uint64_t num_params)
{
    const std::uint64_t one = wire::float_bytes(num_params);
    if ((num_params > 0 && one == 0) || one > std::numeric_limits<std::size_t>::max() / 2)
        throw error(fmt::format("{} parameters are more than this machine can address", num_params));
    return std::max<std::size_t>(1, 2 * one);
}

// What a wait for replies to `k` waits for, for activity().
const char* reply_to(std::uint16_t k)
{
    switch (static_cast<wire::kind>(k)) {
    case wire::kind::hello: return "the reply to hello (the first exchange)";
    case wire::kind::init: return "the reply to init";
    case wire::kind::restore: return "the reply to restore";
    case wire::kind::pull: return "the reply to pull";
    case wire::kind::push: return "the reply to push";
    case wire::kind::snapshot: return "the reply to snapshot";
    case wire::kind::stats: return "the reply to stats";
    case wire::kind::sparse_pull: return "the reply to sparse_pull";
    case wire::kind::sparse_push: return "the reply to sparse_push";
    default: return "a reply";
    }
}

std::vector<std::string> names_of(const transport& net)
{
    std::vector<std::string> names;
    for (std::size_t p = 0; p < net.num_peers(); ++p) names.push_back(net.peer_name(p));
    return names;
}

}  // namespace

class client::impl {
public:
    impl(transport& net, client_config c)
        : net_(net), cfg_(std::move(c)), partition_(make_partition(cfg_.num_params, static_cast<int>(net.num_peers()))),
          memory_(net.allocate(exchange_bytes(cfg_.num_params))),
          params_(static_cast<float*>(memory_->data())), grads_(params_ + cfg_.num_params), mapped_(net.num_peers(), 0),
          base_step_(net.num_peers(), 0), activity_(names_of(net))
    {
        if (net.num_peers() == 0) throw error("a parameter-server client needs at least one PS");
        std::uint64_t at = 0;
        for (auto size : cfg_.key_sizes) {
            if (size > cfg_.num_params - at)
                throw error(fmt::format("the keys' sizes add up to more than the model's {} parameters", cfg_.num_params));
            keys_.push_back({at, at + size});
            at += size;
        }
        if (keys_.empty()) keys_.push_back({0, cfg_.num_params});
        if (!cfg_.key_sizes.empty() && at != cfg_.num_params)
            throw error(fmt::format("the keys' sizes add up to {}, the model has {} parameters", at, cfg_.num_params));
        if (!cfg_.key_kinds.empty() && cfg_.key_kinds.size() != keys_.size())
            throw error(fmt::format("{} key kinds for {} keys: give one kind per key, or none (all trainable)",
                                    cfg_.key_kinds.size(), keys_.size()));
        for (std::size_t k = 0; k < cfg_.key_kinds.size(); ++k) {
            if (cfg_.key_kinds[k] != client_config::key_kind::moving_average || keys_[k].size() == 0) continue;
            if (!moving_.empty() && moving_.back().end == keys_[k].begin) moving_.back().end = keys_[k].end;  // adjacent keys: one range
            else moving_.push_back(keys_[k]);
        }
        if (moving_.size() > wire::max_moving_ranges)
            throw error(fmt::format("{} separate moving-average ranges, at most {}: put the moving averages side by side",
                                    moving_.size(), wire::max_moving_ranges));
    }

    ~impl()
    {
        // Receives still posted go back to the transport before the buffers
        // (and the frames of the operations) go.
        const auto each_op = [&](auto&& f) {
            for (auto& [id, t] : tickets_)
                for (auto& op : t.ops) f(op);
            for (auto& node : failed_)
                for (auto& op : node.mapped().ops) f(op);
        };
        each_op([](operation& op) {
            op.recv.cancel();
            op.payload_recv.cancel();
        });
        try {
            net_.wait_until(
                [&] {
                    bool all = true;
                    each_op([&](operation& op) { all = all && op.recv.done() && op.payload_recv.done(); });
                    return all;
                },
                clock::now() + std::chrono::seconds(1));
        } catch (...) {
        }
    }

    std::span<float> params() const { return {params_, cfg_.num_params}; }
    std::span<float> grads() const { return {grads_, cfg_.num_params}; }
    std::span<float> buffers() const { return {params_, 2 * cfg_.num_params}; }

    shard_range key(std::size_t k) const
    {
        if (k >= keys_.size()) throw error(fmt::format("key {} does not exist: the client has {} keys", k, keys_.size()));
        return keys_[k];
    }

    ticket init()
    {
        chief_only("init");
        return issue(wire::kind::init, everything(), 0, 0);
    }
    ticket restore(std::uint64_t step)
    {
        chief_only("restore");
        return issue(wire::kind::restore, everything(), step, 0);
    }
    ticket pull(shard_range r) { return issue(wire::kind::pull, r, 0, 0); }

    // Sparse requests: each key to its PS (shard_of_key), at most
    // wire::max_sparse_keys a message.
    ticket pull_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<float> out)
    {
        const auto dim = table_dim(table);
        if (out.size() != keys.size() * dim)
            throw error(fmt::format("pull_rows: {} keys of table {} (dim {}) need {} floats of output, not {}", keys.size(),
                                    table, dim, keys.size() * dim, out.size()));
        return issue_sparse(wire::kind::sparse_pull, table, keys, out.data(), nullptr);
    }

    ticket lookup_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<float> out)
    {
        const auto dim = table_dim(table);
        if (out.size() != keys.size() * dim)
            throw error(fmt::format("lookup_rows: {} keys of table {} (dim {}) need {} floats of output, not {}", keys.size(),
                                    table, dim, keys.size() * dim, out.size()));
        return issue_sparse(wire::kind::sparse_pull, table, keys, out.data(), nullptr, wire::sparse_lookup);
    }

    ticket push_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<const float> grads)
    {
        const auto dim = table_dim(table);
        if (grads.size() != keys.size() * dim)
            throw error(fmt::format("push_rows: {} keys of table {} (dim {}) need {} floats of gradient, not {}", keys.size(),
                                    table, dim, keys.size() * dim, grads.size()));
        return issue_sparse(wire::kind::sparse_push, table, keys, nullptr, grads.data());
    }
    ticket push(shard_range r, std::uint64_t position) { return issue(wire::kind::push, r, 0, position); }

    void wait(ticket t)
    {
        auto it = tickets_.find(t);
        if (it == tickets_.end()) throw error(fmt::format("ticket {} is not outstanding (already waited for?)", t));
        try {
            complete(it->second);
        } catch (...) {
            retire(it);
            throw;
        }
        recycle(it);
    }

    bool test(ticket t)
    {
        auto it = tickets_.find(t);
        if (it == tickets_.end()) throw error(fmt::format("ticket {} is not outstanding (already waited for?)", t));
        bool ready = true;
        net_.wait_until(
            [&] {
                for (auto& op : it->second.ops)
                    if (op.pending() && !op.is_abort() && !net_.failed(op.ps)) ready = false;
                return true;
            },
            clock::now());
        return ready;
    }

    std::vector<snapshot_result> snapshot(std::uint64_t step)
    {
        chief_only("snapshot");
        const auto t = ask_every_ps(wire::kind::snapshot, step);
        auto& ops = tickets_.at(t).ops;
        std::vector<snapshot_result> out;
        for (auto& op : ops) {
            const auto d = wire::body<wire::snapshot_done>(op.in);
            snapshot_result r;
            r.outcome = d.status == static_cast<std::uint32_t>(wire::snapshot_status::taken)      ? snapshot_result::status::taken
                        : d.status == static_cast<std::uint32_t>(wire::snapshot_status::moved_on) ? snapshot_result::status::moved_on
                                                                                                    : snapshot_result::status::failed;
            r.step = d.step;
            r.bytes = d.bytes;
            r.checksum = d.checksum;
            out.push_back(r);
        }
        tickets_.erase(t);
        return out;
    }

    std::vector<ps_stats> stats()
    {
        const auto t = ask_every_ps(wire::kind::stats, 0);
        auto& ops = tickets_.at(t).ops;
        std::vector<ps_stats> out;
        for (auto& op : ops) {
            const auto r = wire::body<wire::stats_reply>(op.in);
            auto& s = out.emplace_back();
            s.step = r.step;
            s.bytes_received = r.bytes_received;
            s.bytes_sent = r.bytes_sent;
            for (const auto& c : op.counters) s.workers.push_back({c.gradients, c.stale, c.staleness_sum, c.staleness_max});
        }
        tickets_.erase(t);
        return out;
    }

    void shutdown(bool stop)
    {
        chief_only("shutdown");
        std::vector<wire::frame> frames(net_.num_peers());
        std::vector<request> sends;
        for (std::size_t p = 0; p < net_.num_peers(); ++p) {
            wire::shutdown m;
            m.stop = stop ? 1 : 0;
            frames[p] = wire::encode(m);
            sends.push_back(net_.send(p, channel::control, &frames[p], sizeof frames[p]));
        }
        for (std::size_t p = 0; p < sends.size(); ++p) {
            activity_recorder::scope waiting(activity_, "the send of the chief's shutdown message");
            activity_.pending(p, true);
            net_.wait_until([&] { return sends[p].done() || net_.failed(p); }, clock::now() + std::chrono::seconds(30));
            if (!sends[p].done() || !sends[p].ok())
                throw peer_error(net_.peer_name(p), fmt::format("telling {} that training ends failed: {}", net_.peer_name(p),
                                                                sends[p].done() ? sends[p].failure() : "no answer in 30s"));
        }
    }

    shard_range everything() const { return {0, cfg_.num_params}; }

    transport& net_;
    const client_config cfg_;
    const std::vector<shard_range> partition_;
    std::vector<shard_range> keys_;
    std::vector<shard_range> moving_;  // moving-average ranges, merged, in order
    std::unique_ptr<exchange_memory> memory_;  // params, then grads
    float* params_;
    float* grads_;
    std::vector<char> mapped_;                 // per PS: it reads and writes the buffers in place
    std::vector<std::uint64_t> base_step_;     // per PS: the step of the values last received
    std::uint64_t global_step_ = 0;
    bool greeted_ = false, done_ = false, stopped_ = false, broken_ = false;
    bool started_ = false;  // the first request has been answered (the profile's start ends)
    std::optional<std::uint64_t> restored_;
    activity_recorder activity_;
    enum phase : std::size_t { outside, starting, issuing, waiting, checking };
    phase_clock<5> profile_{{{{"outside", "outside the client's calls (the program's own work: computing gradients)"},
                              {"start", "the first words with every PS (waiting for the chief's initialisation)"},
                              {"issue", "encoding requests and posting their sends and receives"},
                              {"wait", "waiting for the replies"},
                              {"check", "checking the replies"}}}};

private:
    void chief_only(const char* what) const
    {
        if (cfg_.index != 0) throw error(fmt::format("only the chief (worker 0) may {}; this is worker {}", what, cfg_.index));
    }

    // Sends `kind` to every PS and waits for every answer; the caller reads
    // them from the ticket's operations, then erases it.
    ticket ask_every_ps(wire::kind kind, std::uint64_t step)
    {
        const auto t = issue(kind, everything(), step, 0);
        try {
            wait_ops(tickets_.at(t).ops);
        } catch (...) {
            retire(tickets_.find(t));
            throw;
        }
        return t;
    }

    // Sends `kind` to every PS whose shard meets `range`; returns its ticket.
    ticket issue(wire::kind kind, shard_range range, std::uint64_t step, std::uint64_t position)
    {
        phase_clock<5>::scope timed(profile_, issuing);
        if (broken_) throw error("the parameter-server client failed earlier (see that error): it cannot be used again");
        if (range.begin > range.end || range.end > cfg_.num_params)
            throw error(fmt::format("range [{}, {}) is outside the model's {} parameters", range.begin, range.end, cfg_.num_params));
        if (!greeted_) {
            phase_clock<5>::scope timed(profile_, starting);
            greet();
        }
        const ticket id = next_++;
        auto& t = take(id);
        for (std::size_t p = 0; p < partition_.size(); ++p) {
            shard_range part{std::max(range.begin, partition_[p].begin), std::min(range.end, partition_[p].end)};
            const bool whole_model = kind == wire::kind::init || kind == wire::kind::restore || kind == wire::kind::snapshot ||
                                     kind == wire::kind::stats;
            if (whole_model) part = partition_[p];
            else if (part.begin >= part.end) continue;
            auto& op = t.ops.emplace_back();
            op.ps = p;
            op.part = part;
            op.expected = kind == wire::kind::snapshot ? wire::kind::snapshot_done
                          : kind == wire::kind::stats  ? wire::kind::stats_reply
                                                       : wire::kind::values;
            op.shared = mapped_[p] && (kind == wire::kind::pull || kind == wire::kind::push);
            const float* payload = nullptr;
            switch (kind) {
            case wire::kind::init: {
                wire::init m;
                m.range_begin = part.begin;
                m.range_end = part.end;
                payload = params_ + part.begin;
                op.out = wire::encode(m, wire::float_bytes(part.size()));
                break;
            }
            case wire::kind::restore: {
                wire::restore m;
                m.step = step;
                op.out = wire::encode(m);
                break;
            }
            case wire::kind::pull: {
                wire::pull m;
                m.range_begin = part.begin;
                m.range_end = part.end;
                m.in_shared_memory = op.shared;
                op.out = wire::encode(m);
                break;
            }
            case wire::kind::push: {
                wire::push m;
                m.step = base_step_[p];
                m.range_begin = part.begin;
                m.range_end = part.end;
                m.position = position;
                m.in_shared_memory = op.shared;
                if (!op.shared) payload = grads_ + part.begin;
                op.out = wire::encode(m, op.shared ? 0 : wire::float_bytes(part.size()));
                break;
            }
            case wire::kind::snapshot: {
                wire::snapshot m;
                m.step = step;
                op.out = wire::encode(m);
                break;
            }
            case wire::kind::stats:
                op.counters.assign(static_cast<std::size_t>(cfg_.num_workers), {});
                op.out = wire::encode(wire::stats{});
                break;
            default:
                throw error("internal error: the client cannot issue this request");
            }
            post_and_send(op, payload);
        }
        return id;
    }

    std::uint32_t table_dim(std::size_t table) const
    {
        if (table >= cfg_.table_dims.size())
            throw error(fmt::format("embedding table {} does not exist: the client was given {}", table, cfg_.table_dims.size()));
        return cfg_.table_dims[table];
    }

    ticket issue_sparse(wire::kind kind, std::size_t table, std::span<const std::uint64_t> keys, float* out, const float* grads,
                        std::uint32_t flags = 0)
    {
        phase_clock<5>::scope timed(profile_, issuing);
        if (broken_) throw error("the parameter-server client failed earlier (see that error): it cannot be used again");
        if (!greeted_) {
            phase_clock<5>::scope start(profile_, starting);
            greet();
        }
        const std::uint32_t dim = cfg_.table_dims[table];
        const std::size_t num_ps = partition_.size();
        // Each key's place, grouped by PS.
        std::vector<std::vector<std::uint32_t>> by_ps(num_ps);
        for (std::size_t i = 0; i < keys.size(); ++i) by_ps[shard_of_key(keys[i], num_ps)].push_back(static_cast<std::uint32_t>(i));
        std::size_t messages = 0;
        for (const auto& v : by_ps) messages += (v.size() + wire::max_sparse_keys - 1) / wire::max_sparse_keys;
        const ticket id = next_++;
        auto& t = take(id);
        t.ops.reserve(messages);  // never reallocated while in flight
        for (std::size_t p = 0; p < num_ps; ++p) {
            for (std::size_t from = 0; from < by_ps[p].size(); from += wire::max_sparse_keys) {
                const std::size_t n = std::min<std::size_t>(wire::max_sparse_keys, by_ps[p].size() - from);
                auto& op = t.ops.emplace_back();
                op.ps = p;
                op.table = static_cast<std::uint32_t>(table);
                op.dim = dim;
                op.expected = wire::kind::rows;
                op.places.assign(by_ps[p].begin() + static_cast<long>(from), by_ps[p].begin() + static_cast<long>(from + n));
                op.keys.resize(n);
                for (std::size_t k = 0; k < n; ++k) op.keys[k] = keys[op.places[k]];
                if (kind == wire::kind::sparse_pull) {
                    wire::sparse_pull m;
                    m.count = n;
                    m.table = op.table;
                    m.flags = flags;
                    op.rows.resize(n * dim);
                    op.scatter_to = out;
                    op.out = wire::encode(m, n * 8);
                    post_and_send(op, op.keys.data());
                } else {
                    wire::sparse_push m;
                    m.count = n;
                    m.table = op.table;
                    op.bytes.resize(n * (8 + 4 * std::size_t(dim)));
                    std::memcpy(op.bytes.data(), op.keys.data(), n * 8);
                    auto* g = op.bytes.data() + n * 8;
                    for (std::size_t k = 0; k < n; ++k)
                        std::memcpy(g + k * dim * 4, grads + std::size_t(op.places[k]) * dim, dim * 4);
                    op.out = wire::encode(m, op.bytes.size());
                    post_and_send(op, op.bytes.data());
                }
            }
        }
        return id;
    }

    // Receives first, so that replies land in place.
    void post_and_send(operation& op, const void* payload)
    {
        op.recv = net_.recv(op.ps, channel::control, &op.in, sizeof op.in);
        if (op.expected == wire::kind::rows && !op.rows.empty())
            op.payload_recv = net_.recv(op.ps, channel::payload, op.rows.data(), op.rows.size() * sizeof(float));
        if (op.expected == wire::kind::values && !op.shared)
            op.payload_recv = net_.recv(op.ps, channel::payload, params_ + op.part.begin, wire::float_bytes(op.part.size()));
        if (op.expected == wire::kind::stats_reply)
            op.payload_recv = net_.recv(op.ps, channel::payload, op.counters.data(),
                                        op.counters.size() * sizeof(wire::worker_counters));
        if (payload) op.payload_send = net_.send(op.ps, channel::payload, payload, op.out.payload_bytes);
        op.send = net_.send(op.ps, channel::control, &op.out, sizeof op.out);
    }

    // The first words with every PS: the model's size and an offer of the
    // exchange buffers.  Each PS answers with its range and whether it
    // mapped them.
    void greet()
    {
        greeted_ = true;
        std::vector<std::uint8_t> key;
        if (cfg_.share_memory) {
            key = memory_->packed_key();
            if (key.size() > wire::max_key_bytes) {
                log::debug("the transport's memory key is {} bytes: exchanges go through messages", key.size());
                key.clear();
            }
        }
        // The chief tells every PS which ranges hold moving averages, after the key.
        std::vector<std::uint64_t> moving;
        if (cfg_.index == 0)
            for (const auto& r : moving_) moving.insert(moving.end(), {r.begin, r.end});
        std::vector<std::uint8_t> payload(key);
        payload.resize(key.size() + moving.size() * sizeof(std::uint64_t));
        if (!moving.empty()) std::memcpy(payload.data() + key.size(), moving.data(), moving.size() * sizeof(std::uint64_t));
        const ticket id = next_++;
        auto& t = take(id);
        for (std::size_t p = 0; p < partition_.size(); ++p) {
            auto& op = t.ops.emplace_back();
            op.ps = p;
            op.part = partition_[p];
            op.expected = wire::kind::welcome;
            wire::hello h;
            h.num_params = cfg_.num_params;
            h.worker_index = static_cast<std::uint32_t>(cfg_.index);
            h.num_workers = static_cast<std::uint32_t>(cfg_.num_workers);
            h.num_tables = static_cast<std::uint32_t>(cfg_.table_dims.size());
            if (!key.empty()) {
                h.params_address = reinterpret_cast<std::uintptr_t>(params_);
                h.grads_address = reinterpret_cast<std::uintptr_t>(grads_);
            }
            h.num_moving = static_cast<std::uint32_t>(moving.size() / 2);
            op.out = wire::encode(h, payload.size());
            post_and_send(op, payload.empty() ? nullptr : payload.data());
        }
        try {
            wait_ops(t.ops);
        } catch (...) {
            retire(tickets_.find(id));
            throw;
        }
        for (auto& op : t.ops) mapped_[op.ps] = wire::body<wire::welcome>(op.in).mapped != 0;
        tickets_.erase(id);
        if (!cfg_.share_memory) {
            log::info("gradients and parameters go through UCX messages with every PS (--shared-memory off)");
            return;
        }
        std::vector<std::string> shared, messages;
        for (std::size_t p = 0; p < partition_.size(); ++p) (mapped_[p] ? shared : messages).push_back(net_.peer_name(p));
        if (messages.empty())
            log::info("gradients and parameters go through shared memory with {}", fmt::join(shared, ", "));
        else if (shared.empty())
            log::info("gradients and parameters go through UCX messages with {}", fmt::join(messages, ", "));
        else
            log::info("gradients and parameters go through shared memory with {} and through UCX messages with {}",
                      fmt::join(shared, ", "), fmt::join(messages, ", "));
    }

    pending_ticket& take(ticket id)
    {
        auto node = spare_.empty() ? decltype(tickets_)::node_type() : std::move(spare_.back());
        if (!spare_.empty()) spare_.pop_back();
        if (node.empty()) {
            auto [it, inserted] = tickets_.try_emplace(id);
            it->second.ops.reserve(partition_.size() + 1);  // never reallocated while in flight
            return it->second;
        }
        node.key() = id;
        node.mapped().ops.clear();
        return tickets_.insert(std::move(node)).position->second;
    }

    // A finished ticket's storage is kept for the next one (no allocation per step).
    void recycle(std::map<ticket, pending_ticket>::iterator it) { spare_.push_back(tickets_.extract(it)); }

    // A ticket whose wait failed: the client is broken, and the ticket's
    // receives from other PS tasks may still be posted, into its frames and
    // params(): it is kept until the destructor takes them back.
    void retire(std::map<ticket, pending_ticket>::iterator it)
    {
        broken_ = true;
        failed_.push_back(tickets_.extract(it));
    }

    void complete(pending_ticket& t)
    {
        phase_clock<5>::scope timed(profile_, checking);
        wait_ops(t.ops);
        started_ = true;
        if (!t.ops.empty() && t.ops.front().out.kind == static_cast<std::uint16_t>(wire::kind::push)) profile_.step_done();
        for (auto& op : t.ops) {
            if (op.expected == wire::kind::rows) {
                const auto r = wire::body<wire::rows>(op.in);
                if (op.ps == 0) global_step_ = std::max(global_step_, r.step);
                const auto s = static_cast<wire::values_status>(r.status);
                if (s == wire::values_status::done || s == wire::values_status::stopped) done_ = true;
                if (s == wire::values_status::stopped) stopped_ = true;
                for (std::size_t k = 0; op.scatter_to && k < op.places.size(); ++k)
                    std::memcpy(op.scatter_to + std::size_t(op.places[k]) * op.dim, op.rows.data() + k * op.dim, op.dim * 4);
                continue;
            }
            if (op.expected != wire::kind::values) continue;
            const auto v = wire::body<wire::values>(op.in);
            base_step_[op.ps] = v.step;
            if (op.ps == 0) global_step_ = v.step;
            const auto s = static_cast<wire::values_status>(v.status);
            if (s == wire::values_status::done || s == wire::values_status::stopped) done_ = true;
            if (s == wire::values_status::stopped) stopped_ = true;
            if (v.restored > 0) restored_ = v.restored - 1;
        }
    }

    std::string worker_name(std::uint32_t index) const
    {
        return fmt::format("worker {}{}", index, index == 0 ? " (the chief)" : "");
    }

    // Waits for every operation's reply; throws pstrain::peer_error naming
    // the PS that was lost, did not answer, refused, or ended training.
    void wait_ops(std::vector<operation>& ops)
    {
        const auto deadline = clock::now() + cfg_.timeout;
        bool in_time = false;
        {
            const auto k = ops.empty() ? std::uint16_t(0) : ops.front().out.kind;
            const bool has_step = k == static_cast<std::uint16_t>(wire::kind::push) ||
                                  k == static_cast<std::uint16_t>(wire::kind::snapshot) ||
                                  k == static_cast<std::uint16_t>(wire::kind::restore);
            activity_recorder::scope waiting(activity_, reply_to(k), ops.empty() ? 0 : step_of(ops.front()), has_step);
            phase_clock<5>::scope timed(profile_, started_ ? phase::waiting : phase::starting);
            for (auto& op : ops) activity_.pending(op.ps, true);
            in_time = net_.wait_until(
                [&] {
                    bool all = true;
                    for (auto& op : ops) {
                        if (op.is_abort()) return true;
                        if (!op.pending()) {
                            activity_.pending(op.ps, false);
                            continue;
                        }
                        if (net_.failed(op.ps)) return true;
                        all = false;
                    }
                    return all;
                },
                deadline);
        }
        // A PS that ends training sends ABORT and then exits, so the failure
        // of its connection may be seen before the message: give a failed
        // peer's last message a moment, and let an ABORT (which names the
        // cause) win over the failure.
        const auto any_failed = [&] { return std::any_of(ops.begin(), ops.end(), [&](auto& op) { return !op.whole() && net_.failed(op.ps); }); };
        const auto any_abort = [&] { return std::any_of(ops.begin(), ops.end(), [](auto& op) { return op.is_abort(); }); };
        if (any_failed() && !any_abort()) net_.wait_until(any_abort, clock::now() + std::chrono::milliseconds(500));
        for (auto& op : ops) {
            if (!op.is_abort() || wire::check_envelope(op.in)) continue;
            const auto a = wire::body<wire::abort>(op.in);
            const auto who = net_.peer_name(op.ps);
            throw peer_error(who, fmt::format("{} ended the job: it lost {}", who,
                                              a.lost_is_ps ? fmt::format("ps {}", a.lost_index) : lost_worker(a.lost_index)));
        }
        for (auto& op : ops) {
            const auto who = net_.peer_name(op.ps);
            if (!op.whole()) {
                if (net_.failed(op.ps)) throw peer_error(who, fmt::format("lost {}: {}", who, net_.failure(op.ps)));
                if (!in_time && !op.recv.done())
                    throw peer_error(who, fmt::format("no answer from {} in {}s (--peer-timeout)", who, cfg_.timeout.count()));
                if (!op.recv.ok()) throw peer_error(who, fmt::format("lost {}: receive failed: {}", who, op.recv.failure()));
                if (!op.payload_recv.ok())
                    throw peer_error(who, fmt::format("lost {}: receive failed: {}", who, op.payload_recv.failure()));
                throw peer_error(who, fmt::format("lost {}: send failed: {}", who,
                                                  op.send.ok() ? op.payload_send.failure() : op.send.failure()));
            }
            if (auto bad = wire::check_envelope(op.in))
                throw peer_error(who, fmt::format("a malformed reply came from {}: {}", who, wire::describe(*bad)));
            if (op.in.kind == static_cast<std::uint16_t>(wire::kind::refusal))
                throw peer_error(who, fmt::format("{} refused this worker's {}: {}", who, wire::kind_name(op.out.kind),
                                                  wire::describe(wire::body<wire::refusal>(op.in))));
            if (op.in.kind != static_cast<std::uint16_t>(op.expected))
                throw peer_error(who, fmt::format("{} answered with a {} message where {} was expected: are all tasks running "
                                                  "the same pstrain?", who, wire::kind_name(op.in.kind),
                                                  wire::kind_name(static_cast<std::uint16_t>(op.expected))));
            check_reply(op, who);
        }
        activity_.progressed();
    }

    // The step a push (its gradient's), snapshot or restore request names.
    static std::uint64_t step_of(const operation& op)
    {
        if (op.out.kind == static_cast<std::uint16_t>(wire::kind::push)) return wire::body<wire::push>(op.out).step;
        if (op.out.kind == static_cast<std::uint16_t>(wire::kind::snapshot)) return wire::body<wire::snapshot>(op.out).step;
        if (op.out.kind == static_cast<std::uint16_t>(wire::kind::restore)) return wire::body<wire::restore>(op.out).step;
        return 0;
    }

    void check_reply(operation& op, const std::string& who)
    {
        if (op.expected == wire::kind::welcome) {
            const auto w = wire::body<wire::welcome>(op.in);
            if (w.range_begin != op.part.begin || w.range_end != op.part.end)
                throw peer_error(who, fmt::format("{} holds parameters [{}, {}) but this worker expects [{}, {}): do all tasks "
                                                  "run the same model?", who, w.range_begin, w.range_end, op.part.begin,
                                                  op.part.end));
            return;
        }
        if (op.expected == wire::kind::stats_reply) {
            const auto r = wire::body<wire::stats_reply>(op.in);
            const auto bytes = op.counters.size() * sizeof(wire::worker_counters);
            if (r.num_workers != op.counters.size() || op.in.payload_bytes != bytes || op.payload_recv.length() != bytes)
                throw peer_error(who, fmt::format("{} sent counters of {} workers in {} bytes where this job has {} workers: "
                                                  "are all tasks running the same pstrain?", who, r.num_workers,
                                                  op.in.payload_bytes, op.counters.size()));
            return;
        }
        if (op.expected == wire::kind::rows) {
            const auto r = wire::body<wire::rows>(op.in);
            const std::uint64_t count = op.scatter_to ? op.keys.size() : 0;
            const std::uint64_t bytes = count * op.dim * 4;
            if (r.table != op.table || r.count != count || op.in.payload_bytes != bytes ||
                (bytes > 0 && op.payload_recv.length() != bytes))
                throw peer_error(who, fmt::format("{} sent {} rows of table {} in {} bytes where this worker asked for {} rows of "
                                                  "table {}: are all tasks running the same pstrain?", who, r.count, r.table,
                                                  op.in.payload_bytes, count, op.table));
            return;
        }
        if (op.expected != wire::kind::values) return;
        const auto v = wire::body<wire::values>(op.in);
        if (v.range_begin != op.part.begin || v.range_end != op.part.end)
            throw peer_error(who, fmt::format("{} sent values of [{}, {}) but this worker asked for [{}, {}): do all tasks run "
                                              "the same model?", who, v.range_begin, v.range_end, op.part.begin, op.part.end));
        const std::uint64_t expected_bytes = op.shared ? 0 : wire::float_bytes(op.part.size());
        if ((v.in_shared_memory != 0) != op.shared || op.in.payload_bytes != expected_bytes ||
            (expected_bytes > 0 && op.payload_recv.length() != expected_bytes))
            throw peer_error(who, fmt::format("{} sent {} bytes of values{} where this worker expects {}: are all tasks running "
                                              "the same pstrain?", who, op.in.payload_bytes,
                                              v.in_shared_memory ? " in shared memory" : "", expected_bytes));
    }

    std::string lost_worker(std::uint32_t index) const
    {
        if (index < cfg_.worker_names.size()) return cfg_.worker_names[index];
        return worker_name(index);
    }

    std::map<ticket, pending_ticket> tickets_;
    std::vector<std::map<ticket, pending_ticket>::node_type> spare_, failed_;
    ticket next_ = 1;
};

client::client(transport& net, client_config config) : impl_(std::make_unique<impl>(net, std::move(config))) {}
client::~client() = default;

std::span<float> client::params() const { return impl_->params(); }
std::span<float> client::grads() const { return impl_->grads(); }
std::span<float> client::buffers() const { return impl_->buffers(); }
shard_range client::everything() const { return impl_->everything(); }
shard_range client::key(std::size_t k) const { return impl_->key(k); }
const std::vector<shard_range>& client::partition() const { return impl_->partition_; }
ticket client::init() { return impl_->init(); }
ticket client::restore(std::uint64_t step) { return impl_->restore(step); }
ticket client::pull(shard_range range) { return impl_->pull(range); }
ticket client::push(shard_range range, std::uint64_t position) { return impl_->push(range, position); }
ticket client::pull_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<float> out)
{
    return impl_->pull_rows(table, keys, out);
}
ticket client::lookup_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<float> out)
{
    return impl_->lookup_rows(table, keys, out);
}
ticket client::push_rows(std::size_t table, std::span<const std::uint64_t> keys, std::span<const float> grads)
{
    return impl_->push_rows(table, keys, grads);
}
void client::wait(ticket t) { impl_->wait(t); }
bool client::test(ticket t) { return impl_->test(t); }
std::vector<snapshot_result> client::snapshot(std::uint64_t step) { return impl_->snapshot(step); }
std::vector<ps_stats> client::stats() { return impl_->stats(); }
void client::shutdown(bool stop) { impl_->shutdown(stop); }
std::uint64_t client::global_step() const { return impl_->global_step_; }
bool client::done() const { return impl_->done_; }
bool client::stopped() const { return impl_->stopped_; }
std::optional<std::uint64_t> client::restored_step() const { return impl_->restored_; }
bool client::mapped(std::size_t p) const { return impl_->mapped_.at(p) != 0; }
ps::activity client::activity() const { return impl_->activity_.snapshot(); }
time_profile client::profile() const { return impl_->profile_.snapshot(); }

}  // namespace pstrain::ps
