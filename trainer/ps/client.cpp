#include "trainer/ps/client.hpp"

#include "common/error.hpp"
#include "common/log.hpp"

#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pstrain::ps {

using clock = std::chrono::steady_clock;

client::client(const bootstrap::job& j, transport::worker& w, bootstrap::connections& c, std::size_t total,
               std::chrono::seconds timeout, bool shared_memory)
    : j_(j), w_(w), c_(c), total_(total), timeout_(timeout), memory_(w.ctx(), 2 * total * sizeof(float)),
      params_(static_cast<float*>(memory_.data())), grads_(params_ + total), offer_(shared_memory),
      map_(make_shard_map(total, j.num_ps)), in_(map_.size()), out_(map_.size()), recvs_(map_.size()),
      payload_recvs_(map_.size()), sends_(map_.size()), payload_sends_(map_.size()), base_step_(map_.size(), 0)
{
    mapped_.assign(map_.size(), 0);
}

void client::map_buffers()
{
    offered_ = true;
    auto key = memory_.packed_key();
    if (sizeof(map_request) + key.size() > max_map_request) {
        log::debug("UCX's remote key is {} bytes: exchanges go through messages", key.size());
        return;
    }
    map_request r;
    r.params_address = reinterpret_cast<std::uintptr_t>(params_);
    r.grads_address = reinterpret_cast<std::uintptr_t>(grads_);
    r.key_bytes = key.size();
    std::vector<std::uint8_t> blob(sizeof r);
    std::memcpy(blob.data(), &r, sizeof r);
    blob.insert(blob.end(), key.begin(), key.end());
    exchange(msg::map, nullptr, std::nullopt, 0, 0, blob);
    std::vector<std::string> shared, messages;
    for (std::size_t p = 0; p < map_.size(); ++p)
        (mapped_[p] ? shared : messages).push_back(j_.peer_name(role::ps, static_cast<int>(p)));
    if (messages.empty())
        log::info("gradients and parameters go through shared memory with {}", fmt::join(shared, ", "));
    else if (shared.empty())
        log::info("gradients and parameters go through UCX messages with {}", fmt::join(messages, ", "));
    else
        log::info("gradients and parameters go through shared memory with {} and through UCX messages with {}",
                  fmt::join(shared, ", "), fmt::join(messages, ", "));
}

void client::exchange(msg type, const float* payload, std::optional<std::uint64_t> step, std::uint32_t status,
                      std::uint64_t extra, std::span<const std::uint8_t> bytes)
{
    const bool gradients_or_values = type == msg::push || type == msg::pull;
    if (gradients_or_values && !offered_) {
        if (offer_) {
            map_buffers();
        } else {
            offered_ = true;
            log::info("gradients and parameters go through UCX messages with every PS (--shared-memory off)");
        }
    }
    const auto deadline = clock::now() + timeout_;
    // This exchange with PS p goes through the mapped buffers.
    const auto via_map = [&](std::size_t p) { return gradients_or_values && mapped_[p]; };
    // Receives first, so replies land in place.  Replies without a payload
    // (ABORT, SAVED, MAPPED) leave the payload receive to be cancelled below.
    for (std::size_t p = 0; p < map_.size(); ++p) {
        recvs_[p] = w_.recv(sender_tag(0, static_cast<int>(p)), tag_header_mask, &in_[p], sizeof(header));
        payload_recvs_[p] = via_map(p) ? transport::request()
                                        : w_.recv(make_tag(msg::payload, 0, static_cast<int>(p)), tag_full_mask,
                                                  params_ + map_[p].begin, map_[p].size() * sizeof(float));
    }
    for (std::size_t p = 0; p < map_.size(); ++p) {
        auto& h = out_[p];
        h = header{};
        h.type = static_cast<std::uint8_t>(type);
        h.sender_role = 1;
        h.sender_index = static_cast<std::uint16_t>(j_.me.index);
        h.step = step ? *step : base_step_[p];
        h.status = via_map(p) ? in_mapped_memory : status;
        h.extra = extra;
        h.aux = static_cast<std::uint32_t>(total_);
        h.range_begin = map_[p].begin;
        h.range_end = map_[p].end;
        const void* data = bytes.data();
        std::size_t size = bytes.size();
        if (payload && !via_map(p)) {
            data = payload + map_[p].begin;
            size = map_[p].size() * sizeof(float);
        }
        h.payload_bytes = size;
        sends_[p] = w_.send(c_.data_ep(p), make_tag(type, 1, j_.me.index), &h, sizeof h);
        payload_sends_[p] = size ? w_.send(c_.data_ep(p), make_tag(msg::payload, 1, j_.me.index), data, size) : transport::request();
    }
    auto header_is_abort = [&](std::size_t p) { return recvs_[p].done() && static_cast<msg>(in_[p].type) == msg::abort; };
    auto pending = [&](std::size_t p) {
        return !recvs_[p].done() || !sends_[p].done() || !payload_sends_[p].done() ||
               (in_[p].payload_bytes > 0 && !payload_recvs_[p].done());
    };
    // A whole reply counts even if its PS goes away right after it (a PS
    // exits once the chief has ended the job).
    auto whole = [&](std::size_t p) {
        return !pending(p) && recvs_[p].status() == UCS_OK && sends_[p].status() == UCS_OK &&
               payload_sends_[p].status() == UCS_OK && (in_[p].payload_bytes == 0 || payload_recvs_[p].status() == UCS_OK);
    };
    const bool in_time = w_.wait_until(
        [&] {
            bool all = true;
            for (std::size_t p = 0; p < map_.size(); ++p) {
                if (header_is_abort(p)) return true;
                if (!pending(p)) continue;
                if (c_.peers[p]->failed()) return true;
                all = false;
            }
            return all;
        },
        deadline);
    for (std::size_t p = 0; p < map_.size(); ++p) {
        if (!payload_recvs_[p].done()) {
            payload_recvs_[p].cancel(w_.get());
            w_.wait_until([&] { return payload_recvs_[p].done(); }, clock::now() + std::chrono::seconds(1));
        }
    }
    // A PS that ends the job sends ABORT and then exits, so its endpoint may
    // fail before the header is seen: give a failed peer's last message a
    // moment, and let an ABORT (which names the cause) win over the failure.
    // (whole(p) reads the same after the cancellations above: a cancelled
    // payload receive belongs to a reply without a payload or to one that
    // was not whole anyway.)
    const auto any_failed = [&] {
        for (std::size_t p = 0; p < map_.size(); ++p)
            if (!whole(p) && c_.peers[p]->failed()) return true;
        return false;
    };
    const auto any_abort = [&] {
        for (std::size_t p = 0; p < map_.size(); ++p)
            if (header_is_abort(p)) return true;
        return false;
    };
    if (any_failed() && !any_abort()) w_.wait_until(any_abort, clock::now() + std::chrono::milliseconds(500));
    for (std::size_t p = 0; p < map_.size(); ++p) {
        if (!header_is_abort(p) || recvs_[p].status() != UCS_OK || in_[p].magic != header{}.magic) continue;
        const role lost = in_[p].status == 0 ? role::ps : role::worker;
        throw error(fmt::format("{} ended the job: it lost {}", j_.peer_name(role::ps, static_cast<int>(p)),
                                j_.peer_name(lost, static_cast<int>(in_[p].aux))));
    }
    const msg expected = type == msg::save ? msg::saved : type == msg::map ? msg::mapped : msg::params;
    for (std::size_t p = 0; p < map_.size(); ++p) {
        const auto who = j_.peer_name(role::ps, static_cast<int>(p));
        if (!whole(p)) {
            if (c_.peers[p]->failed()) throw error(fmt::format("lost {}: {}", who, ucs_status_string(c_.peers[p]->failure())));
            if (!in_time && !recvs_[p].done())
                throw error(fmt::format("no answer from {} in {}s (--peer-timeout)", who, timeout_.count()));
            if (recvs_[p].status() != UCS_OK)
                throw error(fmt::format("lost {}: receive failed: {}", who, ucs_status_string(recvs_[p].status())));
            if (in_[p].payload_bytes > 0 && payload_recvs_[p].status() != UCS_OK)
                throw error(fmt::format("lost {}: receive failed: {}", who, ucs_status_string(payload_recvs_[p].status())));
            throw error(fmt::format("lost {}: send failed: {}", who,
                                    ucs_status_string(sends_[p].status() != UCS_OK ? sends_[p].status() : payload_sends_[p].status())));
        }
        const auto& h = in_[p];
        if (h.magic != header{}.magic) throw error(fmt::format("a malformed reply came from {}", who));
        if (h.range_begin != map_[p].begin || h.range_end != map_[p].end)
            throw error(fmt::format("{} holds parameters [{}, {}) but this worker expects [{}, {}): do all tasks run the same model?",
                                    who, h.range_begin, h.range_end, map_[p].begin, map_[p].end));
        if (static_cast<msg>(h.type) != expected)
            throw error(fmt::format("{} answered with message type {} where {} was expected: are all tasks running the same pstrain?",
                                    who, h.type, static_cast<int>(expected)));
        if (via_map(p) && h.payload_bytes != 0)
            throw error(fmt::format("{} sent values as a message where it writes them into this worker's memory: "
                                    "are all tasks running the same pstrain?", who));
    }
    if (type == msg::save) return;
    if (type == msg::map) {
        for (std::size_t p = 0; p < map_.size(); ++p) mapped_[p] = in_[p].status == 1;
        return;
    }
    for (std::size_t p = 0; p < map_.size(); ++p) {
        base_step_[p] = in_[p].step;
        const auto s = static_cast<reply_status>(in_[p].status);
        if (s == reply_status::done || s == reply_status::stopped) done_ = true;
        if (s == reply_status::stopped) stopped_ = true;
        if (in_[p].restored > 0) restored_ = in_[p].restored - 1;
    }
    global_step_ = static_cast<std::int64_t>(in_[0].step);
}

void client::shutdown(bool stop)
{
    for (std::size_t p = 0; p < map_.size(); ++p) {
        auto& h = out_[p];
        h = header{};
        h.type = static_cast<std::uint8_t>(msg::shutdown);
        h.status = stop ? 1 : 0;
        h.sender_role = 1;
        h.sender_index = static_cast<std::uint16_t>(j_.me.index);
        sends_[p] = w_.send(c_.data_ep(p), make_tag(msg::shutdown, 1, j_.me.index), &h, sizeof h);
    }
    for (std::size_t p = 0; p < map_.size(); ++p)
        w_.wait(sends_[p], j_.peer_name(role::ps, static_cast<int>(p)), clock::now() + std::chrono::seconds(30));
}

}  // namespace pstrain::ps
