#include "library/ps/worker_link.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pstrain::ps {

namespace {
constexpr auto far_future = std::chrono::hours(24 * 365);

// The refusals of a hello the log names as such.
bool refuses_a_hello(const wire::refusal& r)
{
    const auto code = static_cast<wire::refusal_code>(r.code);
    return code == wire::refusal_code::model_mismatch || code == wire::refusal_code::tables_mismatch ||
           code == wire::refusal_code::wrong_peer || code == wire::refusal_code::precision_mismatch;
}
}  // namespace

worker_links::worker_links(transport& net, activity_recorder& activity, server_clock& profile)
    : net_(net), activity_(activity), profile_(profile), links_(net.num_peers())
{}

bool worker_links::wait_for(std::size_t i, const char* what, const std::function<bool()>& pred)
{
    activity_recorder::scope waiting(activity_, what);
    activity_.pending(i, true);
    net_.wait_until([&] { return pred() || net_.failed(i); }, clock::now() + far_future);
    return pred();
}

std::optional<std::size_t> worker_links::wait_any(clock::time_point deadline)
{
    std::optional<std::size_t> ready;
    net_.wait_until(
        [&] {
            const auto n = links_.size();
            for (std::size_t k = 0; k < n; ++k) {
                const auto i = (next_ + k) % n;
                auto& p = links_[i];
                if ((!p.lost && (net_.failed(i) || p.ready())) || back(i)) {
                    ready = i;
                    return true;
                }
            }
            return false;
        },
        deadline);
    if (ready) next_ = (*ready + 1) % links_.size();
    return ready;
}

void worker_links::renew(std::size_t i)
{
    auto& p = links_[i];
    p.recv.cancel();
    p.payload_recv.cancel();
    const auto position = p.position;
    auto slot = std::move(p.slot);
    p = worker_link{};
    p.slot = std::move(slot);
    p.position = position;  // where the lost one's data stood, for the chief's checkpoints
    p.process = net_.reconnections(i);
    post(i);
}

void worker_links::post(std::size_t i)
{
    auto& p = links_[i];
    p.recv = net_.recv(i, channel::control, &p.in, sizeof p.in);
    p.posted = true;
    if (!p.payload_posted) {
        p.payload_recv = net_.recv(i, channel::payload, p.slot.data(), p.slot.size() * sizeof(float));
        p.payload_posted = true;
    }
}

// Waits until worker i's previous reply frame has left (the transport may
// still read it), then clears it.
void worker_links::begin_reply(std::size_t i)
{
    auto& p = links_[i];
    if (!p.send.complete()) {
        server_clock::scope timed(profile_, draining);
        wait_for(i, "the send of its previous reply", [&] { return p.send.complete(); });
    }
    p.out = wire::frame{};
}

// Sends the frame in `out` and posts worker i's next receive.
void worker_links::send_reply(std::size_t i)
{
    auto& p = links_[i];
    bytes_out_ += sizeof p.out + p.out.payload_bytes;
    p.send = net_.send(i, channel::control, &p.out, sizeof p.out);
    if (!p.lost && !p.posted) post(i);
}

void worker_links::reply(std::size_t i, const wire::frame& f)
{
    begin_reply(i);
    links_[i].out = f;
    send_reply(i);
}

void worker_links::refuse(std::size_t i, const wire::refusal& r)
{
    if (refuses_a_hello(r)) log::error("refused the hello of {}: {}", net_.peer_name(i), wire::describe(r));
    else
        log::error("refused a {} message from {}: {}", wire::kind_name(links_[i].in.kind), net_.peer_name(i),
                   wire::describe(r));
    reply(i, wire::encode(r));
}

void worker_links::refuse(std::size_t i, const wire::refusal& r, const std::string& logged)
{
    log::error("{}", logged);
    reply(i, wire::encode(r));
}

// The values of `part` to worker i: written into its mapped buffer
// (`shared`), or sent.  A send may read them until it completes, so they
// must not change meanwhile: sync waits for every reply of a step before
// the next update; async writes each update into a buffer no reply is
// reading (served_shard).
void worker_links::reply_values(std::size_t i, const values_reply& v)
{
    server_clock::scope timed(profile_, replying);
    auto& p = links_[i];
    wait_for_payload_send(i);
    begin_reply(i);
    if (v.status == wire::values_status::done || v.status == wire::values_status::stopped) p.told_done = true;
    wire::values m{
        v.step, v.part.begin, v.part.end, v.restored, static_cast<std::uint32_t>(v.status), v.shared ? 1u : 0u};
    m.live_workers = static_cast<std::uint32_t>(live());
    m.live_rank = static_cast<std::uint32_t>(std::count_if(
        links_.begin(), links_.begin() + static_cast<std::ptrdiff_t>(i), [](const auto& w) { return w.live(); }));
    if (v.shared) {
        // The worker waits for this reply: its buffer is ours until the frame leaves.
        if (!std::exchange(p.values_written, false))
            std::copy(v.values.begin(), v.values.end(), p.mapped_params + (v.part.begin - v.range_begin));
        bytes_out_ += v.values.size_bytes();
        p.sending = nullptr;
        p.out = wire::encode(m);
    } else if (wire::reply_precision(p.in.kind, precision_) == wire_precision::fp32) {  // p.in: what it answers
        p.sending = v.buffer;
        p.sending_part = v.part;
        p.out = wire::encode(m, v.values.size_bytes());
        p.payload_send = net_.send(i, channel::payload, v.values.data(), v.values.size_bytes());
    } else {
        // Rounded into a payload of the link's own: the values may change once it is made.
        wire::encode_numbers(v.values.data(), v.values.size(), precision_, p.numbers_out);
        p.sending = nullptr;
        p.out = wire::encode(m, p.numbers_out.size());
        p.payload_send = net_.send(i, channel::payload, p.numbers_out.data(), p.numbers_out.size());
    }
    send_reply(i);
}

// This PS's step and bytes, and every worker's gradients.
void worker_links::reply_stats(std::size_t i, std::uint64_t step)
{
    auto& p = links_[i];
    wait_for_payload_send(i);
    begin_reply(i);
    p.stats_out.clear();
    for (const auto& w : links_) p.stats_out.push_back(w.counters);
    wire::stats_reply r;
    r.step = step;
    r.bytes_received = bytes_in_;
    r.bytes_sent = bytes_out_;
    r.num_workers = static_cast<std::uint32_t>(links_.size());
    const auto bytes = p.stats_out.size() * sizeof(wire::worker_counters);
    p.sending = nullptr;
    p.out = wire::encode(r, bytes);
    p.payload_send = net_.send(i, channel::payload, p.stats_out.data(), bytes);
    send_reply(i);
}

void worker_links::reply_rows(std::size_t i, std::uint32_t table, std::uint64_t count, std::uint64_t step,
                              wire::values_status status)
{
    auto& p = links_[i];
    wait_for_payload_send(i);
    begin_reply(i);
    if (status != wire::values_status::ok) p.told_done = true;
    const wire::rows r{step, count, table, static_cast<std::uint32_t>(status)};
    const void* payload = p.rows_out.data();
    auto bytes = p.rows_out.size() * sizeof(float);
    if (precision_ != wire_precision::fp32) {
        wire::encode_numbers(p.rows_out.data(), p.rows_out.size(), precision_, p.numbers_out);
        payload = p.numbers_out.data();
        bytes = p.numbers_out.size();
    }
    p.sending = nullptr;
    p.out = wire::encode(r, bytes);
    if (bytes > 0) {
        bytes_out_ += bytes;
        p.payload_send = net_.send(i, channel::payload, payload, bytes);
    }
    send_reply(i);
}

void worker_links::wait_for_payload_send(std::size_t i)
{
    auto& p = links_[i];
    if (p.payload_send.complete()) return;
    server_clock::scope timed(profile_, draining);
    wait_for(i, "the send of its previous reply's payload", [&] { return p.payload_send.complete(); });
}

void worker_links::drain_sends()
{
    server_clock::scope timed(profile_, draining);
    activity_recorder::scope waiting(activity_, "the sends of the replies in flight, before the values change");
    const auto sending = [&](std::size_t i) {
        return (!links_[i].send.complete() || !links_[i].payload_send.complete()) && !net_.failed(i);
    };
    for (std::size_t i = 0; i < links_.size(); ++i) activity_.pending(i, sending(i));
    net_.wait_until(
        [&] {
            for (std::size_t i = 0; i < links_.size(); ++i)
                if (sending(i)) return false;
            return true;
        },
        clock::now() + far_future);
}

bool worker_links::read_by_a_reply(const float* values, shard_range part)
{
    for (std::size_t k = 0; k < links_.size(); ++k) {
        auto& p = links_[k];
        if (p.sending == values && p.sending_part.begin < part.end && part.begin < p.sending_part.end &&
            !p.payload_send.complete() && !net_.failed(k))
            return true;
    }
    return false;
}

// True when the worker's buffers are mapped here (same host, a transport
// that can, share_memory on).  The whole of what this PS will read and
// write, its range of both buffers, must lie in the memory the worker's
// rkey maps (UCX's ucp_rkey_ptr checks no bounds: it adds an offset to any
// address): when it does not, `why` says so and the hello is refused.
bool worker_links::map_buffers(std::size_t i, const wire::hello& h, shard_range range, bool share_memory,
                               std::string& why)
{
    auto& p = links_[i];
    // The rkey comes before the moving-average ranges (the chief's hello).
    const auto key_bytes = wire::hello_rkey_bytes(h, p.in.payload_bytes);
    if (!share_memory || key_bytes == 0 || key_bytes > wire::max_rkey_bytes || h.params_address == 0 ||
        h.grads_address == 0 || range.size() == 0)
        return false;
    std::unique_ptr<peer_memory> mapping;
    try {
        mapping = net_.map(i, std::span(reinterpret_cast<const std::uint8_t*>(p.slot.data()), key_bytes));
    } catch (const error& e) {
        log::debug("cannot map the buffers of {} ({}): messages it is", net_.peer_name(i), e.what());
        return false;
    }
    if (!mapping) return false;
    const auto params = wire::bytes_of(h.params_address, range), grads = wire::bytes_of(h.grads_address, range);
    if (!params || !grads) {
        why = fmt::format("elements [{}, {}) of them would lie past the end of a 64-bit address space", range.begin,
                          range.end);
        return false;
    }
    try {
        auto* params_here = static_cast<float*>(mapping->local_pointer(params->begin, params->bytes));
        auto* grads_here = static_cast<const float*>(mapping->local_pointer(grads->begin, grads->bytes));
        if (!params_here || !grads_here) return false;
        p.mapping = std::move(mapping);
        p.mapped_params = params_here;
        p.mapped_grads = grads_here;
        return true;
    } catch (const error& e) {
        why = e.what();
        return false;
    }
}

bool worker_links::everyone_told() const
{
    return std::all_of(links_.begin(), links_.end(), [](const auto& w) { return w.lost || w.told_done; });
}

int worker_links::live() const
{
    return static_cast<int>(std::count_if(links_.begin(), links_.end(), [](const auto& w) { return w.live(); }));
}

void worker_links::abort_all(std::size_t lost)
{
    std::vector<wire::frame> frames(links_.size());
    std::vector<transfer> sends;
    for (std::size_t k = 0; k < links_.size(); ++k) {
        if (links_[k].lost || net_.failed(k)) continue;
        wire::abort a;
        a.lost_is_ps = 0;
        a.lost_index = static_cast<std::uint32_t>(lost);
        frames[k] = wire::encode(a);
        sends.push_back(net_.send(k, channel::control, &frames[k], sizeof frames[k]));
    }
    net_.wait_until([&] { return std::all_of(sends.begin(), sends.end(), [](auto& r) { return r.complete(); }); },
                    clock::now() + std::chrono::seconds(2));
}

void worker_links::release()
{
    for (auto& p : links_) {
        if (p.posted) p.recv.cancel();
        if (p.payload_posted) p.payload_recv.cancel();
    }
    net_.wait_until(
        [&] {
            return std::all_of(links_.begin(), links_.end(), [](auto& p) {
                return (!p.posted || p.recv.complete()) && (!p.payload_posted || p.payload_recv.complete());
            });
        },
        clock::now() + std::chrono::seconds(1));
}

}  // namespace pstrain::ps
