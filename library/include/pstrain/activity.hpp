// What a parameter-server client or server is doing, readable from any
// thread while its owner thread waits: how far it has come, and, while it
// waits, for which peers and which request.  For a program's own watchdog
// or status display; the library only reports, the program decides what a
// long wait means.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::ps {

struct activity {
    // Grows with every exchange completed (client: replies received;
    // server: requests handled and steps applied).  Unchanged: no progress.
    std::uint64_t progress = 0;
    // In a wait on peers now.
    bool waiting = false;
    // While waiting: the peers it waits for (the transport's numbering) and
    // their names ("ps 0 (n1)"); empty when it waits for nobody in particular.
    std::vector<std::size_t> peers;
    std::vector<std::string> peer_names;
    // While waiting: what for ("the reply to push of step 42").
    std::string request;
    // Server: training has ended and it only waits, at most
    // server_config::shutdown_wait, for the workers' last requests.
    bool ending = false;
    // Server: a spare that waits for the chief's take_over.  Nobody waits
    // for it, so its quiet, however long, is no stall.
    bool idle = false;
};

}  // namespace pstrain::ps
