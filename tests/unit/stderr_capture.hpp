// What a block of a test writes to stderr (the log), for tests that check
// the lines a user would read.  If the block throws, what it wrote is shown
// in the test's messages and the exception goes on.
#pragma once

#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

namespace pstrain::testing {

template <typename F>
std::string stderr_of(F f)
{
    char path[] = "/tmp/pstrain-test-stderr-XXXXXX";
    const int fd = ::mkstemp(path);
    BOOST_TEST_REQUIRE(fd >= 0);
    const int saved = ::dup(STDERR_FILENO);
    ::dup2(fd, STDERR_FILENO);
    std::exception_ptr failure;
    try {
        f();
    } catch (...) {
        failure = std::current_exception();
    }
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    ::close(fd);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    ::unlink(path);
    if (failure) {
        BOOST_TEST_MESSAGE(text.str());
        std::rethrow_exception(failure);
    }
    return text.str();
}

}  // namespace pstrain::testing
