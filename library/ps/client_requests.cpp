#include "library/ps/client_requests.hpp"

#include "pstrain/error.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pstrain::ps {

client_config chiefs_config(client_config c)
{
    if (c.index != 0)
        throw error(fmt::format("worker {} made a chief_client: only worker 0, the chief, starts, saves and ends "
                                "the job (make a client)",
                                c.index));
    return c;
}

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

std::size_t ps_count(const transport& net, const client_config& c)
{
    if (c.num_ps < 0 || static_cast<std::size_t>(c.num_ps) > net.num_peers())
        throw error(fmt::format("the client was told of {} PS tasks and its transport has {} peers", c.num_ps,
                                net.num_peers()));
    return c.num_ps == 0 ? net.num_peers() : static_cast<std::size_t>(c.num_ps);
}

void check_range(shard_range range, std::uint64_t num_params)
{
    if (range.begin > range.end || range.end > num_params)
        throw error(
            fmt::format("range [{}, {}) is outside the model's {} parameters", range.begin, range.end, num_params));
}

std::uint32_t check_rows(const client_config& c, const char* verb, std::size_t table,
                         std::span<const std::uint64_t> keys, std::size_t floats, const char* of)
{
    if (table >= c.table_dims.size())
        throw error(
            fmt::format("embedding table {} does not exist: the client was given {}", table, c.table_dims.size()));
    const auto dim = c.table_dims[table];
    if (floats != keys.size() * dim)
        throw error(fmt::format("{}: {} keys of table {} (dim {}) need {} floats of {}, not {}", verb, keys.size(),
                                table, dim, keys.size() * dim, of, floats));
    return dim;
}

bool asks_whole_model(wire::kind kind)
{
    return kind == wire::kind::hello || kind == wire::kind::init || kind == wire::kind::restore ||
           kind == wire::kind::snapshot || kind == wire::kind::stats || kind == wire::kind::rollback;
}

wire::kind reply_kind(wire::kind kind)
{
    return kind == wire::kind::hello      ? wire::kind::welcome
           : kind == wire::kind::snapshot ? wire::kind::snapshot_done
           : kind == wire::kind::stats    ? wire::kind::stats_reply
                                          : wire::kind::values;
}

const void* encode_request(wire::kind kind, operation& op, const request_source& from, std::uint64_t step,
                           std::uint64_t position, push_marks marks)
{
    const auto& part = op.part;
    const std::uint32_t shared = op.shared ? 1 : 0;
    switch (kind) {
    case wire::kind::hello:
        op.out = wire::encode(from.hello->head, from.hello->payload.size());
        return from.hello->payload.empty() ? nullptr : from.hello->payload.data();
    case wire::kind::init:
        op.out = wire::encode(wire::init{part.begin, part.end}, wire::dense_bytes(part));
        return from.params + part.begin;
    case wire::kind::restore: op.out = wire::encode(wire::restore{step}); return nullptr;
    case wire::kind::rollback: op.out = wire::encode(wire::rollback{step}); return nullptr;
    case wire::kind::pull: op.out = wire::encode(wire::pull{part.begin, part.end, shared}); return nullptr;
    case wire::kind::push:
        op.out = wire::encode(wire::push{from.base_step[op.ps], part.begin, part.end, position, shared,
                                         marks.skip ? 1u : 0u, marks.bucket ? 1u : 0u},
                              op.shared ? 0 : wire::dense_bytes(part, from.precision));
        if (op.shared) return nullptr;
        if (from.precision == wire_precision::fp32) return from.grads + part.begin;
        wire::encode_numbers(from.grads + part.begin, part.size(), from.precision, op.bytes);
        return op.bytes.data();
    case wire::kind::snapshot: op.out = wire::encode(wire::snapshot{step}); return nullptr;
    case wire::kind::stats: op.out = wire::encode(wire::stats{}); return nullptr;
    default: throw error("internal error: the client cannot issue this request");
    }
}

hello_message hello_of(const client_config& c, const float* params, const float* grads,
                       const std::vector<std::uint8_t>& key, std::span<const shard_range> moving)
{
    // The chief tells every PS which ranges hold moving averages, after the
    // rkey, and the training settings, when it says them.
    if (c.index != 0) moving = {};
    const auto settings = c.index == 0 && c.settings ? wire::encode_settings(*c.settings) : std::vector<std::uint8_t>();
    hello_message m{{}, wire::hello_payload(key, moving, settings)};
    auto& h = m.head;
    h.num_params = c.num_params;
    h.worker_index = static_cast<std::uint32_t>(c.index);
    h.num_workers = static_cast<std::uint32_t>(c.num_workers);
    h.num_tables = static_cast<std::uint32_t>(c.table_dims.size());
    if (!key.empty()) {
        h.params_address = reinterpret_cast<std::uintptr_t>(params);
        h.grads_address = reinterpret_cast<std::uintptr_t>(grads);
    }
    h.num_moving = static_cast<std::uint32_t>(moving.size());
    h.settings_bytes = static_cast<std::uint32_t>(settings.size());
    h.precision = static_cast<std::uint32_t>(c.precision);
    return m;
}

std::string exchange_paths(bool share_memory, const std::vector<std::string>& shared,
                           const std::vector<std::string>& messages)
{
    if (!share_memory) return "gradients and parameters go through UCX messages with every PS (--shared-memory off)";
    if (messages.empty())
        return fmt::format("gradients and parameters go through shared memory with {}", fmt::join(shared, ", "));
    if (shared.empty())
        return fmt::format("gradients and parameters go through UCX messages with {}", fmt::join(messages, ", "));
    return fmt::format("gradients and parameters go through shared memory with {} and through UCX messages with {}",
                       fmt::join(shared, ", "), fmt::join(messages, ", "));
}

snapshot_result snapshot_result_of(const wire::snapshot_done& d)
{
    snapshot_result r;
    r.outcome = d.status == static_cast<std::uint32_t>(wire::snapshot_status::taken) ? snapshot_result::status::taken
                : d.status == static_cast<std::uint32_t>(wire::snapshot_status::moved_on)
                    ? snapshot_result::status::moved_on
                    : snapshot_result::status::failed;
    r.step = d.step;
    r.bytes = d.bytes;
    r.checksum = d.checksum;
    return r;
}

ps_stats stats_of(const wire::stats_reply& r, const std::vector<wire::worker_counters>& counters)
{
    ps_stats s;
    s.step = r.step;
    s.bytes_received = r.bytes_received;
    s.bytes_sent = r.bytes_sent;
    for (const auto& c : counters) s.workers.push_back({c.gradients, c.stale, c.staleness_sum, c.staleness_max});
    return s;
}

}  // namespace pstrain::ps
