// Where a parameter-server client's or server's time has gone since it was
// made, phase by phase: to see what a training step is made of.  Each
// phase is timed around its own code (one clock read where one phase
// gives way to another, a few tens of nanoseconds) and the phases do not
// overlap: a phase entered inside another pauses it.  Any thread may read
// a profile while the owner runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace pstrain::ps {

struct time_profile {
    struct phase {
        const char* name = "";  // "update"
        const char* what = "";  // "the optimizer's update of the shard"
        std::chrono::nanoseconds time{0};
        std::uint64_t entered = 0;  // how often the phase began
    };
    // In the order the client or server names them.  A client's first
    // phase is the time outside its calls (the program's own work, such
    // as computing gradients); a server's is its start.
    std::vector<phase> phases;
    // Client: replies waited for; server: steps applied.
    std::uint64_t steps = 0;

    std::chrono::nanoseconds total() const
    {
        std::chrono::nanoseconds t{0};
        for (const auto& p : phases) t += p.time;
        return t;
    }
};

}  // namespace pstrain::ps
