// `pstrain selftest`: the installed binary checks the kernels it computes
// with on this node against the CPU oracle (compute/oracle.hpp: each layer
// written the direct way, in double), every layer kind forward and backward
// at a few odd shapes, and then trains a small CNN for a few hundred steps.
// One line a check, a verdict, exit 0 (all passed) or 1.  What an admin runs
// on a new node (pstrain-admin(8)), and the first thing to run on a GPU.
//
// Callers: main (the command), the unit tests (the checks on the CPU).
// Single-threaded, apart from the backend's own threads.
#pragma once

#include "trainer/compute/backend.hpp"

#include <string>
#include <vector>

namespace pstrain::trainer {

// One check: what was checked, and what was found.
struct check_outcome {
    std::string what;  // "conv2d 2x3x9x7 * 4x3x3, stride 1, same: forward"
    bool passed = false;
    std::string detail;  // "max error 3.1e-07 (bound 1.3e-04)", or the element that failed
};

// The kernel checks of `be` (made at precision `p`): dense, ReLU and the
// softmax loss of the backend; convolution, max and average pooling, the
// activations, softmax, mean squared error, dropout, batch normalization
// and the device copy of its layer kernels.  At bf16 the products' operands
// are rounded to bf16 before the oracle, and their results may be rounded
// too.  On a backend whose memory is not the host's, dropout's masks are
// compared with the CPU's (every device draws the same).
std::vector<check_outcome> check_kernels(compute::backend& be, compute::precision p);

// Trains a small CNN (conv2d:4:3x3:relu,maxpool:2,flatten,dense:16:relu,
// dense:4) with SGD on synthetic 12x12 images of four classes for `steps`
// steps of 32 from seed 1: passes when the loss falls to a quarter of the
// first step's and the test accuracy reaches 0.95.  On a backend whose
// memory is not the host's, a second outcome compares its first step's
// loss with the CPU's (the same parameters and batch).
std::vector<check_outcome> check_training(compute::backend& be, int steps);

int selftest_command(int argc, char** argv);

}  // namespace pstrain::trainer
