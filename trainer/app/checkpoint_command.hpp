// `pstrain checkpoint inspect DIR`: the checkpoints of a --checkpoint-dir,
// as checkpoint::inspect lists them (steps, shards, completeness,
// checksums).
#pragma once

namespace pstrain::trainer {

// `pstrain checkpoint inspect DIR` (argv[1] is "checkpoint"): the exit status.
int checkpoint_command(int argc, char** argv);

}  // namespace pstrain::trainer
