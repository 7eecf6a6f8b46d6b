#include "trainer/standalone.hpp"

#include "common/log.hpp"
#include "trainer/data/sampler.hpp"
#include "trainer/progress.hpp"
#include "trainer/ps/shard.hpp"
#include "trainer/session.hpp"

namespace pstrain::trainer {

int run_standalone(const train_options& o)
{
    log::set_prefix("pstrain[standalone]");
    session s = open_session(o);
    progress prog(o.train_steps, o.log_every, o.metrics_file);

    const std::size_t n = s.net->num_params();
    ps::parameter_shard shard({0, n}, optimizer_from(o));
    std::vector<float> init(n), grads(n);
    s.net->initialize(init, o.seed);
    shard.assign(init);

    data::sampler sampler(s.data.train.rows, 1, 0, o.seed, o.sample_with_replacement);
    std::vector<std::uint32_t> rows;

    for (std::int64_t step = 1; step <= o.train_steps; ++step) {
        sampler.next_batch(static_cast<std::size_t>(o.batch_size), rows);
        double loss = s.net->compute_gradients(shard.values(), s.data.train, rows, grads);
        check_loss(loss, step);
        shard.apply(grads);
        prog.step(step, loss, o.batch_size);
        if (o.eval_every > 0 && step % o.eval_every == 0 && step < o.train_steps)
            evaluate_on_test(s, shard.values(), step, prog);
    }
    const double seconds = prog.seconds();
    auto done = done_line(evaluate_on_test(s, shard.values(), o.train_steps, prog), seconds, prog, 0, 1, "standalone");
    if (!s.net->is_classifier())
        log::info("linear model: weight {:.4f} (true 2), bias {:.4f} (true 10)", shard.values()[0], shard.values()[1]);
    print_done(done);
    return 0;
}

}  // namespace pstrain::trainer
