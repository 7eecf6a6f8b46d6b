// `pstrain serve [options]`: a parameter-server task for workers whose
// program says how to train (pstrain's Python package: the chief's hello
// brings the model's size, the optimizer, sync or async and the embedding
// tables), so it needs no model flags.  Its role comes from the job as any
// pstrain task's does; the chief's shutdown ends it.
#pragma once

namespace pstrain::trainer {

// argv[1] is "serve": the exit status.
int serve_command(int argc, char** argv);

}  // namespace pstrain::trainer
