// The one check of every message a server receives, the chief's first
// ones included: what a frame (and the payload that came with it) must be
// to be served, given what the server knows of its sender.  A refusal
// names what is wrong; the server sends it, or, for the chief's hello and
// initialisation that nothing can be served without, ends with an error
// that says the same.
#pragma once

#include "pstrain/partition.hpp"
#include "library/ps/protocol.hpp"

#include <cstdint>
#include <optional>
#include <span>

namespace pstrain::ps {

struct request_context {
    enum class stage {
        chief_hello,  // the chief's first message: hello, nothing else
        chief_init,   // the chief's second: init of the whole shard, or restore
        serving,      // any worker's, once the shard is there
    };
    stage at = stage::serving;
    std::size_t worker = 0;  // the sender (0: the chief)
    std::size_t num_workers = 1;
    bool greeted = false;          // its hello was welcomed
    bool mapped = false;           // its exchange buffers are mapped here
    shard_range range;             // this PS's shard
    std::uint64_t num_params = 0;  // the model's size, from the chief's hello
    // Sync training, not yet done: a push is of the whole shard, or a
    // bucket (a range of it) that every worker pushes alike; a skip comes
    // before any bucket of its step is applied.
    bool sync_pushes = false;
    bool buckets = true;                              // sync: buckets may be pushed (not with backup workers)
    std::uint64_t step = 0;                           // sync: the current step
    std::span<const shard_range> step_buckets;        // sync: the current step's buckets, pending and applied
    bool step_applied = false;                        // sync: a bucket of the current step is applied
    std::optional<std::uint64_t> pushed_to_step;      // sync: the step whose gradient the sender has pushed, unanswered
    std::span<const std::uint32_t> table_dims;        // this PS's embedding tables
    wire_precision precision = wire_precision::fp32;  // what this PS's pushes and rows travel as
};

// nullopt when the message is to be served.  `received` is the length of
// the payload that came (nullopt: not received with the frame).
std::optional<wire::refusal> check_request(const wire::frame& f, std::optional<std::uint64_t> received,
                                           const request_context& ctx);

}  // namespace pstrain::ps
