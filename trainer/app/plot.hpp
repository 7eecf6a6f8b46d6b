// `pstrain plot METRICS.jsonl... -o curves.png`: training curves of one or
// more runs in one PNG, drawn by gnuplot (pngcairo): loss and test accuracy
// against the global step and against time, one line per run.
#pragma once

#include <string>
#include <vector>

namespace pstrain::trainer {

struct plot_request {
    std::vector<std::string> metrics;  // files, one run each
    std::string output;                // the PNG
    int width = 1200, height = 800;
    std::string title = "pstrain training curves";
};

// Writes the PNG; throws pstrain::error naming what is wrong (a file that
// cannot be read or holds no progress, gnuplot missing or failing).
void plot(const plot_request& r);

// `pstrain plot ...`: the exit status.
int plot_command(int argc, char** argv);

}  // namespace pstrain::trainer
