// Synthetic click-through data (`pstrain datagen ctr`): lines in Criteo's
// TSV format (ctr.hpp) drawn from a planted teacher, whose own AUC (what a
// model knowing every id's weight reaches) is known.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace pstrain::data {

struct ctr_generator_options {
    std::uint64_t samples = 1000000;
    std::uint64_t seed = 1;
    double test_fraction = 0.1;  // the last part goes to test.tsv
    std::uint64_t lines_per_file = 1000000;
    double zipf = 1.1;  // popularity of each field's ids
    int factors = 4;    // the teacher's factorisation-machine rank
};

struct ctr_generated {
    std::uint64_t train_samples = 0, test_samples = 0;
    std::vector<std::filesystem::path> files;
    double oracle_auc = 0;  // of the teacher's own probabilities, on test.tsv
    double oracle_logloss = 0;
    double click_rate = 0;
};

// `pstrain datagen ctr`: writes train-NNNNN.tsv files, test.tsv and
// oracle.json into `dir` (made if missing).  Each line's clicks are drawn
// from a hidden factorisation machine over its ids (Zipf-distributed per
// field, each field with its own vocabulary) and numeric features, so the
// best AUC any model can reach is the teacher's own, written to
// oracle.json.  Throws pstrain::error naming the path when it cannot write.
ctr_generated generate_ctr(const std::filesystem::path& dir, const ctr_generator_options& o);

}  // namespace pstrain::data
