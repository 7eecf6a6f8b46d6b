#include "library/ps/protocol.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pstrain::ps::wire {

const char* kind_name(std::uint16_t k)
{
    switch (static_cast<kind>(k)) {
    case kind::hello: return "hello";
    case kind::welcome: return "welcome";
    case kind::init: return "init";
    case kind::restore: return "restore";
    case kind::pull: return "pull";
    case kind::push: return "push";
    case kind::values: return "values";
    case kind::snapshot: return "snapshot";
    case kind::snapshot_done: return "snapshot_done";
    case kind::shutdown: return "shutdown";
    case kind::abort: return "abort";
    case kind::refusal: return "refusal";
    case kind::stats: return "stats";
    case kind::stats_reply: return "stats_reply";
    case kind::sparse_pull: return "sparse_pull";
    case kind::sparse_push: return "sparse_push";
    case kind::rows: return "rows";
    }
    return "unknown";
}

std::optional<refusal> check_envelope(const frame& f)
{
    if (f.magic != magic) return refusal_of(refusal_code::bad_frame);
    if (f.version != version) {
        auto r = refusal_of(refusal_code::bad_version);
        r.frame_version = f.version;
        return r;
    }
    if (f.kind < static_cast<std::uint16_t>(kind::hello) || f.kind > static_cast<std::uint16_t>(kind::rows))
        return refusal_of(refusal_code::bad_kind, f.kind);
    return std::nullopt;
}

std::vector<std::uint8_t> hello_payload(std::span<const std::uint8_t> rkey, std::span<const shard_range> moving)
{
    std::vector<std::uint8_t> out(rkey.begin(), rkey.end());
    out.resize(rkey.size() + moving.size() * moving_range_bytes);
    auto* at = out.data() + rkey.size();
    for (const auto& r : moving) {
        std::memcpy(at, &r.begin, sizeof r.begin);
        std::memcpy(at + sizeof r.begin, &r.end, sizeof r.end);
        at += moving_range_bytes;
    }
    return out;
}

std::vector<shard_range> hello_moving_ranges(const hello& h, std::span<const std::uint8_t> payload)
{
    std::vector<shard_range> moving(h.num_moving);
    const auto* at = payload.data() + (payload.size() - hello_moving_bytes(h));
    for (auto& r : moving) {
        std::memcpy(&r.begin, at, sizeof r.begin);
        std::memcpy(&r.end, at + sizeof r.begin, sizeof r.end);
        at += moving_range_bytes;
    }
    return moving;
}

void encode_sparse_push(std::span<const std::uint64_t> keys, std::span<const float> grads,
                        std::span<const std::uint32_t> places, std::uint32_t dim, std::vector<std::uint8_t>& out)
{
    out.resize(sparse_push_bytes(places.size(), dim));
    auto* key_at = out.data();
    auto* row_at = out.data() + sparse_pull_bytes(places.size());
    const std::size_t row_bytes = sparse_rows_bytes(1, dim);
    for (const auto place : places) {
        std::memcpy(key_at, &keys[place], sparse_key_bytes);
        std::memcpy(row_at, grads.data() + std::size_t(place) * dim, row_bytes);
        key_at += sparse_key_bytes;
        row_at += row_bytes;
    }
}

void decode_sparse_keys(const void* payload, std::uint64_t count, std::vector<std::uint64_t>& out)
{
    out.resize(count);
    if (count > 0) std::memcpy(out.data(), payload, sparse_pull_bytes(count));
}

void scatter_rows(std::span<const float> rows, std::span<const std::uint32_t> places, std::uint32_t dim, float* out)
{
    for (std::size_t k = 0; k < places.size(); ++k)
        std::copy_n(rows.data() + k * dim, dim, out + std::size_t(places[k]) * dim);
}

std::string describe(const refusal& r)
{
    switch (static_cast<refusal_code>(r.code)) {
    case refusal_code::bad_frame:
        return "a message without pstrain's magic number: is another program talking to this PS?";
    case refusal_code::bad_version:
        return fmt::format("protocol version {} where this PS speaks {}: run the same pstrain version in every task",
                           r.frame_version, version);
    case refusal_code::bad_kind:
        return fmt::format("a message of unknown kind {}: run the same pstrain version in every task", r.detail_begin);
    case refusal_code::bad_range:
        return fmt::format("the range [{}, {}) is not inside this PS's shard: do all tasks build the same model?",
                           r.detail_begin, r.detail_end);
    case refusal_code::bad_length:
        return fmt::format("a payload of {} bytes where the message says {}", r.detail_end, r.detail_begin);
    case refusal_code::not_mapped: return "an exchange through shared memory that this PS has not mapped";
    case refusal_code::model_mismatch:
        return fmt::format("a model of {} parameters where the chief's has {}: do all tasks build the same model?",
                           r.detail_begin, r.detail_end);
    case refusal_code::needs_whole_shard:
        return "sync training aggregates whole-shard gradients: push the whole shard (every tensor of it) together";
    case refusal_code::wrong_peer:
        return fmt::format("a hello from worker {} of {} on the connection of worker {}: is a task of another job step "
                           "talking to this PS?",
                           r.detail_begin, r.detail_end, r.peer_index);
    case refusal_code::bad_buffers:
        return fmt::format(
            "exchange buffers at {:#x} and {:#x} that are not inside the memory its rkey maps (the PS's log "
            "says which bytes): is another program talking to this PS?",
            r.detail_begin, r.detail_end);
    case refusal_code::bad_table:
        return fmt::format("embedding table {} where this PS has {}: do all tasks build the same model?",
                           r.detail_begin, r.detail_end);
    case refusal_code::too_many_keys:
        return fmt::format("a sparse transfer of {} keys (at most {}): run the same pstrain version in every task",
                           r.detail_begin, r.detail_end);
    case refusal_code::rows_without_step:
        return fmt::format(
            "{} row updates held for one step (at most {}): in sync mode async_push() the dense gradient after "
            "each batch's async_push_rows()",
            r.detail_begin, r.detail_end);
    case refusal_code::pushed_twice:
        return fmt::format("a second push to sync step {} before the first was answered: wait() on a push's ticket "
                           "before the next push",
                           r.detail_begin);
    case refusal_code::tables_mismatch:
        return fmt::format("a model with {} embedding tables where this PS has {}: do all tasks build the same model?",
                           r.detail_begin, r.detail_end);
    case refusal_code::no_hello: return "a request before hello: the first message on a connection says who sends it";
    case refusal_code::not_chief: return "only the chief (worker 0) initialises, restores, snapshots and ends training";
    }
    return fmt::format("refusal code {}", r.code);
}

}  // namespace pstrain::ps::wire
