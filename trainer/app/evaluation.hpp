// The chief's evaluations on the held-out data as the run reports them: the
// fields of one, its log line and "eval" event, and the final "done" line
// built from the last.
#pragma once

#include "trainer/app/report.hpp"
#include "trainer/app/session.hpp"
#include "trainer/model/model.hpp"

#include <cstdint>
#include <span>

#include <nlohmann/json.hpp>

namespace pstrain::trainer {

// The final line's evaluation fields (test_accuracy, test_cross_entropy, or
// for the linear model test_mse, weight and bias).
nlohmann::json evaluation_fields(const session& s, const model::eval_result& r, std::span<const float> params);

// One evaluation's log line and "eval" event (fields: the metrics); returns the event.
nlohmann::json record_evaluation(nlohmann::json fields, std::int64_t step, reporter& prog);

// Evaluates `params` on the test set: one log line, an "eval" event in the
// metrics file; returns the event.
nlohmann::json evaluate_on_test(session& s, std::span<const float> params, std::int64_t step, reporter& prog);

// The final JSON line (event "done": global step, test metrics, samples/s,
// ps, workers, mode) from the last evaluation; `train_seconds` and
// `samples` count every segment of the run (a requeued job's earlier ones
// too).
nlohmann::json done_line(nlohmann::json last_eval, double train_seconds, std::uint64_t samples, int ps, int workers,
                         const char* mode);

}  // namespace pstrain::trainer
