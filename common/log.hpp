// One logger for the trainer and tools: levels, a prefix naming the task
// ("pstrain[worker 1]: "), lines written whole to stderr through fmt.
// Text lines by default; with format::json (--log-format json, or
// PSTRAIN_LOG_FORMAT=json) one JSON object a line for log collectors:
//   {"time": "2026-11-23T12:00:01.250Z", "level": "info", "task": "pstrain[worker 1]",
//    "host": "n1", "pid": 4242, "job_id": "17", "message": "..."}
// ("job_id" only under Slurm).
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace pstrain::log {

enum class level { error = 0, warn = 1, info = 2, debug = 3 };
enum class format { text, json };

void set_prefix(std::string prefix);  // e.g. "pstrain[worker 1]"
void set_level(level lvl);
level current_level();
// Parses "error|warn|info|debug"; throws pstrain::error otherwise.
level parse_level(std::string_view text);
void set_format(format f);
// Parses "text|json"; throws pstrain::error otherwise.
format parse_format(std::string_view text);
// PSTRAIN_LOG_FORMAT, when set: lines before the command line is parsed
// take the site's format too.  Throws pstrain::error on another value.
void format_from_environment();

void write(level lvl, std::string_view message);

template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args)
{
    write(level::error, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args)
{
    if (current_level() >= level::warn) write(level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args)
{
    if (current_level() >= level::info) write(level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args)
{
    if (current_level() >= level::debug) write(level::debug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace pstrain::log
