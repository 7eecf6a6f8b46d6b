#pragma once

#include "trainer/bootstrap/job.hpp"
#include "trainer/options.hpp"

namespace pstrain::trainer {

// A ps or worker task of a distributed job.  Returns the exit status.
int run_distributed(const train_options& o, bootstrap::job j);

}  // namespace pstrain::trainer
