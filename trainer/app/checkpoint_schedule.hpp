// When the chief saves a checkpoint (--save-checkpoint-steps,
// --save-checkpoint-secs).
#pragma once

#include "trainer/app/options.hpp"

#include <chrono>
#include <cstdint>

namespace pstrain::trainer {

// When the chief checkpoints: every --save-checkpoint-steps global steps (a
// step that jumps past a multiple counts, as async steps can) and when
// --save-checkpoint-secs have passed since the last attempt.
class checkpoint_schedule {
public:
    explicit checkpoint_schedule(const train_options& o);
    bool due(std::int64_t step) const;
    void attempted() { last_attempt_ = std::chrono::steady_clock::now(); }
    void saved(std::int64_t step) { last_saved_ = step; }  // also: restored
    std::int64_t last_saved() const { return last_saved_; }

private:
    std::int64_t every_steps_;
    std::chrono::seconds every_secs_;
    std::int64_t last_saved_ = -1;
    std::chrono::steady_clock::time_point last_attempt_;
};

}  // namespace pstrain::trainer
