#include "trainer/data/sampler.hpp"

#include "pstrain/error.hpp"

#include <fmt/format.h>

namespace pstrain::data {

namespace {
// splitmix64: decorrelates (seed, shard, epoch) into a generator seed.
std::uint64_t mix(std::uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// Fisher-Yates with our own bounded draw, so the order is the same with
// every standard library.
void shuffle(std::vector<std::uint32_t>& v, std::mt19937_64& rng)
{
    for (std::size_t i = v.size(); i > 1; --i) {
        std::size_t j = static_cast<std::size_t>(rng() % i);
        std::swap(v[i - 1], v[j]);
    }
}
}  // namespace

sampler::sampler(std::size_t rows, int num_shards, int shard, std::uint64_t seed, bool with_replacement)
    : rows_(rows), seed_(seed), with_replacement_(with_replacement)
{
    cut(num_shards, shard);
    shuffle_epoch();
}

void sampler::reshard(int num_shards, int shard)
{
    cut(num_shards, shard);
    position_ = 0;
    ++resplits_;
    shuffle_epoch();
}

void sampler::cut(int num_shards, int shard)
{
    if (num_shards < 1 || shard < 0 || shard >= num_shards)
        throw error(fmt::format("bad shard {} of {}", shard, num_shards));
    std::vector<std::uint32_t> rows;
    for (std::size_t i = static_cast<std::size_t>(shard); i < rows_; i += static_cast<std::size_t>(num_shards))
        rows.push_back(static_cast<std::uint32_t>(i));
    if (rows.empty())
        throw error(
            fmt::format("worker {} has no training examples: {} examples for {} workers", shard, rows_, num_shards));
    shard_ = std::move(rows);
    num_shards_ = num_shards;
    shard_index_ = shard;
}

void sampler::shuffle_epoch()
{
    std::uint64_t x = seed_ ^ mix(static_cast<std::uint64_t>(shard_index_) + 1) ^ mix(epoch_ + 0x1000);
    // Until a re-split, the orders a resumed data position replays; after
    // one, orders that no earlier split drew (not the head of one again).
    if (resplits_ > 0) x ^= mix(resplits_ + 0x2000);
    rng_.seed(mix(x));
    order_ = shard_;
    if (!with_replacement_) shuffle(order_, rng_);
}

void sampler::skip_batches(std::uint64_t n, std::size_t batch_size)
{
    std::vector<std::uint32_t> rows;
    for (std::uint64_t b = 0; b < n; ++b) next_batch(batch_size, rows);
}

void sampler::next_batch(std::size_t batch_size, std::vector<std::uint32_t>& out)
{
    out.resize(batch_size);
    for (std::size_t i = 0; i < batch_size; ++i) {
        if (with_replacement_) {
            out[i] = shard_[static_cast<std::size_t>(rng_() % shard_.size())];
            continue;
        }
        if (position_ == order_.size()) {
            ++epoch_;
            position_ = 0;
            shuffle_epoch();
        }
        out[i] = order_[position_++];
    }
}

bool sampler::peek_batch(std::size_t batch_size, std::vector<std::uint32_t>& out) const
{
    if (with_replacement_ || batch_size > order_.size() - position_) return false;
    const auto from = order_.begin() + static_cast<std::ptrdiff_t>(position_);
    out.assign(from, from + static_cast<std::ptrdiff_t>(batch_size));
    return true;
}

}  // namespace pstrain::data
