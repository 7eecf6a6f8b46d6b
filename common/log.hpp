// One logger for the trainer and tools: levels, a prefix naming the task
// ("pstrain[worker 1]: "), lines written whole to stderr through fmt.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace pstrain::log {

enum class level { error = 0, warn = 1, info = 2, debug = 3 };

void set_prefix(std::string prefix);  // e.g. "pstrain[worker 1]"
void set_level(level lvl);
level current_level();
// Parses "error|warn|info|debug"; throws pstrain::error otherwise.
level parse_level(std::string_view text);

void write(level lvl, std::string_view message);

template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) { write(level::error, fmt::format(f, std::forward<Args>(args)...)); }
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) { if (current_level() >= level::warn) write(level::warn, fmt::format(f, std::forward<Args>(args)...)); }
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) { if (current_level() >= level::info) write(level::info, fmt::format(f, std::forward<Args>(args)...)); }
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) { if (current_level() >= level::debug) write(level::debug, fmt::format(f, std::forward<Args>(args)...)); }

}  // namespace pstrain::log
