#include "library/ps/spare_pool.hpp"

#include "pstrain/error.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pstrain::ps {

namespace {

std::string ps_name(std::size_t p) { return fmt::format("ps {}", p); }

}  // namespace

spare_pool::spare_pool(transport& net, exchange& ex, std::size_t num_ps, bool listen)
    : net_(net), exchange_(ex), num_ps_(num_ps)
{
    spares_.reserve(net.num_peers() - num_ps);
    for (std::size_t k = num_ps; k < net.num_peers(); ++k) {
        auto& s = spares_.emplace_back();
        s.peer = k;
        if (listen) s.recv = net_.recv(k, channel::control, &s.in, sizeof s.in);
    }
}

std::size_t spare_pool::left() const
{
    return static_cast<std::size_t>(
        std::count_if(spares_.begin(), spares_.end(), [&](const spare_peer& s) { return idle(s); }));
}

std::vector<std::size_t> spare_pool::waiting() const
{
    std::vector<std::size_t> peers;
    for (const auto& s : spares_)
        if (idle(s)) peers.push_back(s.peer);
    return peers;
}

std::vector<std::size_t> spare_pool::lost() const
{
    std::vector<std::size_t> lost;
    for (std::size_t p = 0; p < num_ps_; ++p)
        if (net_.failed(exchange_.peer(p))) lost.push_back(p);
    return lost;
}

std::vector<std::size_t> spare_pool::serving(const std::vector<std::size_t>& lost) const
{
    std::vector<std::size_t> others;
    for (std::size_t p = 0; p < num_ps_; ++p)
        if (std::find(lost.begin(), lost.end(), p) == lost.end()) others.push_back(p);
    return others;
}

std::optional<std::size_t> spare_pool::replaceable(const std::vector<std::size_t>& lost,
                                                   const std::string& failed_peer) const
{
    if (lost.empty() || lost.size() > left()) return std::nullopt;
    for (const auto p : lost)
        if (failed_peer == net_.peer_name(exchange_.peer(p))) return p;
    return std::nullopt;  // another PS's abort, refusal or silence: no loss to heal
}

void spare_pool::enough_for(const std::vector<std::size_t>& lost) const
{
    if (!spares_.empty() && lost.size() > left()) too_few(lost);
}

std::vector<std::size_t> spare_pool::abandon(ticket_book& book)
{
    book.retire_all();
    const auto lost = this->lost();
    if (lost.size() > left()) too_few(lost);
    // A transfer with a lost PS may never end: UCX over TCP leaves a large
    // message's rendezvous, either way, pending on a failed endpoint (a
    // receive that had begun cannot be cancelled).  Not waited for: its
    // ticket, with the frames and buffers it names, stays (drop_retired)
    // until the client goes.
    book.for_each_op([&](operation& op) {
        if (std::find(lost.begin(), lost.end(), op.ps) == lost.end()) return;
        op.recv.cancel();
        op.payload_recv.cancel();
    });
    return lost;
}

std::vector<std::size_t> spare_pool::settle(ticket_book& book, const std::vector<std::size_t>& lost)
{
    const auto gone = [&](const operation& op) {
        return std::find(lost.begin(), lost.end(), op.ps) != lost.end() || net_.failed(exchange_.peer(op));
    };
    const auto settled = [&] {
        bool all = true;
        book.for_each_op([&](operation& op) {
            const bool away = gone(op);
            if (away || !op.pending()) {
                // Nothing more comes: a payload receive the reply did not use goes back too.
                if (away) op.recv.cancel();
                op.payload_recv.cancel();
                if (!away)
                    all = all && op.recv.complete() && op.payload_recv.complete() && op.send.complete() &&
                          op.payload_send.complete();
            } else {
                all = false;
            }
        });
        return all;
    };
    const bool in_time = exchange_.wait_for({}, "the replies the other PS tasks owe (a lost PS is replaced)", settled);
    const auto now = this->lost();
    if (!in_time) {
        const auto& named = now.empty() ? lost : now;
        throw peer_error(named.empty() ? std::string("ps") : net_.peer_name(exchange_.peer(named.front())),
                         fmt::format("lost {}, and the other PS tasks did not answer what they owed within {}s "
                                     "(--peer-timeout): training cannot go on",
                                     names(named), exchange_.timeout().count()));
    }
    if (now.size() > left()) too_few(now);
    book.drop_retired();
    return now;
}

void spare_pool::take_over(std::size_t p, const std::vector<std::size_t>& lost)
{
    const auto found = std::find_if(spares_.begin(), spares_.end(), [&](const spare_peer& s) { return idle(s); });
    if (found == spares_.end()) too_few(lost);
    auto& s = *found;
    wire::take_over m;
    m.index = static_cast<std::uint32_t>(p);
    m.num_ps = static_cast<std::uint32_t>(num_ps_);
    s.in = wire::encode(m);  // the chief posts no receive for a spare: its frame is free
    auto sent = net_.send(s.peer, channel::control, &s.in, sizeof s.in);
    exchange_.wait_for({}, nullptr, [&] { return sent.complete() || net_.failed(s.peer); });
    if (!sent.complete() || !sent.ok())
        throw peer_error(net_.peer_name(s.peer),
                         fmt::format("asking {} to take the place of lost {} failed: {}", net_.peer_name(s.peer),
                                     ps_name(p), sent.complete() ? sent.failure() : "no answer"));
    s.used = true;
    exchange_.reroute(p, s.peer);
}

void spare_pool::stand_in(std::size_t p)
{
    // Every spare that could still stand in gone (the chief ended them
    // when it could not go on): no reason to wait out the timeout.
    const auto none_left = [&] {
        return std::all_of(spares_.begin(), spares_.end(),
                           [&](const spare_peer& x) { return x.used || net_.failed(x.peer); });
    };
    spare_peer* s = nullptr;
    exchange_.wait_for({}, "the spare that takes a lost PS's place",
                       [&] { return (s = heard(p)) != nullptr || none_left(); });
    if (!s && none_left()) {
        std::vector<std::string> gone;
        for (const auto& x : spares_)
            if (!x.used) gone.push_back(net_.peer_name(x.peer));
        throw peer_error(
            gone.empty() ? ps_name(p) : gone.front(),
            fmt::format("lost {}, and no spare is left to take its place ({} ended first: see "
                        "its log and the chief's)",
                        ps_name(p),
                        gone.empty() ? std::string("none waited") : fmt::format("{}", fmt::join(gone, " and "))));
    }
    if (!s)
        throw peer_error(ps_name(p), fmt::format("lost {}, and no spare took its place within {}s (--peer-timeout)",
                                                 ps_name(p), exchange_.timeout().count()));
    s->used = true;
    exchange_.reroute(p, s->peer);
}

void spare_pool::cancel()
{
    for (auto& s : spares_) s.recv.cancel();
}

bool spare_pool::settled()
{
    return std::all_of(spares_.begin(), spares_.end(), [](spare_peer& s) { return s.recv.complete(); });
}

// The spare, among those that spoke, that says it took PS p's place.
spare_pool::spare_peer* spare_pool::heard(std::size_t p)
{
    for (auto& s : spares_) {
        if (!s.standing_in && s.recv.complete() && s.recv.ok()) {
            if (wire::check_envelope(s.in) || s.in.kind != static_cast<std::uint16_t>(wire::kind::standing_in) ||
                wire::body<wire::standing_in>(s.in).index >= num_ps_)
                throw peer_error(net_.peer_name(s.peer),
                                 fmt::format("{}, a spare, sent a {} message where standing_in was expected: are all "
                                             "tasks running the same pstrain?",
                                             net_.peer_name(s.peer), wire::kind_name(s.in.kind)));
            s.standing_in = wire::body<wire::standing_in>(s.in).index;
        }
        if (s.standing_in == p && !s.used && !net_.failed(s.peer)) return &s;
    }
    return nullptr;
}

std::string spare_pool::names(const std::vector<std::size_t>& lost) const
{
    std::vector<std::string> names;
    for (const auto p : lost) names.push_back(net_.peer_name(exchange_.peer(p)));
    return fmt::format("{}", fmt::join(names, " and "));
}

// More PS tasks lost than spares are left: the error names them all.
void spare_pool::too_few(const std::vector<std::size_t>& lost) const
{
    const auto left = this->left();
    throw peer_error(net_.peer_name(exchange_.peer(lost.front())),
                     fmt::format("lost {}, and {} spare{} left to take their places: training cannot go on",
                                 names(lost), left, left == 1 ? " is" : "s are"));
}

}  // namespace pstrain::ps
