#include "trainer/app/signals.hpp"

#include "pstrain/error.hpp"

#include <atomic>
#include <csignal>
#include <cstring>

#include <fmt/format.h>

namespace pstrain::trainer {
namespace {

volatile std::sig_atomic_t requested = 0;

extern "C" void on_termination(int) { requested = 1; }

}  // namespace

void catch_termination()
{
    static std::atomic<bool> installed{false};
    if (installed.exchange(true)) return;
    struct sigaction sa {};
    sa.sa_handler = on_termination;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGTERM, &sa, nullptr) != 0)
        throw error(fmt::format("sigaction(SIGTERM) failed: {}", std::strerror(errno)));
}

bool termination_requested() { return requested != 0; }

}  // namespace pstrain::trainer
