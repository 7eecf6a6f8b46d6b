// Click-through models: embeddings of sparse features, whose rows live in
// the PS's embedding tables, and a dense part whose tensors live in the
// flat vector like every other model's.  The model knows neither tables
// nor the PS: the caller pulls the rows of a batch's unique keys, the
// model computes with them and writes their gradients, the caller pushes.
#pragma once

#include "trainer/model/model.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pstrain::model {

// One embedding table the model reads: its name and floats per row.
struct table_spec {
    std::string name;  // "wide", "deep"
    int dim = 0;
};

// How the ids of one multi-hot field become one embedding.
enum class bag_combiner { sum, mean };

// "sum", "mean"; throws pstrain::error naming the accepted ones.
bag_combiner parse_bag_combiner(const std::string& name);

// A batch of click-through examples as the model sees it, its keys
// already made unique by the caller (every table is looked up with the
// same keys, so one set of unique keys serves them all).
struct sparse_batch {
    int rows = 0;
    int fields = 0;                   // categorical fields per example
    int numeric = 0;                  // numeric features per example
    std::span<const float> labels;    // rows, 0 or 1
    std::span<const float> features;  // rows x numeric
    // Example r's field f holds the ids at places[bag_begin[r * fields + f]
    // .. bag_begin[r * fields + f + 1]); an empty bag embeds as zeros.
    std::span<const std::uint32_t> bag_begin;  // rows * fields + 1
    // Each id's index into the batch's unique keys (the rows pulled).
    std::span<const std::uint32_t> places;
    std::size_t unique = 0;  // unique keys in the batch
};

class ctr_model : public tensor_model {
public:
    // The tables the model reads, in the order rows and row gradients are given.
    const std::vector<table_spec>& tables() const { return tables_; }
    bool is_classifier() const override { return true; }

    // Mean sigmoid cross-entropy (and accuracy at 0.5) over the batch.
    // rows[t] holds b.unique x tables()[t].dim floats, the pulled rows in
    // unique-key order.  Writes the gradient of the mean loss into `grads`
    // (num_params()) and into row_grads[t] (b.unique x dim: the sum over a
    // key's occurrences).  Allocates nothing for batches up to max_batch.
    virtual batch_result compute_gradients(std::span<const float> params, const sparse_batch& b,
                                           std::span<const std::span<const float>> rows, std::span<float> grads,
                                           std::span<const std::span<float>> row_grads) = 0;

    // The click probability of each example into probabilities (b.rows).
    virtual void predict(std::span<const float> params, const sparse_batch& b,
                         std::span<const std::span<const float>> rows, std::span<float> probabilities) = 0;

protected:
    std::vector<table_spec> tables_;
};

struct wide_deep_config {
    int fields = 26;                      // categorical fields
    int numeric = 13;                     // numeric features
    int embedding_dim = 16;               // the "deep" table's dim
    std::vector<int> hidden = {128, 64};  // the deep part's ReLU layers
    bag_combiner combiner = bag_combiner::sum;
    // DeepFM (Guo et al. 2017): a factorisation machine's pairwise term
    // over the fields' deep embeddings joins the logit.
    bool fm = false;
    std::size_t max_batch = 1024;
};

// Wide & deep (Cheng et al. 2016): logit = wide + deep, where
//   wide = bias + numeric . w + sum over fields of the bag of the "wide"
//          table's 1-float rows,
//   deep = an MLP (ReLU) over [the bag of each field's "deep" rows, in
//          field order; the numeric features].
// With fm (DeepFM), logit += sum over pairs of fields f < g of
// <e_f, e_g>, e_f being field f's combined "deep" row (the teacher of
// `pstrain datagen ctr` has this form).
// Tensors: wide/weights [numeric], wide/bias [1], deep/hidden_i/{weights,
// biases}, deep/logit/{weights [last, 1], biases [1]}; glorot-uniform
// weights, zero biases.  Runs on the CPU: the deep part's matrix products
// through `products` (a host-memory backend: its linear_forward and
// linear_backward, so at --precision bf16 they multiply in bf16), which
// outlives the model.  Made without one, the model is a shape (summaries,
// table specs): computing throws.  Throws pstrain::error on a bad
// configuration.
std::unique_ptr<ctr_model> make_wide_deep(const wide_deep_config& c, compute::backend* products = nullptr);

}  // namespace pstrain::model
