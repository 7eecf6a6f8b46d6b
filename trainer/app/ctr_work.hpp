// Click-through training (--model wide-deep, or a --data-dir of TSV files):
// the embedding tables every PS holds, a worker's batches streamed from
// its share of the files, one sparse pull of a batch's unique keys per
// table, and the chief's evaluation by AUC and log loss on the held-out
// test.tsv.
#pragma once

#include "pstrain/client.hpp"
#include "pstrain/embedding.hpp"
#include "trainer/app/options.hpp"
#include "trainer/data/ctr_reader.hpp"
#include "trainer/model/ctr_model.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace pstrain::trainer {

// The model --model wide-deep and the embedding options describe.
model::wide_deep_config wide_deep_config_for(const train_options& o);

// The embedding tables of the model, as every PS and every worker must
// configure them (same order, same dims): optimizer, learning rate,
// admission, eviction and the row limit from the options.  A limit of 0
// becomes what half the machine's memory holds.
std::vector<ps::embedding_config> embedding_tables_for(const train_options& o);

// Examples as the model reads them: labels, numeric features, and every
// field's ids, field after field (the held-out set, and a batch).
class ctr_examples {
public:
    ctr_examples(int fields, int numeric) : fields_(fields), numeric_(numeric) { bag_begin_.push_back(0); }
    void clear();
    void add(const data::ctr_sample& s);
    std::size_t size() const { return labels_.size(); }
    std::span<const float> labels() const { return labels_; }

    // Examples [begin, end) as a sparse_batch whose unique keys are
    // unique(): deduplicated here (one pull per table of each key).
    model::sparse_batch batch(std::size_t begin, std::size_t end);
    std::span<const std::uint64_t> unique() const { return unique_; }

private:
    int fields_, numeric_;
    std::vector<float> labels_, numeric_values_;
    std::vector<std::uint64_t> ids_;
    std::vector<std::uint32_t> bag_begin_;  // into ids_, size()*fields + 1
    // The batch's view: its bags rebased to 0, unique keys, places.
    std::vector<std::uint32_t> batch_bags_, places_;
    std::vector<std::uint64_t> unique_;
};

struct ctr_metrics {
    double auc = 0.5, logloss = 0, accuracy = 0;
    std::size_t examples = 0;
};

// The held-out set of a CTR data directory: test.tsv (all of it), and
// the best AUC a model can reach on it when the data set says so
// (datagen's oracle.json).  Throws pstrain::error naming the directory
// and the fix when test.tsv is missing.
struct ctr_test_set {
    std::unique_ptr<ctr_examples> examples;
    std::optional<double> oracle_auc;
};
ctr_test_set read_ctr_test_set(const train_options& o, int fields, int numeric);

// One worker's training on its share of the TSV files.
class ctr_work {
public:
    ctr_work(const train_options& o, model::ctr_model& m, ps::client& c, int worker, int num_workers);

    // Reads the next batch (from the first file again at the end), pulls
    // the rows of its unique keys, computes the dense gradient into the
    // client's grads() and the rows' gradients, and sends the rows'
    // update; finish() waits for it (after the dense step).
    model::batch_result compute();
    void finish();
    // A lost PS's replacement abandoned every call in flight: the row
    // updates sent are no longer waited for.
    void abandon() { pushes_.clear(); }
    // A resumed job skips the batches drawn before the checkpoint.
    void skip_batches(std::uint64_t batches);
    // The workers changed (an elastic job): from the next batch on, this
    // worker reads share `shard` of `num_shards`.
    void reshard(int num_shards, int shard)
    {
        reader_.reshard(static_cast<std::size_t>(shard), static_cast<std::size_t>(num_shards));
    }
    // Epochs begun over this worker's share (1 in the first pass).
    std::uint64_t epoch() const { return epoch_; }
    // Time in the model's compute_gradients (for --profile: the rest is
    // reading, the client's requests and their waits).
    std::chrono::nanoseconds model_time() const { return model_time_; }
    // Malformed lines skipped (--skip-bad-lines), over every pass.
    std::uint64_t bad_lines() const { return reader_.bad_lines(); }

    // The model on `test` with the values in the client's params() and
    // the rows the PS tasks hold (read-only lookups).
    ctr_metrics evaluate(ctr_examples& test);

private:
    bool read_example(data::ctr_sample& s);
    void pull(std::span<const std::uint64_t> keys, bool lookup);

    const train_options& o_;
    model::ctr_model& model_;
    ps::client& client_;
    data::ctr_reader reader_;
    std::uint64_t epoch_ = 1;
    std::chrono::nanoseconds model_time_{0};
    ctr_examples batch_;
    data::ctr_sample sample_;
    std::vector<std::vector<float>> rows_, row_grads_;
    std::vector<std::span<const float>> row_views_;
    std::vector<std::span<float>> grad_views_;
    std::vector<ps::ticket> pushes_;
    std::vector<float> probabilities_;
};

}  // namespace pstrain::trainer
