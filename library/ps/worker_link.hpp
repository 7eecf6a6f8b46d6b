// A server's link to each worker: its mailbox (the posted receives of its
// next message and payload), its replies (the frame and payload in flight,
// which must stay put until sent), its mapped exchange buffers, and what
// the server knows of it (lost, greeted, told that training ended, its
// data position and counters).  worker_links owns the links of all
// workers and every wait on one of them: wait_for(peer, what, pred).
//
// Used by the server's thread only.
#pragma once

#include "pstrain/transport.hpp"
#include "library/ps/activity_recorder.hpp"
#include "library/ps/aligned_buffer.hpp"
#include "library/ps/protocol.hpp"
#include "library/ps/server_state.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pstrain::ps {

struct worker_link {
    // The mailbox: the message being handled and its payload.
    wire::frame in;
    float_buffer slot;            // a gradient, values, an rkey or a sparse request
    transfer recv, payload_recv;  // the posted receives
    bool posted = false, payload_posted = false;

    // The reply in flight.
    wire::frame out;
    transfer send, payload_send;
    const float* sending = nullptr;                // the values buffer its payload reads until payload_send is complete
    shard_range sending_part;                      // the part of it that it reads (of the flat vector)
    std::vector<wire::worker_counters> stats_out;  // a stats reply's payload until payload_send is complete
    std::vector<float> rows_out;                   // a rows reply's rows
    std::vector<std::uint8_t> numbers_out;  // bf16: a values or rows reply's payload until payload_send is complete

    // Its exchange buffers, mapped here: element range.begin of each (the
    // part of them this PS reads and writes, and all it checked is mapped).
    std::unique_ptr<peer_memory> mapping;
    float* mapped_params = nullptr;
    const float* mapped_grads = nullptr;
    bool values_written = false;  // sync: the step wrote its new values into mapped_params already

    // The worker, as this server knows it.
    std::uint64_t process = 0;  // transport::reconnections() when this link began: a change is a new process
    bool lost = false;          // no process to hear from in this slot (lost, left, or not joined yet)
    bool rejoining = false;     // a new process in a lost one's place, its hello not yet handled
    // A live worker (membership.hpp, the one definition): not lost, and not
    // a new process whose hello has not been welcomed yet.
    bool live() const { return !lost && !rejoining; }
    bool greeted = false;            // its hello was welcomed: it may ask for more
    bool told_done = false;          // a reply said done or stopped: it leaves now
    std::uint64_t position = 0;      // its data position after its last gradient this shard applied (or dropped)
    wire::worker_counters counters;  // its gradients, for stats
    // Sync: the step its last counted push was computed at (a step's
    // gradient counts once, however many buckets it comes in).
    std::optional<std::uint64_t> counted_step;

    // A whole message is here: its frame, and its payload if it has one.
    bool ready()
    {
        return posted && recv.complete() && (!recv.ok() || in.payload_bytes == 0 || payload_recv.complete());
    }
};

// The values of a range, as a reply sends them.
struct values_reply {
    shard_range part;
    bool shared = false;  // written into the worker's mapped buffer
    wire::values_status status = wire::values_status::ok;
    std::uint64_t step = 0, restored = 0;
    std::span<const float> values;  // the part's values
    const float* buffer = nullptr;  // the buffer they lie in (a send reads it until complete)
    std::uint64_t range_begin = 0;  // this PS's first element (the mapped buffers' element 0)
};

class worker_links {
public:
    worker_links(transport& net, activity_recorder& activity, server_clock& profile);

    std::size_t size() const { return links_.size(); }
    // What pushes, values and rows travel as (the server's, or the chief's).
    void set_precision(wire_precision p) { precision_ = p; }
    wire_precision precision() const { return precision_; }
    worker_link& operator[](std::size_t i) { return links_[i]; }
    const worker_link& operator[](std::size_t i) const { return links_[i]; }
    std::string name(std::size_t i) const { return net_.peer_name(i); }

    // Waits until pred() holds or worker i is lost, saying in activity()
    // that it waits for `what` of worker i.  True when pred() holds.
    bool wait_for(std::size_t i, const char* what, const std::function<bool()>& pred);
    // A worker, not lost, whose message is here or that failed, or lost and
    // taken back by the transport (a new process in its place: back());
    // nullopt at the deadline.  The search starts after the worker the last
    // call returned: under load, a worker with a high index is served (and
    // its loss seen) as soon as one with a low index.
    std::optional<std::size_t> wait_any(clock::time_point deadline);
    bool back(std::size_t i) const { return links_[i].lost && net_.reconnections(i) != links_[i].process; }
    // Lost worker i's place was taken by a new process: what was posted for
    // the lost one is dropped, and the link starts over, as at start-up,
    // with its receives posted for the new one's hello.
    void renew(std::size_t i);

    // Posts worker i's next frame receive, and a payload receive if none is posted.
    void post(std::size_t i);
    // A message (frame and payload) came in, for stats.
    void received(const wire::frame& f) { bytes_in_ += sizeof f + f.payload_bytes; }
    void received_mapped(std::uint64_t bytes) { bytes_in_ += bytes; }

    // Sends `f` as worker i's reply, once its previous reply frame has left.
    void reply(std::size_t i, const wire::frame& f);
    // The values as the reply to worker i's message in `in` (in the wire
    // precision, but for an init or restore: wire::reply_precision).
    void reply_values(std::size_t i, const values_reply& v);
    void reply_stats(std::size_t i, std::uint64_t step);
    // rows_out as the reply to a sparse request.
    void reply_rows(std::size_t i, std::uint32_t table, std::uint64_t count, std::uint64_t step,
                    wire::values_status status);
    // The message broke the protocol: say so in the log (what describe()
    // says, or `logged`) and to the peer.
    void refuse(std::size_t i, const wire::refusal& r);
    void refuse(std::size_t i, const wire::refusal& r, const std::string& logged);
    // Worker i's previous reply payload has left (the transport may read it until then).
    void wait_for_payload_send(std::size_t i);
    // Before the values change: every reply in flight has left.
    void drain_sends();
    // A reply in flight still reads `part` (of the flat vector) of the values buffer `values`.
    bool read_by_a_reply(const float* values, shard_range part);

    // Maps worker i's buffers that its hello offers (its rkey is in the
    // slot): true when they are mapped here; `why` says why they are refused.
    bool map_buffers(std::size_t i, const wire::hello& h, shard_range range, bool share_memory, std::string& why);

    bool everyone_told() const;
    // The live workers (worker_link::live()), as values replies announce them.
    int live() const;
    // Tells every live worker that training ends because `lost` was lost,
    // then gives the sends a moment.
    void abort_all(std::size_t lost);
    // Posted receives go back to the transport before it goes away.
    void release();

    std::uint64_t bytes_in() const { return bytes_in_; }
    std::uint64_t bytes_out() const { return bytes_out_; }

private:
    void begin_reply(std::size_t i);
    void send_reply(std::size_t i);

    transport& net_;
    activity_recorder& activity_;
    server_clock& profile_;
    std::vector<worker_link> links_;
    std::uint64_t bytes_in_ = 0, bytes_out_ = 0;  // for stats
    std::size_t next_ = 0;                        // where wait_any() looks first
    wire_precision precision_ = wire_precision::fp32;
};

}  // namespace pstrain::ps
