#include "library/transport/ucx_transport.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"

#include <fmt/format.h>

namespace pstrain::ucx {

namespace {

class ucx_transfer : public ps::transfer::operation {
public:
    explicit ucx_transfer(request r) : r_(std::move(r)) {}
    bool complete() override { return r_.done(); }
    bool ok() const override { return r_.status() == UCS_OK; }
    std::size_t length() const override { return r_.length(); }
    std::string failure() const override
    {
        return fmt::format("{} failed: {}", r_.what(), ucs_status_string(r_.status()));
    }
    void cancel() override { r_.cancel(owner_); }
    void set_owner(ucp_worker_h w) { owner_ = w; }

private:
    request r_;
    ucp_worker_h owner_ = nullptr;
};

ps::transfer wrap(request r, ucp_worker_h owner)
{
    auto impl = std::make_unique<ucx_transfer>(std::move(r));
    impl->set_owner(owner);
    return ps::transfer(std::move(impl));
}

class ucx_memory : public ps::exchange_memory {
public:
    ucx_memory(context& ctx, std::size_t bytes) : m_(ctx, bytes) {}
    void* data() const override { return m_.data(); }
    std::size_t size() const override { return m_.size(); }
    std::vector<std::uint8_t> packed_rkey() const override { return m_.packed_rkey(); }

private:
    mapped_memory m_;
};

class ucx_peer_memory : public ps::peer_memory {
public:
    ucx_peer_memory(ucp_ep_h ep, std::span<const std::uint8_t> key) : key_(ep, key) {}
    void* local_pointer(std::uint64_t remote_address, std::size_t bytes) const override
    {
        return key_.local_range(remote_address, bytes);
    }

private:
    remote_key key_;
};

}  // namespace

ucx_transport::ucx_transport(std::unique_ptr<context> ctx, std::unique_ptr<engine> eng, connections conns,
                             std::uint32_t my_index, std::vector<std::string> names, heartbeat_config beats,
                             std::vector<std::string> addresses)
    : ctx_(std::move(ctx)), engine_(std::move(eng)), conns_(std::move(conns)), me_(my_index), names_(std::move(names)),
      scratch_(4096), addresses_(std::move(addresses)), silence_(names_.size(), beats, ps::clock::now()),
      beat_in_(names_.size()), beat_recv_(names_.size()), beat_send_(names_.size()), beat_posted_(names_.size(), 0),
      reconnections_(names_.size(), 0)
{
    conns_.tokens.resize(names_.size());
    addresses_.resize(names_.size());
    conns_.peers.resize(names_.size());  // an elastic job's room for workers that join later: no endpoint yet
    conns_.fast.resize(names_.size());
    if (conns_.door) conns_.door->let_rejoin([this](std::size_t i) { return i < names_.size() && failed(i); });
    // The first heartbeats go out when this task first waits (guard).
}

void ucx_transport::beat()
{
    if (!silence_.config().enabled() || closed_) return;
    const auto now = ps::clock::now();
    for (std::size_t i = 0; i < names_.size(); ++i) {
        if (!conns_.peers[i] || silence_.silent(i)) continue;
        // Every heartbeat already here, then the next receive posted.
        auto& r = beat_recv_[i];
        for (int n = 0; n < 64; ++n) {
            if (beat_posted_[i]) {
                if (!r.done()) break;
                beat_posted_[i] = false;
                if (r.status() != UCS_OK) break;  // cancelled: closing
                silence_.heard(i, now);
            }
            r = engine_->recv(make_tag(heartbeat_channel, static_cast<std::uint32_t>(i), conns_.tokens[i].recv_token),
                              tag_full_mask, &beat_in_[i], sizeof beat_in_[i]);
            beat_posted_[i] = true;
        }
    }
    if (silence_.beat_due(now)) {
        ++beat_out_;
        for (std::size_t i = 0; i < names_.size(); ++i) {
            if (!conns_.peers[i] || conns_.peers[i]->failed() || silence_.silent(i)) continue;
            // One heartbeat in flight per peer: a peer that does not take
            // them does not pile them up here.
            if (!beat_send_[i].done()) continue;
            beat_send_[i] =
                engine_->send(conns_.peers[i]->get(), make_tag(heartbeat_channel, me_, conns_.tokens[i].send_token),
                              &beat_out_, sizeof beat_out_);
        }
    }
    for (auto i : silence_.check(now))
        log::debug("{} is {}", names_[i], silence_reason(silence_.silent_for(i), silence_.config(), addresses_[i]));
}

ucx_transport::~ucx_transport()
{
    try {
        close(true);
    } catch (...) {}
}

ps::transfer ucx_transport::send(std::size_t peer, ps::channel ch, const void* data, std::size_t bytes)
{
    if (peer >= names_.size() || !conns_.peers[peer]) throw error(fmt::format("send to peer {}: no such peer", peer));
    return wrap(engine_->send(conns_.data_ep(peer),
                              make_tag(static_cast<std::uint8_t>(ch), me_, conns_.tokens[peer].send_token), data,
                              bytes),
                nullptr);
}

ps::transfer ucx_transport::recv(std::size_t peer, ps::channel ch, void* buffer, std::size_t capacity)
{
    if (peer >= names_.size()) throw error(fmt::format("receive from peer {}: no such peer", peer));
    return wrap(engine_->recv(make_tag(static_cast<std::uint8_t>(ch), static_cast<std::uint32_t>(peer),
                                       conns_.tokens[peer].recv_token),
                              tag_full_mask, buffer, capacity),
                engine_->get());
}

bool ucx_transport::wait_until(const std::function<bool()>& pred, ps::clock::time_point deadline)
{
    return engine_->wait_until(
        [&] {
            guard();
            return pred();
        },
        deadline);
}

void ucx_transport::guard()
{
    const auto now = ps::clock::now();
    if (now < next_guard_) return;
    next_guard_ = now + std::chrono::milliseconds(20);
    beat();
    if (conns_.door && conns_.listen) {
        conns_.door->accept(*conns_.listen);
        conns_.door->poll();
        for (auto& r : conns_.door->take_rejoined()) replace(r);
    }
    std::erase_if(drops_, [](request& r) { return r.done(); });
    drop_foreign_messages();
}

// A message that reached this process without its pair's token (UCX keeps
// what matches no receive): received into a scratch buffer, truncated, and
// counted.  The first unexpected message of a peer of the job stops the
// scan: it waits for its receive, and what queues behind it is seen later.
void ucx_transport::drop_foreign_messages()
{
    for (int n = 0; n < 64; ++n) {
        ucp_tag_recv_info_t info{};
        if (!ucp_tag_probe_nb(engine_->get(), 0, 0, 0, &info)) return;
        const auto t = split_tag(info.sender_tag);
        const bool ours =
            t.channel == bootstrap_channel
                ? conns_.door != nullptr
                : (t.channel <= static_cast<std::uint8_t>(ps::channel::payload) || t.channel == heartbeat_channel) &&
                      t.sender < names_.size() && conns_.peers[t.sender] &&
                      t.token == conns_.tokens[t.sender].recv_token;
        if (ours) return;
        ucp_tag_message_h m = ucp_tag_probe_nb(engine_->get(), info.sender_tag, tag_full_mask, 1, &info);
        if (!m) return;
        ucp_request_param_t param{};
        param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        drops_.emplace_back(ucp_tag_msg_recv_nbx(engine_->get(), scratch_.data(), scratch_.size(), m, &param), "drop",
                            engine_->get());
        ++dropped_;
        if (dropped_ == 1 || dropped_ % 1000 == 0)
            log::warn("dropped {} message{} from a process that did not pass the handshake (the last: {} bytes, tag "
                      "{:#018x}): "
                      "only this job step's tasks may send to it",
                      dropped_, dropped_ == 1 ? "" : "s", info.length, info.sender_tag);
    }
}

void ucx_transport::replace(gate::rejoin& r)
{
    const auto i = r.worker;
    const bool first = !conns_.peers[i] && reconnections_[i] == 0;  // room an elastic job kept for a new worker
    if (conns_.peers[i]) conns_.peers[i]->close(std::chrono::milliseconds(0), true);
    conns_.peers[i] = std::move(r.ep);
    if (i < conns_.fast.size() && conns_.fast[i]) {
        conns_.fast[i]->close(std::chrono::milliseconds(0), true);
        conns_.fast[i].reset();
    }
    conns_.tokens[i] = r.tokens;
    if (beat_posted_[i]) {
        beat_recv_[i].cancel(engine_->get());  // the lost one's token: it would never match
        beat_posted_[i] = false;
    }
    silence_.replaced(i, ps::clock::now());
    ++reconnections_[i];
    if (first) log::info("{} connected, in room the job kept for a new worker", names_[i]);
    else log::info("{} connected again, in place of the one that was lost", names_[i]);
}

bool ucx_transport::failed(std::size_t peer) const
{
    return !conns_.peers[peer] || conns_.peers[peer]->failed() || silence_.silent(peer);
}

std::string ucx_transport::failure(std::size_t peer) const
{
    if (!conns_.peers[peer]) return "closed";
    if (silence_.silent(peer) && !conns_.peers[peer]->failed())
        return silence_reason(silence_.silent_for(peer), silence_.config(), addresses_[peer]);
    return ucs_status_string(conns_.peers[peer]->failure());
}

std::unique_ptr<ps::exchange_memory> ucx_transport::allocate(std::size_t bytes)
{
    return std::make_unique<ucx_memory>(*ctx_, bytes);
}

std::unique_ptr<ps::peer_memory> ucx_transport::map(std::size_t peer, std::span<const std::uint8_t> rkey)
{
    return std::make_unique<ucx_peer_memory>(conns_.data_ep(peer), rkey);
}

void ucx_transport::close(bool force)
{
    if (dropped_ > 1 && !closed_)
        log::warn("dropped {} messages in all from processes that did not pass the handshake", dropped_);
    closed_ = true;
    // Heartbeats end first: a receive still posted is cancelled, a send
    // to a silent peer dropped with its endpoint.
    for (auto& r : beat_recv_) r.cancel(engine_->get());
    if (conns_.door) conns_.door->close(force);
    for (auto* list : {&conns_.fast, &conns_.peers})
        for (auto& ep : *list)
            if (ep) ep->close(std::chrono::milliseconds(force ? 100 : 500), force);
}

}  // namespace pstrain::ucx
