// How a sparse request (rows pulled, looked up or pushed) goes out: each key
// to the PS that shard_of_key names, at most wire::max_sparse_keys keys a
// message, each message one operation of the request's ticket.
#pragma once

#include "library/ps/exchange.hpp"
#include "library/ps/protocol.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace pstrain::ps {

// The places (indexes into `keys`) of each PS's keys, in key order.
std::vector<std::vector<std::uint32_t>> places_by_ps(std::span<const std::uint64_t> keys, std::size_t num_ps);

// The messages that `by_ps` takes, at most wire::max_sparse_keys keys each.
std::size_t row_messages(const std::vector<std::vector<std::uint32_t>>& by_ps);

// Makes `op` one message of `kind` (sparse_pull or sparse_push) for the keys
// at `places`: a pull's keys and room for its rows, scattered into `out`
// when they come; a push's payload, the keys then their rows of `grads`.
// The rows travel as `precision`.  Returns the payload to send with the frame.
const void* fill_row_request(operation& op, wire::kind kind, std::uint32_t table, std::uint32_t dim,
                             std::span<const std::uint32_t> places, std::span<const std::uint64_t> keys, float* out,
                             std::span<const float> grads, std::uint32_t flags,
                             wire_precision precision = wire_precision::fp32);

}  // namespace pstrain::ps
