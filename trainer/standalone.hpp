#pragma once

#include "trainer/options.hpp"

namespace pstrain::trainer {

// --standalone: one process, the model's parameters in an in-process
// parameter-server shard.  Returns the exit status.
int run_standalone(const train_options& o);

}  // namespace pstrain::trainer
