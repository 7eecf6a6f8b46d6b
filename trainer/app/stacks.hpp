// Every thread's stack, for the stall watchdog's report.
//
// Each thread listed in /proc/self/task is sent a signal and records its
// own return addresses from the handler (async-signal-safe: the unwinder
// writes into a buffer set aside beforehand, then sem_post); the calling
// thread then names the frames (Boost.Stacktrace: demangled functions, and
// source lines through GCC's libbacktrace where configure found it).
#pragma once

#include <chrono>
#include <string>

namespace pstrain::trainer {

// Installs the signal handler and readies the unwinder, so that a later
// all_thread_stacks() does no first-time set-up.  Idempotent.
void prepare_stack_dumps();

// "thread TID NAME:" and its frames, for every thread of the process; a
// thread that does not answer within `wait` (it blocks the signal) is
// named without frames.
std::string all_thread_stacks(std::chrono::milliseconds wait = std::chrono::seconds(1));

}  // namespace pstrain::trainer
