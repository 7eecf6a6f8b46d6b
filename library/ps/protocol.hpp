// The wire protocol between a worker's client and a PS's server.
//
// Every message is one 64-byte frame on the control channel: a magic, the
// protocol version, the kind, the payload's length, and the kind's own
// struct with named fixed-width fields.  Bulk data (values, gradients, an
// rkey) follows as one message on the payload channel, so that the
// transport can move it zero-copy into the buffer posted for it.
//
//   worker -> ps   hello          first message on every connection: who, the
//                                 model's size, its wire precision (what
//                                 pushes, values and rows travel as), an
//                                 offer of its exchange
//                                 buffers (payload: their packed rkey; the
//                                 chief's also its moving-average ranges
//                                 and, when it says them, the training
//                                 settings)
//   ps -> worker   welcome        this PS's range; whether it mapped the buffers
//   chief -> ps    init           initial values of the PS's range (payload)
//   chief -> ps    restore        load the snapshot taken at `step`
//   worker -> ps   pull           values of a range, please
//   worker -> ps   push           a gradient of a range computed on the values
//                                 of `step` (payload, or in the mapped buffer)
//   ps -> worker   values         reply to init/restore/pull/push: the range's
//                                 values (payload, or written into the mapped
//                                 buffer) and the PS's step and state
//   chief -> ps    snapshot       take a snapshot of the shard at `step`
//   ps -> chief    snapshot_done  its outcome and receipt
//   chief -> ps    shutdown       training ends (or stops for preemption)
//   ps -> worker   abort          training cannot go on: it lost a task
//   ps -> worker   refusal        the message broke the protocol; the PS names
//                                 it in its log and the worker throws
//   worker -> ps   stats          this PS's counters, please
//   ps -> worker   stats_reply    its step and bytes moved (payload: one
//                                 worker_counters per worker)
//   worker -> ps   sparse_pull    the rows of `count` keys of an embedding
//                                 table (payload: the keys); with the
//                                 lookup flag, only rows that an update
//                                 reached (zeros for the others), and
//                                 nothing is made or counted
//   worker -> ps   sparse_push    one update of `count` rows (payload: the
//                                 keys, then count * dim floats)
//   ps -> worker   rows           reply to both: the rows (payload, for a
//                                 pull) and the PS's step and state
//   chief -> spare take_over      a spare PS takes lost ps `index`'s place;
//                                 the chief's hello and restore follow
//   spare -> worker standing_in   sent once the spare restored the shard:
//                                 it now holds ps `index`'s shard (say hello)
//   chief -> ps    rollback       sync: load the snapshot taken at `step`
//                                 and go on from there (a lost PS's
//                                 replacement restored that step); the
//                                 reply is the shard's values
//   worker -> ps   leave          this worker's program ended (not the
//                                 chief's: it ends the job with shutdown);
//                                 no reply
//
// A server answers each worker's messages one at a time and in order, so a
// worker may have several requests in flight to one PS.  Every field is
// checked on receipt (check_envelope here, then the server's one
// check_request, and the client's check of each reply): nothing a peer
// sends can make a PS allocate, read or write outside what it owns.
//
// This file is the only owner of byte layouts: the frames, the hello's
// payload, the dense and sparse payloads and the refusals are encoded and
// measured here, and nowhere else.
#pragma once

#include "pstrain/error.hpp"
#include "pstrain/partition.hpp"
#include "pstrain/settings.hpp"
#include "pstrain/wire_precision.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace pstrain::ps::wire {

inline constexpr std::uint32_t magic = 0x70737472;  // "pstr"
inline constexpr std::uint16_t version =
    17;  // 17: async pushes of buckets; 16: sync pushes of buckets; 15: a push may skip; 14: welcome names the PS process; 13: leave

enum class kind : std::uint16_t {
    hello = 1,
    welcome,
    init,
    restore,
    pull,
    push,
    values,
    snapshot,
    snapshot_done,
    shutdown,
    abort,
    refusal,
    stats,
    stats_reply,
    sparse_pull,
    sparse_push,
    rows,
    take_over,
    standing_in,
    rollback,
    leave,
};
const char* kind_name(std::uint16_t k);

struct frame {
    std::uint32_t magic = wire::magic;
    std::uint16_t version = wire::version;
    std::uint16_t kind = 0;
    std::uint64_t payload_bytes = 0;
    std::uint8_t body[48] = {};
};
static_assert(sizeof(frame) == 64);

// ------------------------------------------------------------ the messages

struct hello {
    static constexpr wire::kind type = kind::hello;
    std::uint64_t num_params = 0;      // the model's flat length, as this worker sees it
    std::uint64_t params_address = 0;  // its exchange buffers (0: not offered)
    std::uint64_t grads_address = 0;
    std::uint32_t worker_index = 0;
    std::uint32_t num_workers = 0;
    std::uint32_t num_tables = 0;      // embedding tables, as this worker sees them
    std::uint32_t num_moving = 0;      // moving-average ranges (the chief's hello only)
    std::uint32_t settings_bytes = 0;  // the training settings (the chief's hello only; 0: none)
    std::uint32_t precision = 0;       // a wire_precision: what its pushes, values and rows travel as
};  // payload: the buffers' packed rkey, then num_moving (begin, end) pairs of 64-bit element indices,
    // then settings_bytes of encode_settings()

struct welcome {
    static constexpr wire::kind type = kind::welcome;
    std::uint64_t range_begin = 0, range_end = 0;
    std::uint64_t num_params = 0;
    std::uint32_t mapped = 0;  // 1: the PS reads and writes the offered buffers
    // When mapped: the PS's process (process_fence.hpp), which the worker
    // kills before a spare takes that PS's place.
    std::uint32_t pid = 0;
    std::uint64_t pid_namespace = 0;
    std::uint64_t start_ticks = 0;
};

struct init {
    static constexpr wire::kind type = kind::init;
    std::uint64_t range_begin = 0, range_end = 0;
};  // payload: the range's values

struct restore {
    static constexpr wire::kind type = kind::restore;
    std::uint64_t step = 0;
};

struct pull {
    static constexpr wire::kind type = kind::pull;
    std::uint64_t range_begin = 0, range_end = 0;
    std::uint32_t in_shared_memory = 0;  // reply into the mapped buffer
};

struct push {
    static constexpr wire::kind type = kind::push;
    std::uint64_t step = 0;  // the global step of the values the gradient was computed on
    std::uint64_t range_begin = 0, range_end = 0;
    std::uint64_t position = 0;          // the worker's position in its data (opaque here)
    std::uint32_t in_shared_memory = 0;  // the gradient is in the mapped buffer, no payload
    // The worker found inf or NaN in this gradient (a loss scaler's
    // overflow): nothing of it is applied (sync: nothing of its step; a
    // bucketed step's every bucket says it).
    std::uint32_t skip = 0;
    // One bucket of an overlapped step, whose buckets together cover the
    // whole vector (async: the step is one optimizer update and counts once
    // its buckets cover the shard; sync pushes are of steps anyway).
    std::uint32_t bucket = 0;
};  // payload: the gradient, in the wire precision

enum class values_status : std::uint32_t { ok = 0, stale = 1, done = 2, stopped = 3 };

struct values {
    static constexpr wire::kind type = kind::values;
    std::uint64_t step = 0;  // the PS's global step
    std::uint64_t range_begin = 0, range_end = 0;
    std::uint64_t restored = 0;  // 1 + the snapshot step the PS restored, 0 when none
    std::uint32_t status = 0;    // values_status
    std::uint32_t in_shared_memory = 0;
    // The workers this PS has not lost, and how many of them have a lower
    // index than the one it replies to (elastic jobs re-split the data by them).
    std::uint32_t live_workers = 0, live_rank = 0;
};  // payload: the values, in the wire precision, unless in_shared_memory

struct snapshot {
    static constexpr wire::kind type = kind::snapshot;
    std::uint64_t step = 0;
};

enum class snapshot_status : std::uint32_t { taken = 0, moved_on = 1, failed = 2 };

struct snapshot_done {
    static constexpr wire::kind type = kind::snapshot_done;
    std::uint64_t step = 0;   // the step taken, or the PS's step when it has moved on
    std::uint64_t bytes = 0;  // the receipt the server's snapshot hook returned
    std::uint64_t checksum = 0;
    std::uint32_t status = 0;  // snapshot_status
};

struct shutdown {
    static constexpr wire::kind type = kind::shutdown;
    std::uint32_t stop = 0;  // 1: stop for preemption (workers are told `stopped`)
};

struct abort {
    static constexpr wire::kind type = kind::abort;
    std::uint32_t lost_is_ps = 0;  // the task whose loss ends training
    std::uint32_t lost_index = 0;
};

enum class refusal_code : std::uint32_t {
    bad_frame = 1,
    bad_version,
    bad_kind,
    bad_range,
    bad_length,
    not_mapped,
    model_mismatch,
    needs_whole_shard,
    not_chief,
    wrong_peer,
    no_hello,
    bad_buffers,
    bad_table,
    too_many_keys,
    tables_mismatch,
    rows_without_step,
    pushed_twice,
    precision_mismatch,
    not_elastic,
    bucket_skips,
    bucket_mismatch,
};

struct refusal {
    static constexpr wire::kind type = kind::refusal;
    std::uint32_t code = 0;           // refusal_code
    std::uint32_t frame_version = 0;  // bad_version: what came
    std::uint64_t detail_begin = 0;   // bad_range: the range asked for; bad_length: claimed, received;
                                      // wrong_peer: the worker index and worker count the hello claimed;
                                      // bad_buffers: the addresses of the buffers the hello offered;
                                      // bad_table: the table asked for, the tables this PS has;
                                      // too_many_keys: the keys in the request, the most a request may carry;
                                      // tables_mismatch: the worker's tables, this PS's;
                                      // rows_without_step: the row updates held, the most held for one worker;
                                      // pushed_twice: the sync step the worker already pushed to;
                                      // needs_whole_shard, bucket_skips, bucket_mismatch: the range pushed;
                                      // precision_mismatch: the worker's wire precision, this PS's
    std::uint64_t detail_end = 0;
    std::uint32_t peer_index = 0;  // wrong_peer, precision_mismatch: the worker the PS knows the connection as
    std::uint64_t other_begin = 0, other_end = 0;  // bucket_mismatch: the step's bucket the pushed one overlaps
};

struct stats {
    static constexpr wire::kind type = kind::stats;
};

struct stats_reply {
    static constexpr wire::kind type = kind::stats_reply;
    std::uint64_t step = 0;            // the PS's global step
    std::uint64_t bytes_received = 0;  // frames, payloads and gradients read from mapped buffers
    std::uint64_t bytes_sent = 0;      // frames, payloads and values written into mapped buffers
    std::uint32_t num_workers = 0;     // the payload's records
};                                     // payload: num_workers worker_counters, in worker order

struct worker_counters {
    std::uint64_t gradients = 0;      // applied (async) or aggregated into a step (sync)
    std::uint64_t stale = 0;          // dropped as stale (sync)
    std::uint64_t staleness_sum = 0;  // over the applied gradients: the PS's step minus the gradient's step
    std::uint64_t staleness_max = 0;
};
static_assert(sizeof(worker_counters) == 32);

struct sparse_pull {
    static constexpr wire::kind type = kind::sparse_pull;
    std::uint64_t count = 0;  // keys in the payload
    std::uint32_t table = 0;
    std::uint32_t flags = 0;  // sparse_lookup: read only
};                            // payload: count 64-bit keys

inline constexpr std::uint32_t sparse_lookup = 1;

struct sparse_push {
    static constexpr wire::kind type = kind::sparse_push;
    std::uint64_t count = 0;
    std::uint32_t table = 0;
};  // payload: count 64-bit keys, then count * dim numbers in the wire precision (one row's gradient per key)

struct rows {
    static constexpr wire::kind type = kind::rows;
    std::uint64_t step = 0;   // the PS's global step
    std::uint64_t count = 0;  // rows in the payload (0 for a push's reply)
    std::uint32_t table = 0;
    std::uint32_t status = 0;  // values_status: ok, done or stopped
};                             // payload: count * dim numbers in the wire precision

struct take_over {
    static constexpr wire::kind type = kind::take_over;
    std::uint32_t index = 0;   // the lost PS whose shard the spare takes
    std::uint32_t num_ps = 0;  // the job's PS tasks (spares not counted), as the chief sees them
};

struct standing_in {
    static constexpr wire::kind type = kind::standing_in;
    std::uint64_t step = 0;   // the snapshot step it restored
    std::uint32_t index = 0;  // the PS whose place it took
};

struct rollback {
    static constexpr wire::kind type = kind::rollback;
    std::uint64_t step = 0;
};

struct leave {
    static constexpr wire::kind type = kind::leave;
};

// The most keys one sparse request may carry (a client splits larger ones):
// what a PS's receive buffer for each worker is sized for.
inline constexpr std::uint64_t max_sparse_keys = 65536;

// What a refusal says, in words (for the worker's exception and the PS's log).
std::string describe(const refusal& r);

// A refusal of `code` with its two details (see refusal's fields).
inline refusal refusal_of(refusal_code code, std::uint64_t detail_begin = 0, std::uint64_t detail_end = 0)
{
    refusal r;
    r.code = static_cast<std::uint32_t>(code);
    r.detail_begin = detail_begin;
    r.detail_end = detail_end;
    return r;
}

// ---------------------------------------------------------------- encoding

template <typename M>
frame encode(const M& m, std::uint64_t payload_bytes = 0)
{
    static_assert(std::is_trivially_copyable_v<M> && sizeof(M) <= sizeof(frame::body));
    frame f;
    f.kind = static_cast<std::uint16_t>(M::type);
    f.payload_bytes = payload_bytes;
    std::memcpy(f.body, &m, sizeof m);
    return f;
}

// The body of a frame already checked to be of kind M::type.
template <typename M>
M body(const frame& f)
{
    M m;
    std::memcpy(&m, f.body, sizeof m);
    return m;
}

// The frame's envelope: magic, version, a known kind.  A refusal when not.
std::optional<refusal> check_envelope(const frame& f);

// The range [begin, end) is well formed and inside `owner`.
inline bool range_inside(std::uint64_t begin, std::uint64_t end, const shard_range& owner)
{
    return begin <= end && begin >= owner.begin && end <= owner.end;
}

// Bytes of `count` floats, or 0 when that does not fit in 64 bits.
inline std::uint64_t float_bytes(std::uint64_t count) { return count > (~std::uint64_t(0)) / 4 ? 0 : count * 4; }

// Where `range` of a flat float vector whose element 0 is at `address`
// lies in the sender's address space: `bytes` bytes from `begin`; nullopt
// when that does not fit in 64 bits.
struct byte_span {
    std::uint64_t begin = 0, bytes = 0;
};
inline std::optional<byte_span> bytes_of(std::uint64_t address, const shard_range& range)
{
    const std::uint64_t offset = float_bytes(range.begin), bytes = float_bytes(range.size());
    if ((range.begin > 0 && offset == 0) || (range.size() > 0 && bytes == 0)) return std::nullopt;
    if (offset > ~std::uint64_t(0) - address || bytes > ~std::uint64_t(0) - address - offset) return std::nullopt;
    return byte_span{address + offset, bytes};
}

// ---------------------------------------------------------------- payloads

// Bytes of one number in `p`.
inline constexpr std::uint64_t number_bytes(wire_precision p) { return p == wire_precision::bf16 ? 2 : 4; }
// Bytes of `count` numbers in `p`, or 0 when that does not fit in 64 bits.
inline std::uint64_t numbers_bytes(std::uint64_t count, wire_precision p)
{
    return p == wire_precision::bf16 ? (count > (~std::uint64_t(0)) / 2 ? 0 : count * 2) : float_bytes(count);
}

// Dense: the numbers of a range of the flat vector: an init's are floats,
// a push's and a values reply's in the wire precision.
inline std::uint64_t dense_bytes(const shard_range& part) { return float_bytes(part.size()); }
inline std::uint64_t dense_bytes(const shard_range& part, wire_precision p) { return numbers_bytes(part.size(), p); }
// What a values reply to a `request` (a kind) travels as in a job of wire
// precision `p`: the replies to init, restore and rollback are float32 whatever `p`
// is, so that the chief starts from the PS's exact values (and a chief on
// the PS's host, whose later exchanges go through shared memory, stays
// float32 throughout).
inline wire_precision reply_precision(std::uint16_t request, wire_precision p)
{
    return request == static_cast<std::uint16_t>(kind::init) || request == static_cast<std::uint16_t>(kind::restore) ||
                   request == static_cast<std::uint16_t>(kind::rollback)
               ? wire_precision::fp32
               : p;
}

// The largest packed rkey a hello may carry.
inline constexpr std::size_t max_rkey_bytes = 4096;
// The most moving-average ranges a hello may carry (16 bytes each).
inline constexpr std::size_t max_moving_ranges = 4096;
inline constexpr std::size_t moving_range_bytes = 2 * sizeof(std::uint64_t);

// The training settings (settings.hpp) as the chief's hello carries them:
// a head (the optimizer, the mode word: bit 0 sync, bit 1 elastic; replicas,
// the staleness bound, the table count) and one record per table, fixed-width little-endian fields.
inline constexpr std::size_t settings_head_bytes = 44;
inline constexpr std::size_t settings_table_bytes = 76;
inline constexpr std::size_t max_settings_tables = 1024;
inline constexpr std::size_t max_settings_bytes = settings_head_bytes + max_settings_tables * settings_table_bytes;
inline constexpr std::uint32_t max_table_dim = 65536;
std::vector<std::uint8_t> encode_settings(const training_settings& s);
// The settings of `bytes`, checked (a known optimizer, finite numbers, a
// table's dim in 1..max_table_dim, the length its table count gives);
// throws pstrain::error saying what is wrong.
training_settings decode_settings(std::span<const std::uint8_t> bytes);

// hello: the packed rkey, then the moving-average ranges as (begin, end)
// pairs of 64-bit element indices, then the encoded settings.
std::vector<std::uint8_t> hello_payload(std::span<const std::uint8_t> rkey, std::span<const shard_range> moving,
                                        std::span<const std::uint8_t> settings = {});
// The bytes of a hello's ranges, and of its rkey (what is left before them
// and the settings).
inline std::uint64_t hello_moving_bytes(const hello& h) { return std::uint64_t(h.num_moving) * moving_range_bytes; }
inline std::uint64_t hello_rkey_bytes(const hello& h, std::uint64_t payload_bytes)
{
    const std::uint64_t tail = hello_moving_bytes(h) + h.settings_bytes;
    return payload_bytes >= tail ? payload_bytes - tail : 0;
}
// The ranges of a hello's payload (`payload` holds all of it, checked to
// hold h.num_moving of them and h.settings_bytes).
std::vector<shard_range> hello_moving_ranges(const hello& h, std::span<const std::uint8_t> payload);
// The settings' bytes of a hello's payload (checked likewise).
inline std::span<const std::uint8_t> hello_settings(const hello& h, std::span<const std::uint8_t> payload)
{
    return payload.subspan(payload.size() - h.settings_bytes);
}

// Sparse: a pull's payload is `count` keys; a push's the keys, then one
// row of `dim` numbers per key; a rows reply's `count` rows (the numbers
// in the wire precision `p`).
inline constexpr std::uint64_t sparse_key_bytes = sizeof(std::uint64_t);
inline std::uint64_t sparse_pull_bytes(std::uint64_t count) { return count * sparse_key_bytes; }
inline std::uint64_t sparse_rows_bytes(std::uint64_t count, std::uint64_t dim, wire_precision p = wire_precision::fp32)
{
    return count * dim * number_bytes(p);
}
inline std::uint64_t sparse_push_bytes(std::uint64_t count, std::uint64_t dim, wire_precision p = wire_precision::fp32)
{
    return sparse_pull_bytes(count) + sparse_rows_bytes(count, dim, p);
}
// A push's payload: keys[places[k]] and the row of grads at places[k]
// (in `p`), for each k, into `out` (resized).
void encode_sparse_push(std::span<const std::uint64_t> keys, std::span<const float> grads,
                        std::span<const std::uint32_t> places, std::uint32_t dim, std::vector<std::uint8_t>& out,
                        wire_precision p = wire_precision::fp32);
// The keys of a sparse payload (copied out: a payload need not be 8-byte
// aligned), into `out` (resized).
void decode_sparse_keys(const void* payload, std::uint64_t count, std::vector<std::uint64_t>& out);
// The gradients of a push's payload of `count` keys, where they lie (as
// floats: a bf16 payload is widened in place first, by widen below).
inline const float* sparse_push_grads(const void* payload, std::uint64_t count)
{
    return reinterpret_cast<const float*>(static_cast<const std::byte*>(payload) + sparse_pull_bytes(count));
}
inline float* sparse_push_grads(void* payload, std::uint64_t count)
{
    return reinterpret_cast<float*>(static_cast<std::byte*>(payload) + sparse_pull_bytes(count));
}
// Numbers received in `p` widened in place to floats: the `count` numbers
// at `at` (a buffer that holds `count` floats).  Nothing for fp32.
void widen(float* at, std::uint64_t count, wire_precision p);
// `count` floats as `p` into `out` (resized to their bytes).
void encode_numbers(const float* in, std::uint64_t count, wire_precision p, std::vector<std::uint8_t>& out);
// `count` numbers in `p` at `in` (any alignment) into `out` as floats.
void decode_numbers(const void* in, std::uint64_t count, wire_precision p, float* out);
// Row k of `rows` to row places[k] of `out`, for each k.
void scatter_rows(std::span<const float> rows, std::span<const std::uint32_t> places, std::uint32_t dim, float* out);

}  // namespace pstrain::ps::wire
