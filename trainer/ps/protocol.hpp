// The worker <-> parameter-server protocol: tagged UCX messages made of a
// fixed header and, for some types, the float payload of one shard.
//
//   worker -> ps   INIT      chief's initial values; or, with status 1 and no
//                            payload, "restore checkpoint `step` from --checkpoint-dir"
//   worker -> ps   PULL      ask for the shard's current values
//   worker -> ps   PUSH      a gradient computed at global_step `step`
//   worker -> ps   SHUTDOWN  the chief ends the job (after the final evaluation)
//   worker -> ps   SHUTDOWN  status 1: stop for preemption (workers are told `stopped`)
//   worker -> ps   HELLO     static-spec bootstrap: the sender's UCX address as payload
//   worker -> ps   SAVE      chief: write this PS's shard of the checkpoint at `step`
//   worker -> ps   MAP       the worker's exchange buffers: payload = map_request
//                            followed by their packed UCX remote key
//   worker -> ps   PUSH/PULL status 1 (in_mapped_memory): the gradient is in the
//                            worker's mapped gradient buffer, no payload follows;
//                            the PS writes the values into its mapped parameter
//                            buffer and replies with a PARAMS header alone
//   ps -> worker   PARAMS    reply to PULL/PUSH/INIT: values at global_step `step`, `status`
//   ps -> worker   SAVED     reply to SAVE: save_status; step written (or the PS's
//                            step when it has moved on); aux = crc32, extra = bytes
//   ps -> worker   MAPPED    reply to MAP: status 1 when this PS mapped the buffers
//                            (shared memory on one host), 0 when it cannot
//   ps -> worker   ABORT     training cannot go on; `lost_role`/`lost_index` say why
//
// A message with a payload travels as two UCX messages: the header, then the
// payload alone under the PAYLOAD tag, so that the payload is a contiguous
// buffer UCX can move zero-copy (rendezvous with an iov datatype falls back
// to copied fragments).  Between two tasks at most one message is in flight
// each way, and UCX keeps the order of equal tags, so they pair up.
//
// Mapped memory: on one host UCX can map a peer's memory into this process
// (ucp_rkey_ptr on a shared-memory key).  A PS that has mapped a worker's
// buffers reads its gradient and writes its new values in place: a push and
// its reply cost two 64-byte headers and no copy through UCX.  The PS
// touches a worker's buffers only while that worker waits for its reply.
//
// Tag: type (8 bits) | sender role (8 bits) | sender index (16 bits) | 32 free bits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pstrain::ps {

// Header types are below 16; the payload type is 16 (see tag_header_mask).
enum class msg : std::uint8_t { init = 1, pull, push, shutdown, hello, params, abort, save, saved, map, mapped, payload = 16 };

enum class reply_status : std::uint32_t { ok = 0, stale = 1, done = 2, stopped = 3 };
// PUSH/PULL status: the exchange goes through the worker's mapped buffers.
inline constexpr std::uint32_t in_mapped_memory = 1;

// MAP payload: where the worker's buffers are (its addresses), then the key.
struct map_request {
    std::uint64_t params_address = 0;  // total floats: the PS writes its range
    std::uint64_t grads_address = 0;   // total floats: the PS reads its range
    std::uint64_t key_bytes = 0;
};
inline constexpr std::size_t max_map_request = 1024;  // a larger key is not offered

enum class save_status : std::uint32_t { saved = 0, moved_on = 1, failed = 2 };

struct header {
    std::uint32_t magic = 0x70737472;  // "pstr"
    std::uint8_t type = 0;
    std::uint8_t sender_role = 0;      // 0 ps, 1 worker
    std::uint16_t sender_index = 0;
    std::uint64_t step = 0;            // global_step the message refers to
    std::uint64_t payload_bytes = 0;   // bytes after the header
    std::uint32_t status = 0;          // reply_status, or for ABORT the lost peer's role
    std::uint32_t aux = 0;             // ABORT: the lost peer's index; INIT: total parameters (low 32 bits)
    std::uint64_t range_begin = 0;     // INIT/PARAMS: the shard's range in the flat vector
    std::uint64_t range_end = 0;
    std::uint64_t extra = 0;           // PUSH: batches the worker has drawn; SAVED: the shard file's bytes
    std::uint64_t restored = 0;        // PARAMS: 1 + the checkpoint step the PS restored, 0 when none
};
static_assert(sizeof(header) == 64);

inline constexpr std::uint64_t tag_type_mask = 0xff00000000000000ull;
inline constexpr std::uint64_t tag_sender_mask = 0x00ffffff00000000ull;

inline std::uint64_t make_tag(msg type, int sender_role, int sender_index)
{
    return (std::uint64_t(static_cast<std::uint8_t>(type)) << 56) | (std::uint64_t(sender_role & 0xff) << 48) |
           (std::uint64_t(sender_index & 0xffff) << 32);
}

inline std::uint64_t sender_tag(int sender_role, int sender_index) { return make_tag(msg{}, sender_role, sender_index); }

inline constexpr std::uint64_t tag_full_mask = tag_type_mask | tag_sender_mask;
// Everything from this sender but its payloads: matched by header receives
// (type != payload is not expressible as a mask, so header types are < 16
// and the mask checks the payload type's bit is clear).
inline constexpr std::uint64_t tag_header_mask = 0x1000000000000000ull | tag_sender_mask;

}  // namespace pstrain::ps
