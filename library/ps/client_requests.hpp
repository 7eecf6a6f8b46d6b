// What a client asks, as small pure functions: its config completed and
// checked, a call's arguments checked, a dense request's frame and the
// hello encoded, and the replies to snapshot and stats read into the
// public results.  No I/O (the client sends and waits through exchange.hpp),
// as request_check.hpp is on the server's side.
//
// Any thread: each touches only what it is given.
#pragma once

#include "pstrain/client.hpp"
#include "pstrain/transport.hpp"
#include "library/ps/exchange.hpp"
#include "library/ps/protocol.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pstrain::ps {

// ---- the config and the arguments (each throws pstrain::error naming the fix)

// The chief's: worker 0's.
client_config chiefs_config(client_config c);
// The tables' dims from the settings when only they name them; the two
// must agree when both do.
client_config with_table_dims(client_config c);
// The job's PS tasks among the transport's peers (the rest are spares).
std::size_t ps_count(const transport& net, const client_config& c);
// `range` lies in the model's num_params.
void check_range(shard_range range, std::uint64_t num_params);
// `floats` (the caller's output or gradient of `verb`) holds one row per
// key of table `table`; returns its dim.
std::uint32_t check_rows(const client_config& c, const char* verb, std::size_t table,
                         std::span<const std::uint64_t> keys, std::size_t floats, const char* of);

// ---- dense requests

// hello, init, restore, snapshot, stats and rollback ask each PS for its whole shard.
bool asks_whole_model(wire::kind kind);
// The kind of the reply that a request of `kind` waits for.
wire::kind reply_kind(wire::kind kind);

// A client's hello to every PS, and its payload: the rkey of its buffers
// `params` and `grads` (offered when `key` is not empty), then, from the
// chief, the `moving` average ranges and the settings of its config.
struct hello_message {
    wire::hello head;
    std::vector<std::uint8_t> payload;
};
hello_message hello_of(const client_config& c, const float* params, const float* grads,
                       const std::vector<std::uint8_t>& key, std::span<const shard_range> moving);

// What a request is made of: the client's buffers, the step of the values
// each PS last sent (what a push's gradient was computed on), the hello.
struct request_source {
    const float* params = nullptr;
    const float* grads = nullptr;
    std::span<const std::uint64_t> base_step;  // per PS
    wire_precision precision = wire_precision::fp32;
    const hello_message* hello = nullptr;
};
// What a push says besides its range: its gradient is not to be applied
// (wire::push::skip); it is a bucket of an overlapped step (wire::push::bucket).
struct push_marks {
    bool skip = false;
    bool bucket = false;
};
// The frame of op's request of `kind` (into op.out); returns its payload,
// if any (a bf16 push's is encoded into op.bytes).
const void* encode_request(wire::kind kind, operation& op, const request_source& from, std::uint64_t step,
                           std::uint64_t position, push_marks marks = {});

// The log line that says how values and gradients travel: through the
// buffers the PS tasks named in `shared` map, or messages with the others.
std::string exchange_paths(bool share_memory, const std::vector<std::string>& shared,
                           const std::vector<std::string>& messages);

// ---- replies

snapshot_result snapshot_result_of(const wire::snapshot_done& d);
ps_stats stats_of(const wire::stats_reply& r, const std::vector<wire::worker_counters>& counters);

}  // namespace pstrain::ps
