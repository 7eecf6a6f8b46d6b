// Sparse embedding tables, one shard of one table per PS: a hash table from
// a 64-bit feature id to a row (the embedding, its optimizer state, when it
// was last seen and how often).  Rows are made when a key is first pulled
// (after `admit_after` occurrences), with values drawn from the seed and the
// key alone, so a row is the same whichever PS makes it and in whatever
// order; a push updates only the rows it names (lazy, row-wise optimizers);
// rows unseen for `evict_after` steps are dropped.  Like the dense shards,
// the table knows no files or options: the program decides its settings and
// stores its rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pstrain::ps {

enum class row_optimizer {
    adagrad,  // TensorFlow's Adagrad: a += g^2; w -= lr g / sqrt(a)
    adam,     // Adam with each row's own update count for its bias correction
    ftrl,     // FTRL-Proximal (McMahan et al. 2013), TensorFlow's Ftrl with learning_rate_power -0.5
};

// "adagrad", "adam", "ftrl"; throws pstrain::error naming the accepted ones.
row_optimizer parse_row_optimizer(const std::string& name);
std::string row_optimizer_name(row_optimizer o);

struct embedding_config {
    std::uint32_t dim = 16;  // floats per embedding
    row_optimizer optimizer = row_optimizer::adagrad;
    float learning_rate = 0.05f;
    float adagrad_initial = 0.1f;                         // Adagrad's and FTRL's initial accumulator
    float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // Adam
    float l1 = 0.0f, l2 = 0.0f, ftrl_beta = 0.0f;         // FTRL
    // New rows: uniform in [-init_range, init_range] from (seed, key).
    float init_range = 0.05f;
    std::uint64_t seed = 1;
    // A key gets a row at its admit_after-th occurrence in pulls (0 or 1:
    // at once); before that it reads as zeros and its pushes are ignored.
    std::uint32_t admit_after = 0;
    // evict() drops rows not pulled or pushed for more than this many
    // steps (0: never).
    std::uint64_t evict_after = 0;
    // At most this many rows (0: no limit): beyond it a new key reads as
    // zeros, and refused_rows() counts it.
    std::uint64_t max_rows = 0;
};

// One row, for storing and restoring a table.
struct embedding_row {
    std::uint64_t key = 0;
    std::span<const float> values;  // dim floats
    std::span<const float> state;   // the optimizer's, slots() * dim floats
    std::uint64_t last_seen = 0;    // the step of its last pull or push
    std::uint64_t count = 0;        // occurrences in pulls
    std::uint64_t updates = 0;      // pushes applied (Adam's bias correction)
};

// One PS's rows of one table.  Threads: not synchronised; its server uses
// it on the server's thread (the snapshot hook reads it there too).
class embedding_table {
public:
    explicit embedding_table(embedding_config config);
    ~embedding_table();
    embedding_table(embedding_table&&) noexcept;
    embedding_table& operator=(embedding_table&&) noexcept;

    const embedding_config& config() const;
    // Optimizer state floats per embedding float: adagrad 1, adam 2, ftrl 2.
    std::uint32_t slots() const;

    // The rows of `keys` (any order, repeats allowed) into out[i * dim ..],
    // making the rows of admitted keys on first sight; a key that is not
    // (yet) admitted, or refused by max_rows, reads as zeros.  `step`
    // marks them seen.  out.size() must be keys.size() * dim.
    void pull(std::span<const std::uint64_t> keys, std::span<float> out, std::uint64_t step);
    // The rows of `keys` that at least one update reached into
    // out[i * dim ..], zeros for the others (unseen keys, and rows a pull
    // made whose update has not come: a sync PS holds the updates of the
    // step being computed, so an evaluation between steps reads the same
    // whatever the other workers pulled meanwhile); makes, counts and marks
    // nothing (evaluation's reads).
    void lookup(std::span<const std::uint64_t> keys, std::span<float> out) const;
    // One update of each row in `keys` (unique keys: a worker sums the
    // gradients of a key's occurrences first) with grads[i * dim ..]; keys
    // without a row are skipped.  Returns the rows updated.
    std::size_t push(std::span<const std::uint64_t> keys, std::span<const float> grads, std::uint64_t step);
    // Drops the rows not seen after now - evict_after; returns how many.
    std::size_t evict(std::uint64_t now);

    std::size_t rows() const;
    std::uint64_t refused_rows() const;  // new keys refused by max_rows
    std::uint64_t evicted_rows() const;
    // Memory a row takes: its floats, its bookkeeping and its share of the
    // hash index at the index's present load.
    double bytes_per_row() const;

    // Every row, in no particular order (for a checkpoint).
    void for_each(const std::function<void(const embedding_row&)>& f) const;
    // Rows made, pulled or pushed since the last clear_changed(), for
    // incremental saves (a pull changes a row's count and last_seen).
    void for_each_changed(const std::function<void(const embedding_row&)>& f) const;
    // Keys whose rows evict() dropped since the last clear_changed() and
    // that have no row again (an incremental save's tombstones), sorted.
    std::vector<std::uint64_t> removed_keys() const;
    // Forgets the changed marks and the removed keys: the server calls it
    // once its snapshot hook has stored them.
    void clear_changed();
    // Drops the row of `key` if there is one (a restore applying a
    // tombstone); returns whether there was.  Counts as no eviction.
    bool erase(std::uint64_t key);
    // Puts a stored row back (a restore; with another PS count the program
    // sends each row to the PS its key hashes to).  Replaces a row of the
    // same key.  Throws pstrain::error when the sizes do not match dim.
    void restore(const embedding_row& row);

private:
    class impl;
    std::unique_ptr<impl> impl_;
};

// The PS of `key` among num_ps: a hash of the key, so that any key space
// (sequential ids, hashed strings) spreads evenly.
std::size_t shard_of_key(std::uint64_t key, std::size_t num_ps);

// A batch's keys without repeats, for one sparse pull and one push: the
// unique keys in order of first appearance, and for each key of the batch
// its place in `unique` (a worker sums a key's gradients there).
void deduplicate(std::span<const std::uint64_t> keys, std::vector<std::uint64_t>& unique,
                 std::vector<std::uint32_t>& place);

}  // namespace pstrain::ps
