#include "trainer/app/checkpoint_schedule.hpp"

#include <algorithm>

namespace pstrain::trainer {

checkpoint_schedule::checkpoint_schedule(const train_options& o)
    : every_steps_(o.save_checkpoint_steps), every_secs_(o.save_checkpoint_secs),
      last_attempt_(std::chrono::steady_clock::now())
{}

bool checkpoint_schedule::due(std::int64_t step) const
{
    if (step == last_saved_) return false;
    const bool failed = last_attempted_step_ > last_saved_;
    if (failed && !retrying_ && step > last_attempted_step_) return true;  // once, at the next step
    const auto since = std::max({last_saved_, failed ? last_attempted_step_ : -1, std::int64_t{0}});
    if (every_steps_ > 0 && step / every_steps_ > since / every_steps_) return true;
    return every_secs_.count() > 0 && std::chrono::steady_clock::now() - last_attempt_ >= every_secs_;
}

}  // namespace pstrain::trainer
