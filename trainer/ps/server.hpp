// The parameter-server task: owns one shard of the flat parameter vector
// and its optimizer state, applies gradients (sync: aggregated per step,
// async: on arrival) and serves values, until the chief ends the job.
#pragma once

#include "trainer/bootstrap/job.hpp"
#include "trainer/options.hpp"
#include "trainer/transport/ucx.hpp"

namespace pstrain::ps {

// Returns the exit status.
int run_server(const trainer::train_options& o, const bootstrap::job& j, transport::worker& w,
               bootstrap::connections& peers);

}  // namespace pstrain::ps
