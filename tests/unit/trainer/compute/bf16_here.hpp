// A Boost.Test precondition: --precision bf16 runs on this machine (a build
// with oneDNN, a CPU with AMX or AVX512-BF16).  Tests of bf16 results are
// skipped, naming the reason, where it does not.
#pragma once

#include "config.h"
#include "trainer/compute/precision.hpp"

#include <boost/test/unit_test.hpp>

namespace pstrain::testing {

struct bf16_here {
    boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const
    {
#ifdef HAVE_DNNL
        const bool onednn = true;
#else
        const bool onednn = false;
#endif
        const auto refusal = compute::bf16_refusal(compute::detect_cpu_features(), onednn);
        boost::test_tools::assertion_result r(refusal.empty());
        r.message() << refusal;
        return r;
    }
};

}  // namespace pstrain::testing
