// The main() of the GPU tests: Boost.Test's, where a CUDA device is
// visible; otherwise it says why and exits 77, automake's SKIP.  Include it
// once, after the test cases.
#pragma once

#include <boost/test/unit_test.hpp>

#include "trainer/compute/cuda_backend.hpp"

#include <cstdio>
#include <string>

int main(int argc, char* argv[])
{
    std::string why;
    if (!pstrain::compute::cuda_device_available(why)) {
        std::printf("SKIP: %s\n", why.c_str());
        return 77;
    }
    return boost::unit_test::unit_test_main([] { return true; }, argc, argv);
}
