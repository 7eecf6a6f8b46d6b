// `pstrain checkpoint inspect DIR`: what a user asks before resuming.
#pragma once

#include <string>

namespace pstrain::checkpoint {

// Prints a table of the checkpoints in `dir` (newest first, every shard
// verified) and the newest complete one to stdout; returns the exit
// status: 0 when the directory is readable and either holds no manifest
// (a job starts from scratch) or one complete checkpoint; 1 otherwise (a
// job would fail).
int inspect(const std::string& dir);

}  // namespace pstrain::checkpoint
