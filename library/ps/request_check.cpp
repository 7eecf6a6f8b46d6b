#include "library/ps/request_check.hpp"

namespace pstrain::ps {

namespace {

using wire::refusal_code;
using wire::refusal_of;
using maybe_refusal = std::optional<wire::refusal>;

maybe_refusal payload_is(const wire::frame& f, std::uint64_t bytes)
{
    if (f.payload_bytes == bytes) return std::nullopt;
    return refusal_of(refusal_code::bad_length, bytes, f.payload_bytes);
}

maybe_refusal range_inside(std::uint64_t begin, std::uint64_t end, const request_context& ctx)
{
    if (wire::range_inside(begin, end, ctx.range)) return std::nullopt;
    return refusal_of(refusal_code::bad_range, begin, end);
}

maybe_refusal shared_mapped(std::uint32_t in_shared_memory, const request_context& ctx)
{
    if (!in_shared_memory || ctx.mapped) return std::nullopt;
    return refusal_of(refusal_code::not_mapped);
}

maybe_refusal from_chief(const request_context& ctx)
{
    if (ctx.worker == 0) return std::nullopt;
    return refusal_of(refusal_code::not_chief);
}

maybe_refusal sparse_request(std::uint32_t table, std::uint64_t count, const request_context& ctx)
{
    if (table >= ctx.table_dims.size()) return refusal_of(refusal_code::bad_table, table, ctx.table_dims.size());
    if (count > wire::max_sparse_keys) return refusal_of(refusal_code::too_many_keys, count, wire::max_sparse_keys);
    return std::nullopt;
}

// The hello's model must be the chief's, its place in the job the connection's.
maybe_refusal hello(const wire::hello& h, const request_context& ctx)
{
    if (h.num_params != ctx.num_params) return refusal_of(refusal_code::model_mismatch, h.num_params, ctx.num_params);
    if (h.num_tables != ctx.table_dims.size())
        return refusal_of(refusal_code::tables_mismatch, h.num_tables, ctx.table_dims.size());
    if (h.worker_index != ctx.worker || h.num_workers != ctx.num_workers) {
        // Another task's place, or another job's size: its gradients would count as someone else's.
        auto r = refusal_of(refusal_code::wrong_peer, h.worker_index, h.num_workers);
        r.peer_index = static_cast<std::uint32_t>(ctx.worker);
        return r;
    }
    if (h.precision != static_cast<std::uint32_t>(ctx.precision)) {
        // Its pushes would be read as numbers of another width.
        auto r = refusal_of(refusal_code::precision_mismatch, h.precision, static_cast<std::uint32_t>(ctx.precision));
        r.peer_index = static_cast<std::uint32_t>(ctx.worker);
        return r;
    }
    return std::nullopt;
}

maybe_refusal push(const wire::frame& f, const request_context& ctx)
{
    const auto m = wire::body<wire::push>(f);
    if (auto r = range_inside(m.range_begin, m.range_end, ctx)) return r;
    if (auto r = shared_mapped(m.in_shared_memory, ctx)) return r;
    if (auto r =
            payload_is(f, m.in_shared_memory ? 0 : wire::numbers_bytes(m.range_end - m.range_begin, ctx.precision)))
        return r;
    if (ctx.sync_pushes) {
        const shard_range part{m.range_begin, m.range_end};
        if (part != ctx.range && !ctx.buckets)
            return refusal_of(refusal_code::needs_whole_shard, m.range_begin, m.range_end);
        if (m.skip && m.step == ctx.step && ctx.step_applied)
            return refusal_of(refusal_code::bucket_skips, m.range_begin, m.range_end);
        // A bucket that overlaps another of the step without being it: the
        // workers bucket the gradient differently, and no step could complete.
        if (m.step == ctx.step)
            for (const auto& b : ctx.step_buckets)
                if (b != part && b.begin < part.end && part.begin < b.end) {
                    auto r = refusal_of(refusal_code::bucket_mismatch, m.range_begin, m.range_end);
                    r.other_begin = b.begin;
                    r.other_end = b.end;
                    return r;
                }
    }
    // One gradient per worker and sync step: a second would count twice in the mean.
    if (ctx.pushed_to_step && m.step == *ctx.pushed_to_step) return refusal_of(refusal_code::pushed_twice, m.step, 0);
    return std::nullopt;
}

maybe_refusal serving(const wire::frame& f, const request_context& ctx)
{
    switch (static_cast<wire::kind>(f.kind)) {
    case wire::kind::hello: return hello(wire::body<wire::hello>(f), ctx);
    case wire::kind::pull: {
        const auto m = wire::body<wire::pull>(f);
        if (auto r = range_inside(m.range_begin, m.range_end, ctx)) return r;
        if (auto r = payload_is(f, 0)) return r;
        return shared_mapped(m.in_shared_memory, ctx);
    }
    case wire::kind::push: return push(f, ctx);
    case wire::kind::snapshot:
    case wire::kind::shutdown:
    case wire::kind::rollback:
        if (auto r = from_chief(ctx)) return r;
        return payload_is(f, 0);
    case wire::kind::stats: return payload_is(f, 0);
    case wire::kind::leave:
        // The chief ends the job with shutdown instead.
        if (ctx.worker == 0) return refusal_of(refusal_code::bad_kind, f.kind);
        return payload_is(f, 0);
    case wire::kind::sparse_pull: {
        const auto m = wire::body<wire::sparse_pull>(f);
        if (auto r = sparse_request(m.table, m.count, ctx)) return r;
        return payload_is(f, wire::sparse_pull_bytes(m.count));
    }
    case wire::kind::sparse_push: {
        const auto m = wire::body<wire::sparse_push>(f);
        if (auto r = sparse_request(m.table, m.count, ctx)) return r;
        return payload_is(f, wire::sparse_push_bytes(m.count, ctx.table_dims[m.table], ctx.precision));
    }
    case wire::kind::init:
    case wire::kind::restore:
        // A repeated initialisation (the chief restarted its connection): answered with the values.
        return from_chief(ctx);
    default: return refusal_of(refusal_code::bad_kind, f.kind);
    }
}

// The chief's initialisation: of the whole shard, all of its values.
maybe_refusal chief_init(const wire::frame& f, std::optional<std::uint64_t> received, const request_context& ctx)
{
    if (f.kind == static_cast<std::uint16_t>(wire::kind::restore)) return std::nullopt;
    if (f.kind != static_cast<std::uint16_t>(wire::kind::init)) return refusal_of(refusal_code::bad_kind, f.kind);
    const auto m = wire::body<wire::init>(f);
    if (m.range_begin != ctx.range.begin || m.range_end != ctx.range.end)
        return refusal_of(refusal_code::bad_range, m.range_begin, m.range_end);
    if (auto r = payload_is(f, wire::dense_bytes(ctx.range))) return r;
    if (received != f.payload_bytes) return refusal_of(refusal_code::bad_length, f.payload_bytes, received.value_or(0));
    return std::nullopt;
}

}  // namespace

std::optional<wire::refusal> check_request(const wire::frame& f, std::optional<std::uint64_t> received,
                                           const request_context& ctx)
{
    using stage = request_context::stage;
    // A payload that is not what the frame says: the next message's must not be taken for it.
    if (ctx.at == stage::serving && received && f.payload_bytes > 0 && *received != f.payload_bytes)
        return refusal_of(refusal_code::bad_length, f.payload_bytes, *received);
    if (auto bad = wire::check_envelope(f)) return bad;
    const bool hello = f.kind == static_cast<std::uint16_t>(wire::kind::hello);
    if (ctx.at == stage::chief_hello) return hello ? std::nullopt : std::optional(refusal_of(refusal_code::no_hello));
    if (ctx.at == stage::chief_init) return chief_init(f, received, ctx);
    if (!ctx.greeted && !hello) return refusal_of(refusal_code::no_hello);
    return serving(f, ctx);
}

}  // namespace pstrain::ps
