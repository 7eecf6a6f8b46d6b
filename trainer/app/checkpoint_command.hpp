// `pstrain checkpoint inspect DIR`: the checkpoints of a --checkpoint-dir,
// `latest DIR`: the newest complete one as JSON, and `seal DIR STEP`: the
// manifest of a snapshot a program's chief took through the PS tasks
// (pstrain serve), as pstrain's own chief writes it.  inspect lists them
// as checkpoint::inspect does (steps, shards, completeness, checksums).
#pragma once

namespace pstrain::trainer {

// `pstrain checkpoint inspect|latest|seal ...` (argv[1] is "checkpoint"): the exit status.
int checkpoint_command(int argc, char** argv);

}  // namespace pstrain::trainer
