// SIGTERM is what Slurm sends at preemption, on `scancel`, on `scontrol
// requeue` and, with `--signal=TERM@T`, T seconds before the time limit.
// The trainer turns it into a request the chief acts on at the next step
// boundary: checkpoint, tell every task, exit with status 143.
#pragma once

namespace pstrain::trainer {

inline constexpr int preempted_exit_status = 143;  // 128 + SIGTERM, as if killed by it

// Installs the handler (once; later calls do nothing).
void catch_termination();
// A SIGTERM has arrived since catch_termination().
bool termination_requested();

}  // namespace pstrain::trainer
