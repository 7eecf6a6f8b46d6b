#include "pstrain/loopback.hpp"

#include "pstrain/error.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace pstrain::ps {

namespace {

struct op_state {
    std::atomic<bool> complete{false};
    bool ok = true;
    std::size_t length = 0;
    std::string failure;
};

struct posted_receive {
    void* buffer;
    std::size_t capacity;
    std::shared_ptr<op_state> op;
};

// Messages from one sender to one receiver on one channel.
struct mailbox {
    std::deque<std::vector<std::uint8_t>> arrived;  // not yet received
    std::deque<posted_receive> waiting;             // receives posted before their message
    bool holding = false;                           // loopback_network::hold_messages
    std::deque<std::vector<std::uint8_t>> held;     // sent, still in flight
};

}  // namespace

// Every node's mailboxes under one lock; one condition variable wakes the
// waiters, a generation count tells them something happened.
struct loopback_network::state {
    state(int ps, int workers)
        : num_ps(ps), num_nodes(ps + workers), boxes(std::size_t(num_nodes) * num_nodes * 2), dead(num_nodes),
          reconnections(num_nodes, 0)
    {}

    const int num_ps, num_nodes;
    std::mutex mu;
    std::condition_variable cv;
    std::atomic<std::uint64_t> generation{0};
    std::vector<mailbox> boxes;  // [receiver][sender][channel]
    std::vector<char> dead;
    std::vector<std::uint64_t> reconnections;        // per node: new processes in its place
    std::map<std::uintptr_t, std::size_t> memories;  // allocate()'s, by address: their sizes

    mailbox& box(int receiver, int sender, channel ch)
    {
        return boxes[(std::size_t(receiver) * num_nodes + sender) * 2 + static_cast<std::size_t>(ch)];
    }
    std::string name(int node) const
    {
        return node < num_ps ? fmt::format("ps {}", node) : fmt::format("worker {}", node - num_ps);
    }
    // Under the lock: wakes every waiter.
    void changed()
    {
        generation.fetch_add(1, std::memory_order_release);
        cv.notify_all();
    }
    static void finish(op_state& op, bool ok, std::size_t length, std::string failure = {})
    {
        op.ok = ok;
        op.length = length;
        op.failure = std::move(failure);
        op.complete.store(true, std::memory_order_release);
    }
    static void deliver(const std::uint8_t* data, std::size_t bytes, posted_receive& r)
    {
        if (bytes > r.capacity) {
            finish(*r.op, false, 0,
                   fmt::format("receive failed: a message of {} bytes for a buffer of {}", bytes, r.capacity));
            return;
        }
        if (bytes) std::memcpy(r.buffer, data, bytes);
        finish(*r.op, true, bytes);
    }
    // Under the lock: a message reaches its mailbox.
    static void put(mailbox& box, std::vector<std::uint8_t> message)
    {
        if (box.waiting.empty()) {
            box.arrived.push_back(std::move(message));
            return;
        }
        auto r = std::move(box.waiting.front());
        box.waiting.pop_front();
        deliver(message.data(), message.size(), r);
    }
    // Under the lock: what the link from `sender` to `receiver` holds
    // arrives (or, `drop`, is lost), and it holds nothing more.
    void flush(int receiver, int sender, bool drop)
    {
        for (auto ch : {channel::control, channel::payload}) {
            auto& b = box(receiver, sender, ch);
            if (!drop)
                for (auto& m : b.held) put(b, std::move(m));
            b.held.clear();
            b.holding = false;
        }
    }
    // The node's transport closes: what it holds in flight arrives first
    // (flushed) or is dropped (force), then its peers see it gone.
    void close(int node, bool force)
    {
        std::lock_guard lock(mu);
        for (int other = 0; other < num_nodes; ++other) flush(other, node, force);
        kill_locked(node);
    }
    void kill(int node)
    {
        std::lock_guard lock(mu);
        kill_locked(node);
    }
    void kill_locked(int node)
    {
        dead[static_cast<std::size_t>(node)] = 1;
        for (int other = 0; other < num_nodes; ++other)
            for (auto ch : {channel::control, channel::payload})
                for (auto* b : {&box(other, node, ch), &box(node, other, ch)}) {
                    for (auto& r : b->waiting) finish(*r.op, false, 0, "receive failed: the peer is gone");
                    b->waiting.clear();
                }
        changed();
    }
    void restart(int node)
    {
        std::lock_guard lock(mu);
        if (!dead[static_cast<std::size_t>(node)])
            throw error(fmt::format("{} is alive: only a killed task is restarted", name(node)));
        dead[static_cast<std::size_t>(node)] = 0;
        ++reconnections[static_cast<std::size_t>(node)];
        for (int other = 0; other < num_nodes; ++other)
            for (auto ch : {channel::control, channel::payload})
                for (auto* b : {&box(other, node, ch), &box(node, other, ch)}) b->arrived.clear();
        changed();
    }
};

namespace {

using net_state = loopback_network::state;

class loopback_transfer : public transfer::operation {
public:
    loopback_transfer(std::shared_ptr<net_state> s, std::shared_ptr<op_state> op, mailbox* box)
        : s_(std::move(s)), op_(std::move(op)), box_(box)
    {}
    bool complete() override { return op_->complete.load(std::memory_order_acquire); }
    bool ok() const override { return op_->ok; }
    std::size_t length() const override { return op_->length; }
    std::string failure() const override { return op_->failure; }
    void cancel() override
    {
        if (!box_ || complete()) return;
        std::lock_guard lock(s_->mu);
        auto& w = box_->waiting;
        auto it = std::find_if(w.begin(), w.end(), [&](const posted_receive& r) { return r.op == op_; });
        if (it == w.end()) return;
        w.erase(it);
        net_state::finish(*op_, false, 0, "receive cancelled");
        s_->changed();
    }

private:
    std::shared_ptr<net_state> s_;
    std::shared_ptr<op_state> op_;
    mailbox* box_;  // a receive's mailbox, to cancel it
};

// An rkey: the network, the memory's address and its size.
struct loopback_key {
    std::uint64_t network = 0, address = 0, bytes = 0;
};

// Memory the network knows by its address, until it goes.
class plain_memory : public exchange_memory {
public:
    plain_memory(std::size_t bytes, std::shared_ptr<net_state> s)
        : bytes_(bytes), data_(new float[(bytes + 3) / 4]()), s_(std::move(s))
    {
        std::lock_guard lock(s_->mu);
        s_->memories[address()] = bytes_;
    }
    ~plain_memory() override
    {
        std::lock_guard lock(s_->mu);
        s_->memories.erase(address());
    }
    void* data() const override { return data_.get(); }
    std::size_t size() const override { return bytes_; }
    std::vector<std::uint8_t> packed_rkey() const override
    {
        const loopback_key k{reinterpret_cast<std::uintptr_t>(s_.get()), address(), bytes_};
        std::vector<std::uint8_t> key(sizeof k);
        std::memcpy(key.data(), &k, sizeof k);
        return key;
    }

private:
    std::uintptr_t address() const { return reinterpret_cast<std::uintptr_t>(data_.get()); }
    std::size_t bytes_;
    std::unique_ptr<float[]> data_;
    std::shared_ptr<net_state> s_;
};

// One address space: a peer's address is this process's, inside the
// memory the key named.
class same_process_memory : public peer_memory {
public:
    same_process_memory(std::uint64_t address, std::uint64_t bytes) : address_(address), bytes_(bytes) {}
    void* local_pointer(std::uint64_t remote_address, std::size_t bytes) const override
    {
        if (remote_address < address_ || remote_address - address_ > bytes_ ||
            bytes > bytes_ - (remote_address - address_))
            throw error(fmt::format("{} bytes at {:#x} are not inside the {} bytes at {:#x} its rkey names", bytes,
                                    remote_address, bytes_, address_));
        return reinterpret_cast<void*>(remote_address);
    }

private:
    std::uint64_t address_, bytes_;
};

class loopback_transport : public transport {
public:
    loopback_transport(std::shared_ptr<net_state> s, int node) : s_(std::move(s)), node_(node) {}

    std::size_t num_peers() const override
    {
        return static_cast<std::size_t>(node_ < s_->num_ps ? s_->num_nodes - s_->num_ps : s_->num_ps);
    }
    std::string peer_name(std::size_t peer) const override { return s_->name(peer_node(peer)); }

    transfer send(std::size_t peer, channel ch, const void* data, std::size_t bytes) override
    {
        const int to = peer_node(peer);
        auto op = std::make_shared<op_state>();
        std::lock_guard lock(s_->mu);
        if (s_->dead[static_cast<std::size_t>(to)] || s_->dead[static_cast<std::size_t>(node_)]) {
            net_state::finish(*op, false, 0, "send failed: the peer is gone");
        } else {
            auto& box = s_->box(to, node_, ch);
            const auto* bytes_in = static_cast<const std::uint8_t*>(data);
            if (box.holding) {
                box.held.emplace_back(bytes_in, bytes_in + bytes);
            } else if (!box.waiting.empty()) {
                auto r = std::move(box.waiting.front());
                box.waiting.pop_front();
                net_state::deliver(bytes_in, bytes, r);
            } else {
                box.arrived.emplace_back(bytes_in, bytes_in + bytes);
            }
            net_state::finish(*op, true, bytes);
            s_->changed();
        }
        return transfer(std::make_unique<loopback_transfer>(s_, std::move(op), nullptr));
    }

    transfer recv(std::size_t peer, channel ch, void* buffer, std::size_t capacity) override
    {
        const int from = peer_node(peer);
        auto op = std::make_shared<op_state>();
        std::lock_guard lock(s_->mu);
        auto& box = s_->box(node_, from, ch);
        posted_receive r{buffer, capacity, op};
        if (!box.arrived.empty()) {
            auto m = std::move(box.arrived.front());
            box.arrived.pop_front();
            net_state::deliver(m.data(), m.size(), r);
        } else if (s_->dead[static_cast<std::size_t>(from)] || s_->dead[static_cast<std::size_t>(node_)]) {
            net_state::finish(*op, false, 0, "receive failed: the peer is gone");
        } else {
            box.waiting.push_back(std::move(r));
        }
        return transfer(std::make_unique<loopback_transfer>(s_, std::move(op), &box));
    }

    bool wait_until(const std::function<bool()>& pred, clock::time_point deadline) override
    {
        for (;;) {
            const auto seen = s_->generation.load(std::memory_order_acquire);
            if (pred()) return true;
            if (clock::now() >= deadline) return false;
            const auto spin_end = std::min(deadline, clock::now() + spin_for_);
            while (clock::now() < spin_end && s_->generation.load(std::memory_order_acquire) == seen)
                std::this_thread::yield();
            std::unique_lock lock(s_->mu);
            s_->cv.wait_until(lock, std::min(deadline, clock::now() + std::chrono::milliseconds(100)),
                              [&] { return s_->generation.load(std::memory_order_acquire) != seen; });
        }
    }

    bool failed(std::size_t peer) const override
    {
        std::lock_guard lock(s_->mu);
        return s_->dead[static_cast<std::size_t>(peer_node(peer))] != 0;
    }
    std::string failure(std::size_t peer) const override { return failed(peer) ? "the peer is gone" : ""; }
    std::uint64_t reconnections(std::size_t peer) const override
    {
        std::lock_guard lock(s_->mu);
        return s_->reconnections[static_cast<std::size_t>(peer_node(peer))];
    }

    std::unique_ptr<exchange_memory> allocate(std::size_t bytes) override
    {
        return std::make_unique<plain_memory>(bytes, s_);
    }

    std::unique_ptr<peer_memory> map(std::size_t, std::span<const std::uint8_t> key) override
    {
        loopback_key k;
        if (key.size() != sizeof k) return nullptr;
        std::memcpy(&k, key.data(), sizeof k);
        if (k.network != network_id()) return nullptr;
        {
            // Only memory this network handed out, as large as it is.
            std::lock_guard lock(s_->mu);
            auto it = s_->memories.find(k.address);
            if (it == s_->memories.end() || it->second != k.bytes)
                throw error(fmt::format("an rkey names {} bytes at {:#x}, which this network did not hand out", k.bytes,
                                        k.address));
        }
        return std::make_unique<same_process_memory>(k.address, k.bytes);
    }

    void close(bool force) override { s_->close(node_, force); }

private:
    int peer_node(std::size_t peer) const
    {
        if (peer >= num_peers())
            throw error(fmt::format("peer {} does not exist: {} has {}", peer, s_->name(node_), num_peers()));
        return node_ < s_->num_ps ? s_->num_ps + static_cast<int>(peer) : static_cast<int>(peer);
    }
    std::uint64_t network_id() const { return reinterpret_cast<std::uintptr_t>(s_.get()); }

    std::shared_ptr<net_state> s_;
    int node_;
    // Spin (yielding) this long before sleeping: a PS thread waiting for the
    // next push of a training loop beside it (--standalone: about 0.4 ms a
    // step) catches it without a wake-up, which costs more on a VM.
    std::chrono::microseconds spin_for_{500};
};

}  // namespace

loopback_network::loopback_network(int num_ps, int num_workers)
{
    if (num_ps < 1 || num_workers < 1) throw error("a loopback network needs at least one PS and one worker");
    s_ = std::make_shared<state>(num_ps, num_workers);
    for (int i = 0; i < num_ps; ++i) ps_.push_back(std::make_unique<loopback_transport>(s_, i));
    for (int i = 0; i < num_workers; ++i) workers_.push_back(std::make_unique<loopback_transport>(s_, num_ps + i));
}

loopback_network::~loopback_network() = default;

transport& loopback_network::ps(int i) { return *ps_.at(static_cast<std::size_t>(i)); }
transport& loopback_network::worker(int i) { return *workers_.at(static_cast<std::size_t>(i)); }
void loopback_network::kill_ps(int i) { s_->kill(i); }
void loopback_network::kill_worker(int i) { s_->kill(s_->num_ps + i); }

namespace {

// The nodes of the link between worker w and PS p: (worker's, PS's).
std::pair<int, int> link_nodes(const net_state& s, int worker, int ps)
{
    if (ps < 0 || ps >= s.num_ps || worker < 0 || worker >= s.num_nodes - s.num_ps)
        throw error(fmt::format("no link between worker {} and ps {} in a network of {} ps and {} workers", worker, ps,
                                s.num_ps, s.num_nodes - s.num_ps));
    return {s.num_ps + worker, ps};
}

void hold(net_state& s, int receiver, int sender)
{
    std::lock_guard lock(s.mu);
    for (auto ch : {channel::control, channel::payload}) s.box(receiver, sender, ch).holding = true;
}

}  // namespace

void loopback_network::hold_messages(int worker, int ps)
{
    const auto [w, p] = link_nodes(*s_, worker, ps);
    hold(*s_, p, w);
}

void loopback_network::hold_replies(int ps, int worker)
{
    const auto [w, p] = link_nodes(*s_, worker, ps);
    hold(*s_, w, p);
}

void loopback_network::release_messages(int worker, int ps)
{
    const auto [w, p] = link_nodes(*s_, worker, ps);
    std::lock_guard lock(s_->mu);
    s_->flush(p, w, false);
    s_->changed();
}

transport& loopback_network::restart_worker(int i)
{
    auto& slot = workers_.at(static_cast<std::size_t>(i));
    s_->restart(s_->num_ps + i);
    retired_.push_back(std::move(slot));
    slot = std::make_unique<loopback_transport>(s_, s_->num_ps + i);
    return *slot;
}

}  // namespace pstrain::ps
