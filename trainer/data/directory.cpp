// Finds the dataset files of a --data-dir, and the synthetic linear data.
#include "trainer/data/dataset.hpp"

#include "pstrain/error.hpp"
#include "common/random.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace pstrain::data {
namespace fs = std::filesystem;

namespace {

// "train-images-idx3-ubyte" or its .gz; empty when neither exists.
fs::path find_idx(const fs::path& dir, const std::string& base)
{
    for (const auto& name : {base, base + ".gz"}) {
        std::error_code ec;
        if (fs::exists(dir / name, ec)) return dir / name;
    }
    return {};
}

// A Criteo-style .tsv file in `dir`: click-through data.
bool holds_tsv(const fs::path& dir)
{
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".tsv") return true;
    return false;
}

}  // namespace

void standardize(train_test& t, normalization how)
{
    if (how == normalization::global) {
        double sum = 0, sum_sq = 0;
        for (float v : t.train.features) {
            sum += v;
            sum_sq += double(v) * v;
        }
        const double n = static_cast<double>(t.train.features.size());
        const double mean = sum / n;
        const double var = sum_sq / n - mean * mean;
        const float scale = var > 1e-12 ? static_cast<float>(1.0 / std::sqrt(var)) : 1.0f;
        for (auto* d : {&t.train, &t.test}) {
            for (auto& v : d->features) v = (v - static_cast<float>(mean)) * scale;
            d->background.assign(std::max(d->channels, 1), (0.0f - static_cast<float>(mean)) * scale);
        }
        t.description +=
            fmt::format(", standardised by the training set's mean {:.4f} and stddev {:.4f}", mean, std::sqrt(var));
        return;
    }
    // Per channel: the features of an example are channel after channel.
    const std::size_t channels = std::max(t.train.channels, 1);
    const std::size_t plane = t.train.cols / channels;
    std::vector<double> mean(channels), scale(channels);
    std::string stats;
    for (std::size_t c = 0; c < channels; ++c) {
        double sum = 0, sum_sq = 0;
        for (std::size_t r = 0; r < t.train.rows; ++r) {
            const float* p = t.train.row(r) + c * plane;
            for (std::size_t i = 0; i < plane; ++i) {
                sum += p[i];
                sum_sq += double(p[i]) * p[i];
            }
        }
        const double n = static_cast<double>(t.train.rows * plane);
        mean[c] = sum / n;
        const double var = sum_sq / n - mean[c] * mean[c];
        scale[c] = var > 1e-12 ? 1.0 / std::sqrt(var) : 1.0;
        stats += fmt::format("{}{:.4f}/{:.4f}", c ? ", " : "", mean[c], std::sqrt(var));
    }
    for (auto* d : {&t.train, &t.test}) {
        for (std::size_t r = 0; r < d->rows; ++r) {
            float* p = d->features.data() + r * d->cols;
            for (std::size_t c = 0; c < channels; ++c) {
                const float m = static_cast<float>(mean[c]), k = static_cast<float>(scale[c]);
                for (std::size_t i = 0; i < plane; ++i) p[c * plane + i] = (p[c * plane + i] - m) * k;
            }
        }
        d->background.resize(channels);
        for (std::size_t c = 0; c < channels; ++c)
            d->background[c] = (0.0f - static_cast<float>(mean[c])) * static_cast<float>(scale[c]);
    }
    t.description += fmt::format(", standardised per channel by the training set's mean/stddev {}", stats);
}

train_test load_directory(const fs::path& dir, normalization how)
{
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        throw error(fmt::format(
            "--data-dir {}: no such directory: point --data-dir at MNIST-format IDX files, train.csv/test.csv "
            "or Criteo-style .tsv click-through files (or install dataset-fashion-mnist)",
            dir.string()));
    train_test out;
    auto train_images = find_idx(dir, "train-images-idx3-ubyte");
    if (!train_images.empty()) {
        auto need = [&](const std::string& base) {
            auto p = find_idx(dir, base);
            if (p.empty())
                throw error(
                    fmt::format("{}: no {}[.gz] beside {}", dir.string(), base, train_images.filename().string()));
            return p;
        };
        out.train = read_idx_pair(train_images, need("train-labels-idx1-ubyte"));
        out.test = read_idx_pair(need("t10k-images-idx3-ubyte"), need("t10k-labels-idx1-ubyte"));
        out.description = fmt::format("IDX files in {}", dir.string());
    } else if (fs::exists(dir / "train.csv", ec)) {
        if (!fs::exists(dir / "test.csv", ec)) throw error(fmt::format("{}: train.csv without test.csv", dir.string()));
        out.train = read_csv(dir / "train.csv");
        out.test = read_csv(dir / "test.csv");
        out.description = fmt::format("CSV files in {}", dir.string());
    } else if (holds_tsv(dir)) {
        // Click-through data, and a model for images (options.cpp picks
        // deepfm for .tsv files only when --model is not given).
        throw error(
            fmt::format("--data-dir {} holds .tsv click-through data, which trains --model deepfm or wide-deep; the "
                        "image models (mlp, lenet5, cnn, layer specs) need MNIST-format IDX files or "
                        "train.csv/test.csv: pick one of those models, or another --data-dir",
                        dir.string()));
    } else {
        throw error(
            fmt::format("--data-dir {}: no train-images-idx3-ubyte[.gz], train.csv or .tsv files: point --data-dir at "
                        "MNIST-format IDX files, train.csv/test.csv, or Criteo-style .tsv click-through files",
                        dir.string()));
    }
    if (out.train.cols != out.test.cols)
        throw error(fmt::format("{}: training examples have {} features, test examples {}", dir.string(),
                                out.train.cols, out.test.cols));
    if (out.train.height != out.test.height || out.train.width != out.test.width)
        throw error(fmt::format("{}: training images are {}x{}, test images {}x{}: use matching files", dir.string(),
                                out.train.height, out.train.width, out.test.height, out.test.width));
    out.train.num_classes = out.test.num_classes = std::max(out.train.num_classes, out.test.num_classes);
    standardize(out, how);
    return out;
}

train_test make_linear(std::size_t train_rows, std::size_t test_rows, std::uint64_t seed)
{
    // Our own distributions, not the standard library's: the data (and so
    // the trained weight and bias of a seed) are the same everywhere.
    random::splitmix64 rng(seed ^ 0x6c696e656172ull);  // "linear"
    auto make = [&](std::size_t n, bool noisy) {
        dataset d;
        d.rows = n;
        d.cols = 1;
        for (std::size_t i = 0; i < n; ++i) {
            const double v = random::uniform(rng, -1.0, 1.0);
            const double noise = noisy ? 0.33 * random::standard_normal(rng) : 0.0;
            d.features.push_back(static_cast<float>(v));
            d.targets.push_back(static_cast<float>(2.0 * v + 10.0 + noise));
        }
        return d;
    };
    train_test out;
    out.train = make(train_rows, true);
    out.test = make(test_rows, false);
    out.description = "synthetic y = 2x + 10 + N(0, 0.33^2)";
    return out;
}

}  // namespace pstrain::data
