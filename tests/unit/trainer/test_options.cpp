// The trainer's command line: each bad value is one clear line.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE options
#include <boost/test/unit_test.hpp>

#include "trainer/app/options.hpp"

#include <cstdio>
#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <vector>

using pstrain::trainer::parse_command_line;

namespace {

// Parses; returns what was written to stderr and sets ok/exit code.
std::string parse(std::vector<std::string> args, bool& ok, int& code)
{
    args.insert(args.begin(), "pstrain");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    char path[] = "/tmp/pstrain-opt-XXXXXX";
    int fd = mkstemp(path);
    int saved = dup(2);
    dup2(fd, 2);
    code = -1;
    ok = parse_command_line(static_cast<int>(argv.size()), argv.data(), code).has_value();
    dup2(saved, 2);
    close(saved);
    std::string out;
    char buf[4096];
    lseek(fd, 0, SEEK_SET);
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
    close(fd);
    unlink(path);
    return out;
}

void expect_error(std::vector<std::string> args, const std::string& part)
{
    bool ok = true;
    int code = 0;
    auto err = parse(args, ok, code);
    BOOST_TEST(!ok);
    BOOST_TEST(code == 2);
    BOOST_TEST(err.find(part) != std::string::npos, "stderr: " << err);
    BOOST_TEST(std::count(err.begin(), err.end(), '\n') == 1, "one line: " << err);
}

}  // namespace

BOOST_AUTO_TEST_CASE(good_flags)
{
    bool ok = false;
    int code = 0;
    parse({"--standalone", "--hidden-units", "256,128", "--optimizer", "adam", "--learning-rate", "0.001"}, ok, code);
    BOOST_TEST(ok);
}

BOOST_AUTO_TEST_CASE(batch_size_zero) { expect_error({"--batch-size", "0"}, "--batch-size"); }
BOOST_AUTO_TEST_CASE(negative_learning_rate) { expect_error({"--learning-rate", "-1"}, "--learning-rate"); }
BOOST_AUTO_TEST_CASE(empty_hidden_layer) { expect_error({"--hidden-units", "10,,5"}, "--hidden-units 10,,5: '' is not a layer width"); }
BOOST_AUTO_TEST_CASE(text_train_steps) { expect_error({"--train-steps", "abc"}, "--train-steps"); }
BOOST_AUTO_TEST_CASE(unknown_flag) { expect_error({"--frobnicate"}, "--frobnicate"); }
BOOST_AUTO_TEST_CASE(unknown_optimizer) { expect_error({"--optimizer", "rmsprop"}, "rmsprop"); }
BOOST_AUTO_TEST_CASE(errors_say_where_help_is) { expect_error({"--batch-size", "x"}, "see pstrain --help"); }
BOOST_AUTO_TEST_CASE(keep_no_checkpoint) { expect_error({"--keep-checkpoints", "0"}, "--keep-checkpoints: Value 0 not in range 1 to 1000000"); }
BOOST_AUTO_TEST_CASE(negative_checkpoint_interval) { expect_error({"--save-checkpoint-secs", "-5"}, "--save-checkpoint-secs"); }
BOOST_AUTO_TEST_CASE(text_checkpoint_steps) { expect_error({"--save-checkpoint-steps", "often"}, "--save-checkpoint-steps"); }
BOOST_AUTO_TEST_CASE(shared_memory_yes) { expect_error({"--shared-memory", "yes"}, "--shared-memory: yes not in {auto,off}"); }
