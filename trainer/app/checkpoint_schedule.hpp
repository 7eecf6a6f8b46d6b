// When the chief saves a checkpoint (--save-checkpoint-steps,
// --save-checkpoint-secs).
#pragma once

#include "trainer/app/options.hpp"

#include <chrono>
#include <cstdint>

namespace pstrain::trainer {

// When the chief checkpoints: every --save-checkpoint-steps global steps (a
// step that jumps past a multiple counts, as async steps can) and when
// --save-checkpoint-secs have passed since the last attempt.  An attempt
// that failed is tried again at the next step (a passing glitch), and if
// that fails too, at the next multiple or interval: a full or read-only
// disk costs two error lines an interval, not one a step.
class checkpoint_schedule {
public:
    explicit checkpoint_schedule(const train_options& o);
    bool due(std::int64_t step) const;
    // The clock starts (the training loop's start).
    void attempted() { last_attempt_ = std::chrono::steady_clock::now(); }
    // A checkpoint of `step` was attempted, saved or not.
    void attempted(std::int64_t step)
    {
        attempted();
        retrying_ = last_attempted_step_ > last_saved_;  // the one before failed
        last_attempted_step_ = step;
    }
    void saved(std::int64_t step) { last_saved_ = step; }  // also: restored
    std::int64_t last_saved() const { return last_saved_; }

private:
    std::int64_t every_steps_;
    std::chrono::seconds every_secs_;
    std::int64_t last_saved_ = -1;
    std::int64_t last_attempted_step_ = -1;
    bool retrying_ = false;
    std::chrono::steady_clock::time_point last_attempt_;
};

}  // namespace pstrain::trainer
