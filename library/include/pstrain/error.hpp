// pstrain::error, the one exception type of pstrain's code and of the
// parameter-server library.  Its message is a single lowercase line that
// names the problem and says what to do.  peer_error is an error that came
// from (or is about) one peer: its name says which.
#pragma once

#include <stdexcept>
#include <string>

namespace pstrain {

class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class peer_error : public error {
public:
    peer_error(std::string peer, const std::string& message) : error(message), peer_(std::move(peer)) {}
    // "ps 0 (n1)"
    const std::string& peer() const { return peer_; }

private:
    std::string peer_;
};

}  // namespace pstrain
