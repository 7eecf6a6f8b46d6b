#include "trainer/ps/server.hpp"

#include "common/error.hpp"
#include "common/log.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/ps/protocol.hpp"
#include "trainer/ps/shard.hpp"
#include "trainer/session.hpp"
#include "trainer/signals.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>

#include <fmt/format.h>

namespace pstrain::ps {
namespace {

using clock = std::chrono::steady_clock;
constexpr auto far_future = std::chrono::hours(24 * 365);

struct peer_state {
    header in;                       // header of the last message
    std::vector<float> slot;         // its payload (a gradient, or a MAP request)
    transport::request recv;         // the posted header receive
    transport::request payload_recv; // the posted payload receive
    bool posted = false, payload_posted = false;
    bool lost = false;
    bool told_done = false;          // a reply said done or stopped: it leaves now
    std::uint64_t batches = 0;       // batches it had drawn at its last push
    header out;                      // header of the reply in flight
    transport::request send, payload_send;
    const float* sending = nullptr;  // the values buffer its reply reads until payload_send is done
    // Its exchange buffers mapped here (MAP), already at this shard's range.
    std::unique_ptr<transport::remote_key> key;
    float* mapped_params = nullptr;
    const float* mapped_grads = nullptr;

    // The last PUSH/PULL goes through the mapped buffers.
    bool via_map() const
    {
        const auto t = static_cast<msg>(in.type);
        return mapped_params && (t == msg::push || t == msg::pull) && in.status == in_mapped_memory;
    }

    // A whole message is here: its header, and its payload if it has one.
    bool ready() { return posted && recv.done() && (in.payload_bytes == 0 || payload_recv.done()); }
};

class server {
public:
    server(const trainer::train_options& o, const bootstrap::job& j, transport::worker& w, bootstrap::connections& c)
        : o_(o), j_(j), w_(w), c_(c), workers_(static_cast<std::size_t>(j.num_workers)),
          sync_(o.sync_replicas), replicas_(o.replicas_to_aggregate > 0 ? o.replicas_to_aggregate : j.num_workers)
    {
        // run_distributed has checked --replicas-to-aggregate against the workers.
    }

    int run()
    {
        int code = serve();
        // Posted receives go back to UCX before the worker is destroyed.
        for (auto& p : workers_) {
            if (p.posted) p.recv.cancel(w_.get());
            if (p.payload_posted) p.payload_recv.cancel(w_.get());
        }
        w_.wait_until(
            [&] {
                return std::all_of(workers_.begin(), workers_.end(), [](auto& p) {
                    return (!p.posted || p.recv.done()) && (!p.payload_posted || p.payload_recv.done());
                });
            },
            clock::now() + std::chrono::seconds(1));
        return code;
    }

private:
    int serve()
    {
        receive_init();
        for (;;) {
            if (shutdown_ && (everyone_told() || clock::now() > shutdown_deadline_)) {
                if (!everyone_told())
                    log::warn("not every worker came back for its last reply within {}s of the chief's shutdown: exiting",
                              shutdown_wait.count());
                drain_sends();
                return stopped_ ? trainer::preempted_exit_status : 0;
            }
            std::optional<std::size_t> ready;
            w_.wait_until(
                [&] {
                    for (std::size_t i = 0; i < workers_.size(); ++i) {
                        auto& p = workers_[i];
                        if (!p.lost && (c_.peers[i]->failed() || p.ready())) {
                            ready = i;
                            return true;
                        }
                    }
                    return false;
                },
                shutdown_ ? shutdown_deadline_ : clock::now() + far_future);
            if (!ready) continue;
            const std::size_t i = *ready;
            auto& p = workers_[i];
            if (c_.peers[i]->failed() || p.recv.status() != UCS_OK ||
                (p.in.payload_bytes > 0 && p.payload_recv.status() != UCS_OK)) {
                if (auto code = on_worker_lost(i)) return *code;
                continue;
            }
            p.posted = false;
            if (p.in.payload_bytes > 0) p.payload_posted = false;
            if (auto code = handle(i)) return *code;
        }
    }

    // The chief's first message sets the shard (its size comes with it).
    void receive_init()
    {
        auto& chief = *c_.peers[0];
        const auto who = j_.peer_name(role::worker, 0);
        header h;
        auto r = w_.recv(make_tag(msg::init, 1, 0), tag_full_mask, &h, sizeof h);
        w_.wait_until([&] { return r.done() || chief.failed(); }, clock::now() + far_future);
        if (!r.done() || r.status() != UCS_OK)
            throw error(fmt::format("lost {} before it initialised the model: {}", who,
                                    ucs_status_string(chief.failed() ? chief.failure() : r.status())));
        const bool restore = h.status == 1;
        if (h.magic != header{}.magic || h.payload_bytes % sizeof(float) != 0 || h.range_end < h.range_begin ||
            (!restore && (h.range_end - h.range_begin) * sizeof(float) != h.payload_bytes) || (restore && h.payload_bytes != 0))
            throw error("the chief's INIT message is malformed: are all tasks running the same pstrain?");
        shard_range range{h.range_begin, h.range_end};
        shard_.emplace(range, trainer::optimizer_from(o_));
        total_params_ = h.aux;
        step_ = h.step;
        if (restore) {
            const auto m = checkpoint::read_manifest(o_.checkpoint_dir, checkpoint::manifest_name(h.step));
            auto d = checkpoint::load_range(o_.checkpoint_dir, m, range);
            shard_->restore(d.values, d.state, d.updates);
            restored_ = h.step + 1;
            if (m.worker_batches.size() == workers_.size())
                for (std::size_t i = 0; i < workers_.size(); ++i) workers_[i].batches = m.worker_batches[i];
        } else {
            std::vector<float> values(h.payload_bytes / sizeof(float));
            auto payload = w_.recv(make_tag(msg::payload, 1, 0), tag_full_mask, values.data(), h.payload_bytes);
            w_.wait(payload, who, clock::now() + std::chrono::seconds(60));
            shard_->assign(values);
        }
        log::info("shard [{}, {}) of {} parameters ({:.1f} KB), {} mode{}, {} global step {}", range.begin, range.end,
                  total_params_, range.size() * 4 / 1000.0, sync_ ? "sync" : "async",
                  sync_ ? fmt::format(" aggregating {} of {} workers", replicas_, j_.num_workers) : "",
                  restore ? "restored from the checkpoint at" : "starting at", step_);
        done_ = step_ >= static_cast<std::uint64_t>(o_.train_steps);
        sum_.resize(range.size());
        contributed_.assign(workers_.size(), false);
        for (std::size_t i = 0; i < workers_.size(); ++i) {
            workers_[i].slot.resize(std::max(range.size(), max_map_request / sizeof(float)));
            post(i);
        }
        reply(0, reply_status::ok);
    }

    // Posts the next header receive, and a payload receive if none is posted.
    void post(std::size_t i)
    {
        auto& p = workers_[i];
        p.recv = w_.recv(sender_tag(1, static_cast<int>(i)), tag_header_mask, &p.in, sizeof p.in);
        p.posted = true;
        if (!p.payload_posted) {
            p.payload_recv = w_.recv(make_tag(msg::payload, 1, static_cast<int>(i)), tag_full_mask, p.slot.data(),
                                     p.slot.size() * sizeof(float));
            p.payload_posted = true;
        }
    }

    // Sends the shard's values to worker i.  UCX may read them zero-copy
    // until the send completes, so they must not change meanwhile: sync
    // waits for every reply of a step before the next update; async writes
    // each update into a spare buffer no reply is reading (free_spare).
    void reply(std::size_t i, reply_status status)
    {
        auto& p = workers_[i];
        w_.wait_until([&] { return p.payload_send.done() || c_.peers[i]->failed(); }, clock::now() + far_future);
        begin_reply(i, msg::params);
        const auto sent = done_ ? (stopped_ ? reply_status::stopped : reply_status::done) : status;
        p.out.status = static_cast<std::uint32_t>(sent);
        p.out.restored = restored_;
        if (sent == reply_status::done || sent == reply_status::stopped) p.told_done = true;
        std::span<const float> values = shard_->values();
        if (p.via_map()) {
            // The worker waits for this reply: its buffer is ours until the header leaves.
            std::copy(values.begin(), values.end(), p.mapped_params);
            p.sending = nullptr;
            p.out.payload_bytes = 0;
        } else {
            p.sending = values.data();
            p.out.payload_bytes = values.size_bytes();
            p.payload_send = w_.send(c_.data_ep(i), make_tag(msg::payload, 0, j_.me.index), values.data(), values.size_bytes());
        }
        send_reply(i);
    }

    // The header of a reply to worker i: who, the step, the shard's range
    // (once the previous header has left: UCX may still read it).
    void begin_reply(std::size_t i, msg type)
    {
        auto& p = workers_[i];
        if (!p.send.done()) w_.wait_until([&] { return p.send.done() || c_.peers[i]->failed(); }, clock::now() + far_future);
        p.out = header{};
        p.out.type = static_cast<std::uint8_t>(type);
        p.out.sender_index = static_cast<std::uint16_t>(j_.me.index);
        p.out.step = step_;
        p.out.range_begin = shard_->range().begin;
        p.out.range_end = shard_->range().end;
    }

    // Sends the header begun by begin_reply and posts worker i's next receive.
    void send_reply(std::size_t i)
    {
        auto& p = workers_[i];
        p.send = w_.send(c_.data_ep(i), make_tag(static_cast<msg>(p.out.type), 0, j_.me.index), &p.out, sizeof p.out);
        if (!p.lost && !p.posted) post(i);
    }

    // A values buffer that no reply in flight reads: the old values stay
    // where the replies being sent read them, without a copy.  At most one
    // more buffer than workers.
    std::vector<float>& free_spare()
    {
        for (auto& b : spares_)
            if (b.empty() || !read_by_a_reply(b.data())) return b;
        return spares_.emplace_back();
    }

    // A reply in flight still reads `values`.
    bool read_by_a_reply(const float* values)
    {
        for (std::size_t k = 0; k < workers_.size(); ++k)
            if (workers_[k].sending == values && !workers_[k].payload_send.done() && !c_.peers[k]->failed()) return true;
        return false;
    }

    // Worker i's gradient: in its mapped buffer or in the slot its payload came to.
    std::span<const float> gradient(std::size_t i) const
    {
        const auto& p = workers_[i];
        return {p.via_map() ? p.mapped_grads : p.slot.data(), shard_->range().size()};
    }

    // Before the values change: every reply in flight has left.
    void drain_sends()
    {
        w_.wait_until(
            [&] {
                for (std::size_t i = 0; i < workers_.size(); ++i)
                    if ((!workers_[i].send.done() || !workers_[i].payload_send.done()) && !c_.peers[i]->failed()) return false;
                return true;
            },
            clock::now() + far_future);
    }

    std::optional<int> handle(std::size_t i)
    {
        auto& p = workers_[i];
        if (p.in.magic != header{}.magic) throw error(fmt::format("a malformed message came from {}", j_.peer_name(role::worker, static_cast<int>(i))));
        switch (static_cast<msg>(p.in.type)) {
        case msg::pull:
            reply(i, reply_status::ok);
            return std::nullopt;
        case msg::push:
            on_push(i);
            return std::nullopt;
        case msg::save:
            on_save(i);
            return std::nullopt;
        case msg::map:
            begin_reply(i, msg::mapped);
            p.out.status = map_buffers(i) ? 1 : 0;
            send_reply(i);
            return std::nullopt;
        case msg::shutdown:
            on_shutdown(p.in.status == 1);
            return std::nullopt;
        case msg::init:
            reply(i, reply_status::ok);  // a repeated INIT (the chief restarted its connection): ignore the values
            return std::nullopt;
        default:
            throw error(fmt::format("unexpected message type {} from {}", p.in.type, j_.peer_name(role::worker, static_cast<int>(i))));
        }
    }

    void on_push(std::size_t i)
    {
        auto& p = workers_[i];
        p.batches = p.in.extra;
        if (done_) {
            reply(i, reply_status::done);
            return;
        }
        const std::size_t shard_bytes = shard_->range().size() * sizeof(float);
        if (p.in.status == in_mapped_memory ? !p.via_map() : p.in.payload_bytes != shard_bytes)
            throw error(fmt::format("a gradient of {} bytes{} came from {}, the shard has {}", p.in.payload_bytes,
                                    p.in.status == in_mapped_memory ? " in memory this PS has not mapped" : "",
                                    j_.peer_name(role::worker, static_cast<int>(i)), shard_bytes));
        if (!sync_) {
            // In place unless a reply in flight still reads the values.
            if (read_by_a_reply(shard_->values().data()))
                shard_->apply_into(free_spare(), gradient(i));
            else
                shard_->apply(gradient(i));
            advance();
            reply(i, reply_status::ok);
            return;
        }
        if (p.in.step != step_) {  // computed on older values: dropped
            ++stale_;
            reply(i, reply_status::stale);
            return;
        }
        contributed_[i] = true;
        if (++count_ < replicas_) return;
        // Sum in worker order, so a run is the same whatever the arrival order.
        std::fill(sum_.begin(), sum_.end(), 0.0f);
        for (std::size_t k = 0; k < workers_.size(); ++k) {
            if (!contributed_[k]) continue;
            const auto g = gradient(k);
            for (std::size_t e = 0; e < sum_.size(); ++e) sum_[e] += g[e];
        }
        const float scale = 1.0f / static_cast<float>(replicas_);
        for (auto& v : sum_) v *= scale;
        drain_sends();
        shard_->apply(sum_);
        advance();
        for (std::size_t k = 0; k < workers_.size(); ++k) {
            if (!contributed_[k]) continue;
            contributed_[k] = false;
            reply(k, reply_status::ok);
        }
        count_ = 0;
    }

    // MAP: worker i offers its exchange buffers.  True when UCX maps them
    // here (same host, shared memory in UCX_TLS, --shared-memory auto).
    bool map_buffers(std::size_t i)
    {
        auto& p = workers_[i];
        const auto who = j_.peer_name(role::worker, static_cast<int>(i));
        map_request r;
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(p.slot.data());
        if (p.in.payload_bytes >= sizeof r && p.in.payload_bytes <= max_map_request) std::memcpy(&r, bytes, sizeof r);
        if (sizeof r + r.key_bytes != p.in.payload_bytes)
            throw error(fmt::format("a malformed MAP message came from {}: are all tasks running the same pstrain?", who));
        if (o_.shared_memory != "auto") return false;
        try {
            auto key = std::make_unique<transport::remote_key>(c_.data_ep(i), std::span(bytes + sizeof r, r.key_bytes));
            auto* params = static_cast<float*>(key->local_pointer(r.params_address));
            auto* grads = static_cast<const float*>(key->local_pointer(r.grads_address));
            if (!params || !grads) return false;
            p.key = std::move(key);
            p.mapped_params = params + shard_->range().begin;
            p.mapped_grads = grads + shard_->range().begin;
            return true;
        } catch (const error& e) {
            log::debug("cannot map the buffers of {} ({}): messages it is", who, e.what());
            return false;
        }
    }

    // Writes this PS's shard of the checkpoint at the chief's step.  In
    // sync mode every shard must hold the same step: a PS that has moved on
    // (backup workers finished a step without the chief) says so, and the
    // chief asks again at the newer step.  In async mode the shard is
    // written as it is now, a few updates apart from the other shards.
    void on_save(std::size_t i)
    {
        auto& p = workers_[i];
        begin_reply(i, msg::saved);
        if (sync_ && p.in.step != step_) {
            p.out.status = static_cast<std::uint32_t>(save_status::moved_on);
        } else {
            checkpoint::shard_meta m;
            m.global_step = p.in.step;  // the chief's step names the checkpoint (async: this shard may be a few updates on)
            m.ps_index = j_.me.index;
            m.num_ps = j_.num_ps;
            m.range = shard_->range();
            m.total_params = total_params_;
            m.optimizer = optimizer_name(shard_->optimizer().kind);
            m.state_slots = state_slots(shard_->optimizer().kind);
            m.updates = shard_->updates();
            for (const auto& w : workers_) m.worker_batches.push_back(w.batches);
            try {
                const auto t0 = clock::now();
                auto e = checkpoint::write_shard(o_.checkpoint_dir, m, shard_->values(), shard_->state());
                p.out.status = static_cast<std::uint32_t>(save_status::saved);
                p.out.aux = e.crc32;
                p.out.extra = e.bytes;
                log::debug("wrote {} ({} bytes) in {:.3f}s", e.file, e.bytes,
                           std::chrono::duration<double>(clock::now() - t0).count());
            } catch (const error& e) {
                log::error("checkpoint at global step {} failed: {}", step_, e.what());
                p.out.status = static_cast<std::uint32_t>(save_status::failed);
            }
        }
        send_reply(i);
    }

    // The chief ends the job (or stops it for preemption): every worker
    // still training is told so on its next reply, then this PS exits.
    void on_shutdown(bool stop)
    {
        shutdown_ = true;
        shutdown_deadline_ = clock::now() + shutdown_wait;
        workers_[0].told_done = true;
        if (stop && !done_) {
            stopped_ = true;
            done_ = true;
            log::info("the chief stopped the job at global step {} (SIGTERM): it resumes from the checkpoint", step_);
        } else {
            log::info("the chief ended the job at global step {}", step_);
        }
        // Sync: gradients waiting for a step that will not come are answered.
        for (std::size_t k = 0; k < workers_.size(); ++k) {
            if (!contributed_[k]) continue;
            contributed_[k] = false;
            reply(k, reply_status::ok);
        }
        count_ = 0;
    }

    bool everyone_told() const
    {
        return std::all_of(workers_.begin(), workers_.end(), [](const auto& w) { return w.lost || w.told_done; });
    }

    void advance()
    {
        ++step_;
        if (step_ >= static_cast<std::uint64_t>(o_.train_steps) && !done_) {
            done_ = true;
            log::info("global step {} reached: training done{}", step_,
                      sync_ ? fmt::format(" ({} stale gradients dropped)", stale_) : "");
        }
    }

    std::optional<int> on_worker_lost(std::size_t i)
    {
        auto& p = workers_[i];
        p.lost = true;
        const auto why = c_.peers[i]->failed() ? ucs_status_string(c_.peers[i]->failure()) : ucs_status_string(p.recv.status());
        const auto who = j_.peer_name(role::worker, static_cast<int>(i));
        if (done_) {
            if (i != 0 || shutdown_) return std::nullopt;  // workers leave once training is done
            log::error("lost {} before it ended the job ({})", who, why);
            return 1;
        }
        int live = 0;
        for (auto& q : workers_) live += !q.lost;
        std::string fatal;
        if (i == 0)
            fatal = fmt::format("lost {} ({}): the chief initialises, evaluates and ends the job, training cannot go on", who, why);
        else if (sync_ && live < replicas_)
            fatal = fmt::format("lost {} ({}): sync training aggregates {} gradients per step and only {} workers are left; "
                                "use --replicas-to-aggregate {} to run with backup workers",
                                who, why, replicas_, live, std::max(1, j_.num_workers - 1));
        else if (live == 0)
            fatal = fmt::format("lost {} ({}): no worker is left", who, why);
        if (fatal.empty()) {
            // In sync mode a gradient it gave to this step still counts.
            log::warn("lost {} ({}): going on with {} workers", who, why, live);
            return std::nullopt;
        }
        log::error("{}", fatal);
        abort_all(role::worker, static_cast<int>(i));
        return 1;
    }

    // Tells every live worker why the job ends, then gives the sends a moment.
    void abort_all(role lost_role, int lost_index)
    {
        std::vector<header> headers(workers_.size());
        std::vector<transport::request> sends;
        for (std::size_t k = 0; k < workers_.size(); ++k) {
            if (workers_[k].lost || c_.peers[k]->failed()) continue;
            auto& h = headers[k];
            h.type = static_cast<std::uint8_t>(msg::abort);
            h.sender_index = static_cast<std::uint16_t>(j_.me.index);
            h.status = lost_role == role::ps ? 0 : 1;
            h.aux = static_cast<std::uint32_t>(lost_index);
            sends.push_back(w_.send(c_.peers[k]->get(), make_tag(msg::abort, 0, j_.me.index), &h, sizeof h));
        }
        w_.wait_until(
            [&] {
                return std::all_of(sends.begin(), sends.end(), [](auto& r) { return r.done(); });
            },
            clock::now() + std::chrono::seconds(2));
    }

    const trainer::train_options& o_;
    const bootstrap::job& j_;
    transport::worker& w_;
    bootstrap::connections& c_;
    std::vector<peer_state> workers_;
    std::optional<parameter_shard> shard_;
    std::uint64_t step_ = 0, total_params_ = 0, stale_ = 0;
    bool done_ = false, stopped_ = false, shutdown_ = false;
    clock::time_point shutdown_deadline_;
    static constexpr auto shutdown_wait = std::chrono::seconds(60);
    std::uint64_t restored_ = 0;  // 1 + the restored checkpoint's step
    const bool sync_;
    const int replicas_;
    int count_ = 0;
    std::vector<bool> contributed_;
    std::vector<float> sum_;
    std::vector<std::vector<float>> spares_;  // async: buffers for the next values
};

}  // namespace

int run_server(const trainer::train_options& o, const bootstrap::job& j, transport::worker& w, bootstrap::connections& peers)
{
    server s(o, j, w, peers);
    return s.run();
}

}  // namespace pstrain::ps
