#include "common/log.hpp"

#include "pstrain/error.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>

#include <unistd.h>

namespace pstrain::log {
namespace {

std::mutex mutex;
std::string prefix_text = "pstrain";
std::atomic<int> threshold{static_cast<int>(level::info)};

}  // namespace

void set_prefix(std::string prefix)
{
    std::lock_guard lock(mutex);
    prefix_text = std::move(prefix);
}

void set_level(level lvl) { threshold = static_cast<int>(lvl); }
level current_level() { return static_cast<level>(threshold.load()); }

level parse_level(std::string_view text)
{
    if (text == "error") return level::error;
    if (text == "warn") return level::warn;
    if (text == "info") return level::info;
    if (text == "debug") return level::debug;
    throw pstrain::error(fmt::format("log level '{}' is not one of error, warn, info, debug", text));
}

void write(level lvl, std::string_view message)
{
    std::string line;
    {
        std::lock_guard lock(mutex);
        line = prefix_text;
    }
    line += ": ";
    if (lvl == level::error) line += "error: ";
    if (lvl == level::warn) line += "warning: ";
    line.append(message);
    line += '\n';
    // One write(2) per line, so lines of several tasks do not interleave.
    const char* p = line.data();
    std::size_t left = line.size();
    while (left > 0) {
        ssize_t n = ::write(STDERR_FILENO, p, left);
        if (n <= 0) break;
        p += n;
        left -= static_cast<std::size_t>(n);
    }
}

}  // namespace pstrain::log
