#include "library/ps/exchange.hpp"

#include "pstrain/error.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pstrain::ps {

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

std::uint64_t step_of(const operation& op)
{
    if (op.out.kind == static_cast<std::uint16_t>(wire::kind::push)) return wire::body<wire::push>(op.out).step;
    if (op.out.kind == static_cast<std::uint16_t>(wire::kind::snapshot)) return wire::body<wire::snapshot>(op.out).step;
    if (op.out.kind == static_cast<std::uint16_t>(wire::kind::restore)) return wire::body<wire::restore>(op.out).step;
    return 0;
}

exchange::exchange(transport& net, std::size_t num_ps, float* values, std::chrono::seconds timeout,
                   std::vector<std::string> worker_names, activity_recorder& activity, wire_precision precision)
    : net_(net), values_(values), timeout_(timeout), worker_names_(std::move(worker_names)), activity_(activity),
      precision_(precision), route_(num_ps)
{
    for (std::size_t p = 0; p < route_.size(); ++p) route_[p] = p;
}

void exchange::post_and_send(operation& op, const void* payload)
{
    op.recv = net_.recv(peer(op), channel::control, &op.in, sizeof op.in);
    // bf16: received into numbers_in, widened once checked.
    const bool aside = wire::reply_precision(op.out.kind, precision_) != wire_precision::fp32;
    if (op.expected == wire::kind::rows && !op.rows.empty()) {
        if (aside) op.numbers_in.resize(wire::numbers_bytes(op.rows.size(), precision_));
        op.payload_recv = aside ? net_.recv(peer(op), channel::payload, op.numbers_in.data(), op.numbers_in.size())
                                : net_.recv(peer(op), channel::payload, op.rows.data(), op.rows.size() * sizeof(float));
    }
    if (op.expected == wire::kind::values && !op.shared) {
        if (aside) op.numbers_in.resize(wire::dense_bytes(op.part, precision_));
        op.payload_recv =
            aside ? net_.recv(peer(op), channel::payload, op.numbers_in.data(), op.numbers_in.size())
                  : net_.recv(peer(op), channel::payload, values_ + op.part.begin, wire::dense_bytes(op.part));
    }
    if (op.expected == wire::kind::stats_reply)
        op.payload_recv = net_.recv(peer(op), channel::payload, op.counters.data(),
                                    op.counters.size() * sizeof(wire::worker_counters));
    if (payload) op.payload_send = net_.send(peer(op), channel::payload, payload, op.out.payload_bytes);
    op.send = net_.send(peer(op), channel::control, &op.out, sizeof op.out);
}

bool exchange::test(std::vector<operation>& ops)
{
    bool ready = true;
    net_.wait_until(
        [&] {
            for (auto& op : ops)
                if (op.pending() && !op.is_abort() && !net_.failed(peer(op))) ready = false;
            return true;
        },
        clock::now());
    return ready;
}

bool exchange::wait_for(std::span<const std::size_t> peers, const char* what, const std::function<bool()>& pred,
                        std::chrono::seconds within)
{
    const auto deadline = clock::now() + within;
    if (!what) return net_.wait_until(pred, deadline);
    activity_recorder::scope waiting(activity_, what);
    for (const auto p : peers) activity_.pending(p, true);
    return net_.wait_until(pred, deadline);
}

void exchange::wait(std::vector<operation>& ops, client_clock& profile, client_phase phase)
{
    const auto deadline = clock::now() + timeout_;
    bool in_time = false;
    {
        const auto k = ops.empty() ? std::uint16_t(0) : ops.front().out.kind;
        const bool has_step = k == static_cast<std::uint16_t>(wire::kind::push) ||
                              k == static_cast<std::uint16_t>(wire::kind::snapshot) ||
                              k == static_cast<std::uint16_t>(wire::kind::restore);
        activity_recorder::scope waiting(activity_, reply_to(k), ops.empty() ? 0 : step_of(ops.front()), has_step);
        client_clock::scope timed(profile, phase);
        for (auto& op : ops) activity_.pending(peer(op), true);
        in_time = net_.wait_until(
            [&] {
                bool all = true;
                for (auto& op : ops) {
                    if (op.is_abort()) return true;
                    if (!op.pending()) {
                        activity_.pending(peer(op), false);
                        if (!op.whole()) return true;  // it failed: the wait throws
                        continue;
                    }
                    if (net_.failed(peer(op))) return true;
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
    const auto any_failed = [&] {
        return std::any_of(ops.begin(), ops.end(), [&](auto& op) { return !op.whole() && net_.failed(peer(op)); });
    };
    const auto any_abort = [&] { return std::any_of(ops.begin(), ops.end(), [](auto& op) { return op.is_abort(); }); };
    if (any_failed() && !any_abort()) net_.wait_until(any_abort, clock::now() + std::chrono::milliseconds(500));
    for (auto& op : ops) {
        if (!op.is_abort() || wire::check_envelope(op.in)) continue;
        const auto a = wire::body<wire::abort>(op.in);
        const auto who = net_.peer_name(peer(op));
        throw peer_error(who,
                         fmt::format("{} ended the job: it lost {}", who,
                                     a.lost_is_ps ? fmt::format("ps {}", a.lost_index) : lost_worker(a.lost_index)));
    }
    // A wait ends as soon as one PS is lost, while the others' replies may
    // still be on their way: blame the operation that failed, and the first
    // one still waiting only when none did (a timeout).
    const auto failed = std::find_if(ops.begin(), ops.end(), [&](auto& op) { return !op.whole() && has_failed(op); });
    if (failed != ops.end()) throw_incomplete(*failed, net_.peer_name(peer(*failed)), in_time);
    for (auto& op : ops) {
        const auto who = net_.peer_name(peer(op));
        if (!op.whole()) throw_incomplete(op, who, in_time);
        if (auto bad = wire::check_envelope(op.in))
            throw peer_error(who, fmt::format("a malformed reply came from {}: {}", who, wire::describe(*bad)));
        if (op.in.kind == static_cast<std::uint16_t>(wire::kind::refusal))
            throw peer_error(who, fmt::format("{} refused this worker's {}: {}", who, wire::kind_name(op.out.kind),
                                              wire::describe(wire::body<wire::refusal>(op.in))));
        if (op.in.kind != static_cast<std::uint16_t>(op.expected))
            throw peer_error(who,
                             fmt::format("{} answered with a {} message where {} was expected: are all tasks running "
                                         "the same pstrain?",
                                         who, wire::kind_name(op.in.kind),
                                         wire::kind_name(static_cast<std::uint16_t>(op.expected))));
        check_reply(op, who);
        widen_reply(op);
    }
    activity_.progressed();
}

// A bf16 reply's numbers, checked, widened where they go.
void exchange::widen_reply(operation& op) const
{
    if (wire::reply_precision(op.out.kind, precision_) == wire_precision::fp32 || op.numbers_in.empty()) return;
    if (op.expected == wire::kind::rows)
        wire::decode_numbers(op.numbers_in.data(), op.rows.size(), precision_, op.rows.data());
    else if (op.expected == wire::kind::values && !op.shared)
        wire::decode_numbers(op.numbers_in.data(), op.part.size(), precision_, values_ + op.part.begin);
}

namespace {

bool ended_in_error(transfer& t) { return t.complete() && !t.ok(); }

}  // namespace

// True when one of `op`'s transfers ended in an error, or its PS is lost.
bool exchange::has_failed(operation& op) const
{
    return net_.failed(peer(op)) || ended_in_error(op.recv) || ended_in_error(op.payload_recv) ||
           ended_in_error(op.send) || ended_in_error(op.payload_send);
}

void exchange::throw_incomplete(operation& op, const std::string& who, bool in_time) const
{
    if (net_.failed(peer(op))) throw peer_error(who, fmt::format("lost {}: {}", who, net_.failure(peer(op))));
    if (ended_in_error(op.recv))
        throw peer_error(who, fmt::format("lost {}: receive failed: {}", who, op.recv.failure()));
    if (ended_in_error(op.payload_recv))
        throw peer_error(who, fmt::format("lost {}: receive failed: {}", who, op.payload_recv.failure()));
    if (ended_in_error(op.send)) throw peer_error(who, fmt::format("lost {}: send failed: {}", who, op.send.failure()));
    if (ended_in_error(op.payload_send))
        throw peer_error(who, fmt::format("lost {}: send failed: {}", who, op.payload_send.failure()));
    // Nothing failed: its answer has not come (yet).
    throw peer_error(who, in_time ? fmt::format("no answer from {}: its request was still in flight", who)
                                  : fmt::format("no answer from {} in {}s (--peer-timeout)", who, timeout_.count()));
}

void exchange::check_reply(operation& op, const std::string& who) const
{
    if (op.expected == wire::kind::welcome) {
        const auto w = wire::body<wire::welcome>(op.in);
        if (w.range_begin != op.part.begin || w.range_end != op.part.end)
            throw peer_error(who,
                             fmt::format("{} holds parameters [{}, {}) but this worker expects [{}, {}): do all tasks "
                                         "run the same model?",
                                         who, w.range_begin, w.range_end, op.part.begin, op.part.end));
        return;
    }
    if (op.expected == wire::kind::stats_reply) {
        const auto r = wire::body<wire::stats_reply>(op.in);
        const auto bytes = op.counters.size() * sizeof(wire::worker_counters);
        if (r.num_workers != op.counters.size() || op.in.payload_bytes != bytes || op.payload_recv.length() != bytes)
            throw peer_error(who,
                             fmt::format("{} sent counters of {} workers in {} bytes where this job has {} workers: "
                                         "are all tasks running the same pstrain?",
                                         who, r.num_workers, op.in.payload_bytes, op.counters.size()));
        return;
    }
    if (op.expected == wire::kind::rows) {
        const auto r = wire::body<wire::rows>(op.in);
        const std::uint64_t count = op.scatter_to ? op.keys.size() : 0;
        const std::uint64_t bytes = wire::sparse_rows_bytes(count, op.dim, precision_);
        if (r.table != op.table || r.count != count || op.in.payload_bytes != bytes ||
            (bytes > 0 && op.payload_recv.length() != bytes))
            throw peer_error(
                who, fmt::format("{} sent {} rows of table {} in {} bytes where this worker asked for {} rows of "
                                 "table {}: are all tasks running the same pstrain?",
                                 who, r.count, r.table, op.in.payload_bytes, count, op.table));
        return;
    }
    if (op.expected != wire::kind::values) return;
    const auto v = wire::body<wire::values>(op.in);
    if (v.range_begin != op.part.begin || v.range_end != op.part.end)
        throw peer_error(who,
                         fmt::format("{} sent values of [{}, {}) but this worker asked for [{}, {}): do all tasks run "
                                     "the same model?",
                                     who, v.range_begin, v.range_end, op.part.begin, op.part.end));
    const std::uint64_t expected_bytes =
        op.shared ? 0 : wire::dense_bytes(op.part, wire::reply_precision(op.out.kind, precision_));
    if ((v.in_shared_memory != 0) != op.shared || op.in.payload_bytes != expected_bytes ||
        (expected_bytes > 0 && op.payload_recv.length() != expected_bytes))
        throw peer_error(
            who, fmt::format("{} sent {} bytes of values{} where this worker expects {}: are all tasks running "
                             "the same pstrain?",
                             who, op.in.payload_bytes, v.in_shared_memory ? " in shared memory" : "", expected_bytes));
}

std::string exchange::lost_worker(std::uint32_t index) const
{
    if (index < worker_names_.size()) return worker_names_[index];
    return fmt::format("worker {}{}", index, index == 0 ? " (the chief)" : "");
}

}  // namespace pstrain::ps
