#include "trainer/app/loss_guard.hpp"

#include "pstrain/error.hpp"

#include <cmath>

#include <fmt/format.h>

namespace pstrain::trainer {

void check_loss(double loss, std::int64_t step)
{
    if (!std::isfinite(loss))
        throw error(fmt::format("the training loss is {} at step {}: lower --learning-rate", loss, step));
}

}  // namespace pstrain::trainer
