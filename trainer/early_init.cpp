// Denormals flushed before any library's initialiser runs.  The mode is a
// thread's own (common/denormals.hpp) and a new thread starts with its
// creator's, and OpenBLAS starts its threads when it is loaded, before
// main: so the main thread sets it from the executable's .preinit_array,
// which the dynamic loader runs first, and every thread of the process has
// it from then on, whichever library made it and whenever.  The
// environment's PSTRAIN_DENORMALS=keep leaves IEEE 754 arithmetic; main()
// checks the variable and reports a wrong value.  The environment comes as
// the third argument: libc's own may not be set up yet.
#include "common/denormals.hpp"

#include <cstring>

namespace {

void flush_denormals_before_the_libraries(int, char**, char** envp)
{
    constexpr char name[] = "PSTRAIN_DENORMALS=";
    for (char** e = envp; e && *e; ++e)
        if (std::strncmp(*e, name, sizeof name - 1) == 0 &&
            pstrain::parse_denormal_mode(*e + sizeof name - 1) != pstrain::denormal_mode::flush)
            return;
    pstrain::set_denormal_mode(pstrain::denormal_mode::flush);
}

}  // namespace

// The dynamic loader calls what this section lists with (argc, argv, envp).
using preinit_function = void (*)(int, char**, char**);
[[gnu::section(".preinit_array"), gnu::used]] static const preinit_function flush_first =
    &flush_denormals_before_the_libraries;
