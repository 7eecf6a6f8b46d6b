#include "common/log.hpp"

#include "pstrain/error.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include <nlohmann/json.hpp>
#include <unistd.h>

namespace pstrain::log {
namespace {

std::mutex mutex;
std::string prefix_text = "pstrain";
std::atomic<int> threshold{static_cast<int>(level::info)};
std::atomic<bool> as_json{false};

const char* level_name(level lvl)
{
    switch (lvl) {
    case level::error: return "error";
    case level::warn: return "warn";
    case level::info: return "info";
    case level::debug: return "debug";
    }
    return "info";
}

// Now in UTC, ISO 8601 with milliseconds.
std::string utc_now()
{
    const auto now = std::chrono::system_clock::now();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
    return fmt::format("{}.{:03}Z", text, ms);
}

std::string json_line(level lvl, const std::string& task, std::string_view message)
{
    static const std::string host = [] {
        char name[256] = {};
        if (const char* node = std::getenv("SLURMD_NODENAME"); node && *node) return std::string(node);
        ::gethostname(name, sizeof name - 1);
        return std::string(name);
    }();
    nlohmann::ordered_json j;
    j["time"] = utc_now();
    j["level"] = level_name(lvl);
    j["task"] = task;
    j["host"] = host;
    j["pid"] = static_cast<long>(::getpid());
    if (const char* job = std::getenv("SLURM_JOB_ID"); job && *job) j["job_id"] = job;
    // A message that is not UTF-8 (a file name, a peer's bytes) is kept,
    // its bad bytes replaced, rather than losing the line.
    j["message"] = std::string(message);
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

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

void set_format(format f) { as_json = f == format::json; }

format parse_format(std::string_view text)
{
    if (text == "text") return format::text;
    if (text == "json") return format::json;
    throw pstrain::error(fmt::format("log format '{}' is not one of text, json", text));
}

void format_from_environment()
{
    const char* f = std::getenv("PSTRAIN_LOG_FORMAT");
    if (!f || !*f) return;
    try {
        set_format(parse_format(f));
    } catch (const pstrain::error& e) {
        throw pstrain::error(fmt::format("PSTRAIN_LOG_FORMAT: {}: set it to text or json, or unset it", e.what()));
    }
}

void write(level lvl, std::string_view message)
{
    std::string task;
    {
        std::lock_guard lock(mutex);
        task = prefix_text;
    }
    std::string line;
    if (as_json) {
        line = json_line(lvl, task, message);
    } else {
        line = task + ": ";
        if (lvl == level::error) line += "error: ";
        if (lvl == level::warn) line += "warning: ";
        line.append(message);
    }
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
