// The training loss guard: a step whose loss is not finite (NaN or an
// infinity: the learning rate is too high) stops the run with one line.
#pragma once

#include <cstdint>

namespace pstrain::trainer {

// Fails with a clear line when the loss is not finite.
void check_loss(double loss, std::int64_t step);

}  // namespace pstrain::trainer
