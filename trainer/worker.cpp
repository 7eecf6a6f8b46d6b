#include "trainer/worker.hpp"

#include "common/error.hpp"
#include "common/log.hpp"
#include "trainer/data/sampler.hpp"
#include "trainer/progress.hpp"
#include "trainer/ps/protocol.hpp"
#include "trainer/ps/shard.hpp"
#include "trainer/session.hpp"

#include <array>

#include <fmt/format.h>

namespace pstrain::trainer {
namespace {

using clock = std::chrono::steady_clock;
using ps::header;
using ps::msg;

class worker_task {
public:
    worker_task(const train_options& o, const bootstrap::job& j, transport::worker& w, bootstrap::connections& c)
        : o_(o), j_(j), w_(w), c_(c), s_(open_session(o)), n_(s_.net->num_params()),
          map_(ps::make_shard_map(n_, j.num_ps)), params_(*s_.backend, n_), grads_(*s_.backend, n_),
          in_(static_cast<std::size_t>(j.num_ps)), out_(static_cast<std::size_t>(j.num_ps)),
          recvs_(static_cast<std::size_t>(j.num_ps)), sends_(static_cast<std::size_t>(j.num_ps)),
          recv_iov_(static_cast<std::size_t>(j.num_ps)), send_iov_(static_cast<std::size_t>(j.num_ps)),
          sampler_(s_.data.train.rows, j.num_workers, j.me.index, o.seed, o.sample_with_replacement),
          replicas_(o.replicas_to_aggregate > 0 ? o.replicas_to_aggregate : j.num_workers),
          timeout_(std::chrono::seconds(o.peer_timeout))
    {
    }

    int run()
    {
        std::optional<progress> prog;
        if (j_.is_chief()) prog.emplace(o_.train_steps, o_.log_every, o_.metrics_file);
        start();
        std::int64_t next_eval = o_.eval_every > 0 ? (global_step_ / o_.eval_every + 1) * o_.eval_every : 0;
        std::int64_t last_step = global_step_, local_steps = 0;
        auto t0 = clock::now();
        std::vector<std::uint32_t> rows;
        while (!done_) {
            sampler_.next_batch(static_cast<std::size_t>(o_.batch_size), rows);
            double loss = s_.net->compute_gradients(params_, s_.data.train, rows, grads_);
            check_loss(loss, global_step_);
            exchange(msg::push, grads_.data());
            ++local_steps;
            if (prog) {
                const std::int64_t per_step = o_.sync_replicas ? replicas_ : 1;
                prog->step(global_step_, loss, (global_step_ - last_step) * per_step * o_.batch_size);
                last_step = global_step_;
                if (next_eval > 0 && global_step_ >= next_eval && !done_) {
                    evaluate(*prog, global_step_);
                    next_eval = (global_step_ / o_.eval_every + 1) * o_.eval_every;
                }
            }
        }
        const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
        log::debug("{} local steps, stopped at global step {}", local_steps, global_step_);
        if (!prog) return 0;
        auto done = evaluate(*prog, global_step_);
        done["event"] = "done";
        done["global_step"] = global_step_;
        done["train_seconds"] = seconds;
        done["samples_per_sec"] = seconds > 0 ? static_cast<double>(prog->samples()) / seconds : 0.0;
        done["ps"] = j_.num_ps;
        done["workers"] = j_.num_workers;
        done["mode"] = o_.sync_replicas ? "sync" : "async";
        shutdown_ps();
        print_done(done);
        return 0;
    }

private:
    // The chief initialises every shard; the others pull.
    void start()
    {
        if (j_.is_chief()) {
            s_.net->initialize(params_, o_.seed);
            log::info("initialised {} ({} parameters) on {} ps tasks; {} training, {} steps", s_.net->describe(), n_,
                      j_.num_ps, o_.sync_replicas ? fmt::format("sync ({} of {} workers per step)", replicas_, j_.num_workers) : std::string("async"),
                      o_.train_steps);
            exchange(msg::init, params_.data());
        } else {
            exchange(msg::pull, nullptr);
        }
    }

    // Sends one message of `type` to every PS (payload: that PS's slice of
    // `payload`, if any) and waits for every reply, which lands in params_.
    void exchange(msg type, const float* payload)
    {
        const auto deadline = clock::now() + timeout_;
        for (std::size_t p = 0; p < map_.size(); ++p) {
            auto& iov = recv_iov_[p];
            iov[0] = {&in_[p], sizeof(header)};
            iov[1] = {params_.data() + map_[p].begin, map_[p].size() * sizeof(float)};
            recvs_[p] = w_.recv(ps::sender_tag(0, static_cast<int>(p)), ps::tag_sender_mask, iov);
        }
        for (std::size_t p = 0; p < map_.size(); ++p) {
            auto& h = out_[p];
            h = header{};
            h.type = static_cast<std::uint8_t>(type);
            h.sender_role = 1;
            h.sender_index = static_cast<std::uint16_t>(j_.me.index);
            h.step = type == msg::init ? 0 : base_step_.empty() ? 0 : base_step_[p];
            h.aux = static_cast<std::uint32_t>(n_);
            h.range_begin = map_[p].begin;
            h.range_end = map_[p].end;
            std::size_t bytes = payload ? map_[p].size() * sizeof(float) : 0;
            h.payload_bytes = bytes;
            auto& iov = send_iov_[p];
            iov[0] = {&h, sizeof h};
            iov[1] = {const_cast<float*>(payload ? payload + map_[p].begin : nullptr), bytes};
            sends_[p] = w_.send(c_.peers[p]->get(), ps::make_tag(type, 1, j_.me.index), std::span(iov.data(), payload ? 2 : 1));
        }
        bool ok = w_.wait_until(
            [&] {
                for (std::size_t p = 0; p < map_.size(); ++p) {
                    if (c_.peers[p]->failed()) return true;
                    if (!recvs_[p].done() || !sends_[p].done()) return false;
                }
                return true;
            },
            deadline);
        for (std::size_t p = 0; p < map_.size(); ++p) {
            const auto who = j_.peer_name(role::ps, static_cast<int>(p));
            if (c_.peers[p]->failed()) throw error(fmt::format("lost {}: {}", who, ucs_status_string(c_.peers[p]->failure())));
            if (!ok && !recvs_[p].done())
                throw error(fmt::format("no answer from {} in {}s (--peer-timeout)", who, timeout_.count()));
            if (recvs_[p].status() != UCS_OK)
                throw error(fmt::format("lost {}: receive failed: {}", who, ucs_status_string(recvs_[p].status())));
            if (sends_[p].status() != UCS_OK)
                throw error(fmt::format("lost {}: send failed: {}", who, ucs_status_string(sends_[p].status())));
            const auto& h = in_[p];
            if (h.magic != header{}.magic) throw error(fmt::format("a malformed reply came from {}", who));
            if (static_cast<msg>(h.type) == msg::abort) {
                const role lost = h.status == 0 ? role::ps : role::worker;
                throw error(fmt::format("{} ended the job: it lost {}", who, j_.peer_name(lost, static_cast<int>(h.aux))));
            }
            if (h.range_begin != map_[p].begin || h.range_end != map_[p].end)
                throw error(fmt::format("{} holds parameters [{}, {}) but this worker expects [{}, {}): do all tasks run the same model?",
                                        who, h.range_begin, h.range_end, map_[p].begin, map_[p].end));
        }
        base_step_.resize(map_.size());
        for (std::size_t p = 0; p < map_.size(); ++p) {
            base_step_[p] = in_[p].step;
            if (static_cast<ps::reply_status>(in_[p].status) == ps::reply_status::done) done_ = true;
        }
        global_step_ = static_cast<std::int64_t>(in_[0].step);
    }

    nlohmann::json evaluate(progress& prog, std::int64_t step)
    {
        auto r = s_.net->evaluate(params_, s_.data.test);
        auto fields = evaluation_fields(s_, r, params_);
        if (s_.net->is_classifier())
            log::info("eval at global step {}: test accuracy {:.4f}, cross-entropy {:.4f}", step, r.accuracy, r.loss);
        else
            log::info("eval at global step {}: test mse {:.5f}, weight {:.4f}, bias {:.4f}", step, r.loss, params_[0], params_[1]);
        fields["event"] = "eval";
        fields["global_step"] = step;
        prog.record(fields);
        return fields;
    }

    void shutdown_ps()
    {
        std::vector<transport::request> sends;
        for (std::size_t p = 0; p < map_.size(); ++p) {
            auto& h = out_[p];
            h = header{};
            h.type = static_cast<std::uint8_t>(msg::shutdown);
            h.sender_role = 1;
            h.sender_index = 0;
            send_iov_[p][0] = {&h, sizeof h};
            sends.push_back(w_.send(c_.peers[p]->get(), ps::make_tag(msg::shutdown, 1, 0), std::span(send_iov_[p].data(), 1)));
        }
        for (std::size_t p = 0; p < sends.size(); ++p)
            w_.wait(sends[p], j_.peer_name(role::ps, static_cast<int>(p)), clock::now() + std::chrono::seconds(30));
    }

    const train_options& o_;
    const bootstrap::job& j_;
    transport::worker& w_;
    bootstrap::connections& c_;
    session s_;
    std::size_t n_;
    std::vector<ps::shard_range> map_;
    compute::host_array<float> params_, grads_;  // pinned on a GPU: UCX sends and receives them in place
    std::vector<header> in_, out_;
    std::vector<transport::request> recvs_, sends_;
    std::vector<std::array<ucp_dt_iov_t, 2>> recv_iov_, send_iov_;  // alive while their requests are
    std::vector<std::uint64_t> base_step_;
    data::sampler sampler_;
    int replicas_;
    std::chrono::seconds timeout_;
    std::int64_t global_step_ = 0;
    bool done_ = false;
};

}  // namespace

int run_worker(const train_options& o, const bootstrap::job& j, transport::worker& w, bootstrap::connections& peers)
{
    worker_task t(o, j, w, peers);
    return t.run();
}

}  // namespace pstrain::trainer
