// `pstrain plot METRICS.jsonl... -o curves.png`: training curves of one or
// more runs in one PNG, drawn by gnuplot (pngcairo): loss and test accuracy
// (a click-through run: test AUC, and its test log loss beside the loss)
// against the global step and against time, one line per run.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace pstrain::trainer {

// One point of a curve: its global step, the seconds since the run began
// (continued across the segments of a requeued run), its value, and which
// segment (0, 1, ...: each start of the job) it belongs to.
struct plot_point {
    std::int64_t step = 0;
    double seconds = 0, value = 0;
    int segment = 0;
};

// What `pstrain plot` draws of one metrics file.  A requeued job appends
// to the same file, and each start counts its elapsed_seconds from 0 and
// goes on from its checkpoint's step: an event whose elapsed_seconds or
// global step is below the one before starts a new segment, whose time is
// offset by where the last one ended, and the lines break between
// segments (the steps after the checkpoint are trained twice).
struct run_points {
    std::vector<plot_point> loss;       // progress: the training loss
    std::vector<plot_point> metric;     // eval: test AUC when `auc`, else test accuracy
    std::vector<plot_point> test_loss;  // eval of a click-through run: test log loss
    bool auc = false;                   // its evaluations carry test_auc (a click-through model)
    int segments = 0;                   // starts of the job seen in the file
};
run_points read_points(std::istream& in);

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
