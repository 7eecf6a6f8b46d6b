// pstrain::error — the one exception type of the core.  Its message is a
// single lowercase line that names the problem and says what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace pstrain {

class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace pstrain
