// Which examples each worker trains on: a strided shard of the training set
// per worker, reshuffled every epoch from the seed (without replacement), or
// drawn uniformly from the shard (with replacement).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace pstrain::data {

class sampler {
public:
    sampler(std::size_t rows, int num_shards, int shard, std::uint64_t seed, bool with_replacement);

    // Fills `out` with the next batch's row indices.
    void next_batch(std::size_t batch_size, std::vector<std::uint32_t>& out);
    // The rows next_batch will draw, into `out`, when they are known
    // without drawing: within this epoch's order, without replacement.
    // False otherwise (the batch crosses into the next epoch, or rows are
    // drawn at random); `out` is then unchanged.
    bool peek_batch(std::size_t batch_size, std::vector<std::uint32_t>& out) const;

    std::size_t shard_size() const { return shard_.size(); }
    std::uint64_t epoch() const { return epoch_; }
    // Draws and drops n batches: the order after them is the one a run that
    // drew them would see next.
    void skip_batches(std::uint64_t n, std::size_t batch_size);
    // The workers changed (an elastic job lost or took back one): from the
    // next batch on this worker draws from shard `shard` of `num_shards`, in
    // an order no earlier split drew (each re-split is mixed into the
    // seed), its epochs counted on.  When every worker does so, their
    // shards again cover the training set once each.
    void reshard(int num_shards, int shard);

private:
    // Shard `shard` of `num_shards` of the rows (throws when it is empty).
    void cut(int num_shards, int shard);
    void shuffle_epoch();

    std::vector<std::uint32_t> shard_;
    std::vector<std::uint32_t> order_;
    std::size_t rows_;
    std::uint64_t seed_;
    int num_shards_ = 0, shard_index_ = 0;
    std::uint64_t resplits_ = 0;  // reshard() calls after the first split
    bool with_replacement_;
    std::uint64_t epoch_ = 0;
    std::size_t position_ = 0;
    std::mt19937_64 rng_;
};

}  // namespace pstrain::data
