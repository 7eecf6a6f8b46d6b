#include "trainer/ps/client.hpp"

#include "common/error.hpp"

#include <fmt/format.h>

namespace pstrain::ps {

using clock = std::chrono::steady_clock;

client::client(const bootstrap::job& j, transport::worker& w, bootstrap::connections& c, float* params, std::size_t total,
               std::chrono::seconds timeout)
    : j_(j), w_(w), c_(c), params_(params), total_(total), timeout_(timeout), map_(make_shard_map(total, j.num_ps)),
      in_(map_.size()), out_(map_.size()), recvs_(map_.size()), payload_recvs_(map_.size()), sends_(map_.size()),
      payload_sends_(map_.size()), base_step_(map_.size(), 0)
{
}

void client::exchange(msg type, const float* payload, std::optional<std::uint64_t> step, std::uint32_t status,
                      std::uint64_t extra)
{
    const auto deadline = clock::now() + timeout_;
    // Receives first, so replies land in place.  Replies without a payload
    // (ABORT, SAVED) leave the payload receive to be cancelled below.
    for (std::size_t p = 0; p < map_.size(); ++p) {
        recvs_[p] = w_.recv(sender_tag(0, static_cast<int>(p)), tag_header_mask, &in_[p], sizeof(header));
        payload_recvs_[p] = w_.recv(make_tag(msg::payload, 0, static_cast<int>(p)), tag_full_mask, params_ + map_[p].begin,
                                    map_[p].size() * sizeof(float));
    }
    for (std::size_t p = 0; p < map_.size(); ++p) {
        auto& h = out_[p];
        h = header{};
        h.type = static_cast<std::uint8_t>(type);
        h.sender_role = 1;
        h.sender_index = static_cast<std::uint16_t>(j_.me.index);
        h.step = step ? *step : base_step_[p];
        h.status = status;
        h.extra = extra;
        h.aux = static_cast<std::uint32_t>(total_);
        h.range_begin = map_[p].begin;
        h.range_end = map_[p].end;
        const std::size_t bytes = payload ? map_[p].size() * sizeof(float) : 0;
        h.payload_bytes = bytes;
        sends_[p] = w_.send(c_.data_ep(p), make_tag(type, 1, j_.me.index), &h, sizeof h);
        payload_sends_[p] = bytes ? w_.send(c_.data_ep(p), make_tag(msg::payload, 1, j_.me.index), payload + map_[p].begin, bytes)
                                  : transport::request();
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
    const msg expected = type == msg::save ? msg::saved : msg::params;
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
    }
    if (type == msg::save) return;
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
