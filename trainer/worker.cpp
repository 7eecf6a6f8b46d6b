#include "trainer/worker.hpp"

#include "common/error.hpp"
#include "common/log.hpp"
#include "trainer/data/sampler.hpp"
#include "trainer/progress.hpp"
#include "trainer/ps/client.hpp"
#include "trainer/ps/shard.hpp"
#include "trainer/session.hpp"

#include <fmt/format.h>

namespace pstrain::trainer {
namespace {

using clock = std::chrono::steady_clock;
using ps::msg;

class worker_task {
public:
    worker_task(const train_options& o, const bootstrap::job& j, transport::worker& w, bootstrap::connections& c)
        : o_(o), j_(j), w_(w), c_(c), s_(open_session(o)), n_(s_.net->num_params()),
          params_(*s_.backend, n_), grads_(*s_.backend, n_),
          client_(j, w, c, params_.data(), n_, std::chrono::seconds(o.peer_timeout)),
          sampler_(s_.data.train.rows, j.num_workers, j.me.index, o.seed, o.sample_with_replacement),
          replicas_(o.replicas_to_aggregate > 0 ? o.replicas_to_aggregate : j.num_workers)
    {
    }

    int run()
    {
        std::optional<progress> prog;
        if (j_.is_chief()) prog.emplace(o_.train_steps, o_.log_every, o_.metrics_file);
        start();
        std::int64_t next_eval = o_.eval_every > 0 ? (client_.global_step() / o_.eval_every + 1) * o_.eval_every : 0;
        std::int64_t last_step = client_.global_step(), local_steps = 0;
        auto t0 = clock::now();
        std::vector<std::uint32_t> rows;
        while (!client_.done()) {
            sampler_.next_batch(static_cast<std::size_t>(o_.batch_size), rows);
            double loss = s_.net->compute_gradients(params_, s_.data.train, rows, grads_);
            check_loss(loss, client_.global_step());
            client_.exchange(msg::push, grads_.data());
            ++local_steps;
            if (prog) {
                const std::int64_t per_step = o_.sync_replicas ? replicas_ : 1;
                prog->step(client_.global_step(), loss, (client_.global_step() - last_step) * per_step * o_.batch_size);
                last_step = client_.global_step();
                if (next_eval > 0 && client_.global_step() >= next_eval && !client_.done()) {
                    evaluate_on_test(s_, params_, client_.global_step(), *prog);
                    next_eval = (client_.global_step() / o_.eval_every + 1) * o_.eval_every;
                }
            }
        }
        const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
        log::debug("{} local steps, stopped at global step {}", local_steps, client_.global_step());
        if (!prog) return 0;
        auto done = done_line(evaluate_on_test(s_, params_, client_.global_step(), *prog), seconds, *prog, j_.num_ps,
                              j_.num_workers, o_.sync_replicas ? "sync" : "async");
        client_.shutdown();
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
            client_.exchange(msg::init, params_.data());
        } else {
            client_.exchange(msg::pull, nullptr);
        }
    }

    const train_options& o_;
    const bootstrap::job& j_;
    transport::worker& w_;
    bootstrap::connections& c_;
    session s_;
    std::size_t n_;
    compute::host_array<float> params_, grads_;  // pinned on a GPU: UCX sends and receives them in place
    ps::client client_;
    data::sampler sampler_;
    int replicas_;
};

}  // namespace

int run_worker(const train_options& o, const bootstrap::job& j, transport::worker& w, bootstrap::connections& peers)
{
    worker_task t(o, j, w, peers);
    return t.run();
}

}  // namespace pstrain::trainer
