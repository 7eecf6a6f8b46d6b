// The join file of an --elastic job under PMIx: what a worker started
// later, in a lost worker's place, needs to connect to the running step
// (every PS's host:port, the worker count, the step's key).  The chief
// writes it into --checkpoint-dir once every task has started, readable by
// its owner only, and removes it when the job ends; `pstrain --join FILE
// --task-index I` reads it.
#pragma once

#include "library/bootstrap/job.hpp"
#include "trainer/app/options.hpp"

#include <string>

namespace pstrain::trainer {

// DIR/join, written whole (a temporary file renamed) with mode 0600.
// Returns its path.  Throws pstrain::error naming the file.
std::string write_join_file(const std::string& dir, const bootstrap::join_info& join);

// --join FILE: the classic flags (ps_hosts, worker_hosts, job_name) from
// the file, and its key as PSTRAIN_AUTH_KEY.  Throws pstrain::error, one
// line naming the problem and the fix.
void apply_join_file(train_options& o);

}  // namespace pstrain::trainer
