// The worker task: pulls the model's values from every PS, computes a
// gradient on its shard of the data, pushes it (the reply carries the new
// values), and, as the chief, initialises, evaluates and ends the job.
#pragma once

#include "trainer/bootstrap/job.hpp"
#include "trainer/options.hpp"
#include "trainer/transport/ucx.hpp"

namespace pstrain::trainer {

int run_worker(const train_options& o, const bootstrap::job& j, transport::worker& w, bootstrap::connections& peers);

}  // namespace pstrain::trainer
