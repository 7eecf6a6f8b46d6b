// In-memory datasets: dense float features (row-major) and integer labels.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace pstrain::data {

struct dataset {
    std::size_t rows = 0;
    std::size_t cols = 0;  // features per example
    // Images (IDX files): cols = channels x height x width, stored channel
    // after channel (NCHW).  0: flat rows of features.
    int channels = 0, height = 0, width = 0;
    // What a raw 0 (an empty pixel) became after normalisation, per
    // channel (one value for flat rows): what a shifted image is padded with.
    std::vector<float> background;
    int num_classes = 0;               // 0 for regression
    std::vector<float> features;       // rows * cols, row-major
    std::vector<std::int32_t> labels;  // classification targets (rows)
    std::vector<float> targets;        // regression targets (rows)

    const float* row(std::size_t i) const { return features.data() + i * cols; }
};

struct train_test {
    dataset train;
    dataset test;
    std::string description;  // where it came from, for the log
};

// IDX (MNIST format) files; `path` may end in .gz or be plain.  Pixels are
// scaled to [0, 1].  Throws pstrain::error naming the file and the problem:
// missing, bad magic number, wrong dimensions, truncated, trailing bytes.
dataset read_idx_pair(const std::filesystem::path& images, const std::filesystem::path& labels);

// CSV "label,p0,p1,...": an optional header line, one example per line, the
// same number of columns on every line.  Pixels 0..255 are scaled to [0, 1].
dataset read_csv(const std::filesystem::path& file);

// How load_directory normalises the features: by the training set's mean
// and standard deviation over all features (global, one scalar each, pixels
// share a scale), or per channel of the images.
enum class normalization { global, per_channel };

// A data directory: MNIST-format files (train-images-idx3-ubyte[.gz], ...),
// or train.csv and test.csv.
train_test load_directory(const std::filesystem::path& dir, normalization how = normalization::global);

// Shifts and scales every feature by the training set's mean and standard
// deviation: zero mean, unit variance, globally or per image channel (flat
// rows are one channel).  load_directory applies it.
void standardize(train_test& t, normalization how = normalization::global);

// y = 2x + 10, x uniform in (-1, 1), plus N(0, 0.33^2) noise in the training
// set only: the classic known-answer check. A seed gives the same numbers
// with every compiler and standard library (common/random.hpp).
train_test make_linear(std::size_t train_rows, std::size_t test_rows, std::uint64_t seed);

}  // namespace pstrain::data
