#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE log
#include <boost/test/unit_test.hpp>

#include "common/log.hpp"
#include "pstrain/error.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

using namespace pstrain;

namespace {

// The lines a block writes to stderr.
template <typename F>
std::vector<std::string> stderr_lines(F f)
{
    char path[] = "/tmp/pstrain-test-log-XXXXXX";
    const int fd = ::mkstemp(path);
    BOOST_TEST_REQUIRE(fd >= 0);
    const int saved = ::dup(STDERR_FILENO);
    ::dup2(fd, STDERR_FILENO);
    f();
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    ::close(fd);
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    ::unlink(path);
    return lines;
}

struct restore_format {
    ~restore_format()
    {
        log::set_format(log::format::text);
        log::set_prefix("pstrain");
        ::unsetenv("PSTRAIN_LOG_FORMAT");
        ::unsetenv("SLURM_JOB_ID");
    }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(text_lines_name_the_task_and_the_level, restore_format)
{
    log::set_prefix("pstrain[worker 1]");
    auto lines = stderr_lines([] {
        log::info("step {}/{}", 100, 1000);
        log::warn("slow");
        log::error("broken");
    });
    BOOST_TEST_REQUIRE(lines.size() == 3u);
    BOOST_TEST(lines[0] == "pstrain[worker 1]: step 100/1000");
    BOOST_TEST(lines[1] == "pstrain[worker 1]: warning: slow");
    BOOST_TEST(lines[2] == "pstrain[worker 1]: error: broken");
}

BOOST_FIXTURE_TEST_CASE(json_lines_are_one_object_each_with_every_field, restore_format)
{
    log::set_prefix("pstrain[ps 0]");
    log::set_format(log::format::json);
    ::setenv("SLURM_JOB_ID", "4242", 1);
    auto lines = stderr_lines([] {
        log::info("a \"quoted\" word\nand a second line");
        log::error("bad byte \xff in a name");
        log::debug("not shown at level info");
    });
    BOOST_TEST_REQUIRE(lines.size() == 2u);  // the newline inside a message is escaped
    auto first = nlohmann::json::parse(lines[0]);
    BOOST_TEST(first["level"] == "info");
    BOOST_TEST(first["task"] == "pstrain[ps 0]");
    BOOST_TEST(first["message"] == "a \"quoted\" word\nand a second line");
    BOOST_TEST(first["job_id"] == "4242");
    BOOST_TEST(first["pid"] == static_cast<long>(::getpid()));
    BOOST_TEST(!first["host"].get<std::string>().empty());
    const auto time = first["time"].get<std::string>();
    BOOST_TEST(time.size() == 24u);  // 2026-11-23T12:00:01.250Z
    BOOST_TEST(time[10] == 'T');
    BOOST_TEST(time.back() == 'Z');
    auto second = nlohmann::json::parse(lines[1]);
    BOOST_TEST(second["level"] == "error");
    BOOST_TEST(second["message"].get<std::string>().find("bad byte") == 0u);  // kept, the bad byte replaced
}

BOOST_FIXTURE_TEST_CASE(formats_parse_and_refuse_with_the_fix, restore_format)
{
    BOOST_TEST((log::parse_format("json") == log::format::json));
    BOOST_TEST((log::parse_format("text") == log::format::text));
    BOOST_CHECK_THROW(log::parse_format("xml"), pstrain::error);
    ::setenv("PSTRAIN_LOG_FORMAT", "yaml", 1);
    std::string why;
    try {
        log::format_from_environment();
    } catch (const pstrain::error& e) {
        why = e.what();
    }
    BOOST_TEST(why ==
               "PSTRAIN_LOG_FORMAT: log format 'yaml' is not one of text, json: set it to text or json, or unset it");
    ::setenv("PSTRAIN_LOG_FORMAT", "json", 1);
    log::format_from_environment();
    auto lines = stderr_lines([] { log::info("hello"); });
    BOOST_TEST_REQUIRE(lines.size() == 1u);
    BOOST_TEST(nlohmann::json::parse(lines[0])["message"] == "hello");
}
