#include "trainer/app/evaluation.hpp"

#include "common/log.hpp"

#include <utility>

namespace pstrain::trainer {

nlohmann::json evaluation_fields(const session& s, const model::eval_result& r, std::span<const float> params)
{
    if (s.net->is_classifier()) return {{"test_accuracy", r.accuracy}, {"test_cross_entropy", r.loss}};
    return {{"test_accuracy", nullptr},
            {"test_cross_entropy", nullptr},
            {"test_mse", r.loss},
            {"weight", params[0]},
            {"bias", params[1]}};
}

nlohmann::json evaluate_on_test(session& s, std::span<const float> params, std::int64_t step, reporter& prog)
{
    auto r = s.net->evaluate(params, s.data.test);
    if (s.net->is_classifier())
        log::info("eval at global step {}: test accuracy {:.4f}, cross-entropy {:.4f}", step, r.accuracy, r.loss);
    else
        log::info("eval at global step {}: test mse {:.5f}, weight {:.4f}, bias {:.4f}", step, r.loss, params[0],
                  params[1]);
    return record_evaluation(evaluation_fields(s, r, params), step, prog);
}

nlohmann::json record_evaluation(nlohmann::json fields, std::int64_t step, reporter& prog)
{
    fields["event"] = "eval";
    fields["global_step"] = step;
    prog.record(fields);
    return fields;
}

nlohmann::json done_line(nlohmann::json last_eval, double train_seconds, std::uint64_t samples, int ps, int workers,
                         const char* mode)
{
    auto done = std::move(last_eval);
    done["event"] = "done";
    done["train_seconds"] = train_seconds;
    done["samples_per_sec"] = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0.0;
    done["ps"] = ps;
    done["workers"] = workers;
    done["mode"] = mode;
    return done;
}

}  // namespace pstrain::trainer
