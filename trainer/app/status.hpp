// `pstrain status CHECKPOINT_DIR`: where a run stands, from what it left in
// its checkpoint directory: the newest complete checkpoint (step, time, mode,
// PS count, model, optimizer), the accuracy last measured at or before it,
// and the tail of the metrics.  In words, or as one JSON object (--json).
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace pstrain::trainer {

// The facts, as the JSON object --json prints: {"dir", "checkpoint": {...} |
// null, "accuracy": {"test_accuracy", "global_step"} | null, "workers":
// {"alive", "workers", "global_step", "elastic"} | null (the chief of a job
// with PS tasks records the live workers at its start and at each change),
// "metrics_file": path |
// null, "metrics_tail": [events]}.  Throws pstrain::error when `dir`
// cannot be read.
nlohmann::json run_status(const std::string& dir, const std::string& metrics_file, std::size_t tail);

// The same in lines a person reads.
std::string format_status(const nlohmann::json& status);

// `pstrain status DIR [--json] [--metrics FILE] [--tail N]`: the exit status.
int status_command(int argc, char** argv);

}  // namespace pstrain::trainer
