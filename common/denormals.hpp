// Denormal (subnormal) floats, below about 1.2e-38 in FP32, on the calling
// thread.  x86 cores take many times longer on an operation with a denormal
// operand or result, and training makes them: Adam's first moment of a
// coordinate whose gradient stays zero (a dead ReLU) decays by 0.9 a step
// and is denormal after some 740 steps, and a PS's update then ran 6x
// slower (issue 45).  Flushing sets the CPU's FTZ (results that would be
// denormal are 0) and DAZ (denormal operands read as 0) bits, MXCSR on
// x86-64 and FPCR.FZ on AArch64, as TensorFlow does on its threads.
//
// The mode belongs to a thread, and POSIX threads start with their
// creator's: a process that sets it before it starts a thread has it on
// every thread.  pstrain's executable sets it before any library's
// initialiser runs (trainer/early_init.cpp), so OpenBLAS's, OpenMP's and
// UCX's threads have it too; the PS library sets it on the threads it runs
// on (server_config::flush_denormals).  Safe from any thread: each call
// reads or writes the calling thread's own register.
#pragma once

#include <optional>
#include <string_view>

namespace pstrain {

// The two modes: denormals flushed to zero (the default), or kept (IEEE 754).
enum class denormal_mode { flush, keep };

// False on a CPU with no such bits (then set_denormal_mode does nothing).
bool can_flush_denormals();

// Sets or clears FTZ and DAZ on the calling thread.
void set_denormal_mode(denormal_mode mode);

// The calling thread's mode: flush when FTZ and DAZ are both set.
denormal_mode current_denormal_mode();

// "flush" or "keep"; std::nullopt for anything else.
std::optional<denormal_mode> parse_denormal_mode(std::string_view text);

// Sets `mode` on the calling thread for the guard's life and then puts the
// thread's mode back as it was: for code that runs on a thread it does not
// own (a server on a thread of the program that links the library).
class scoped_denormal_mode {
public:
    explicit scoped_denormal_mode(denormal_mode mode);
    ~scoped_denormal_mode();
    scoped_denormal_mode(const scoped_denormal_mode&) = delete;
    scoped_denormal_mode& operator=(const scoped_denormal_mode&) = delete;

private:
    unsigned long saved_;
};

}  // namespace pstrain
