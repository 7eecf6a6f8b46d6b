#include "library/ps/served_shard.hpp"

#include "common/log.hpp"

#include <algorithm>

namespace pstrain::ps {

served_shard::served_shard(shard_range range, optimizer_config cfg, int update_threads)
    : shard_(range, cfg), sum_(range.size())
{
    if (update_threads > 1 && range.size() >= threaded_update_elements) {
        pool_.emplace(update_threads);
        log::info("{} threads share the updates of this PS's {} parameters", update_threads, range.size());
    }
}

void served_shard::apply(std::span<const float> grads, shard_range part,
                         const std::function<bool(const float*, shard_range)>& read_by_a_reply, std::uint64_t update)
{
    if (read_by_a_reply(shard_.values().data(), part))
        shard_.apply_into(free_back_buffer(read_by_a_reply), grads, part, update);
    else if (pool_ && part.size() >= threaded_update_elements)
        apply_in_blocks(grads, part.begin - range().begin, update > 0 ? update : shard_.begin_update());
    else shard_.apply(grads, part, update);
}

// A buffer no reply reads any of: it becomes the values whole.
float_buffer& served_shard::free_back_buffer(const std::function<bool(const float*, shard_range)>& read_by_a_reply)
{
    for (auto& b : back_buffers_)
        if (b.empty() || !read_by_a_reply(b.data(), range())) return b;
    return back_buffers_.emplace_back();
}

// One gradient onto elements [at, at + grads.size()) of the shard, in place, on the update threads.
void served_shard::apply_in_blocks(std::span<const float> grads, std::size_t at, std::uint64_t update)
{
    const std::size_t blocks = (grads.size() + update_block - 1) / update_block;
    pool_->run(blocks, [&](std::size_t b) {
        const std::size_t from = b * update_block;
        shard_.apply_block(grads.subspan(from, std::min(update_block, grads.size() - from)), at + from, update);
    });
}

// Each block's sum (in the order of `grads`, so a run is the same whatever
// the arrival order), update and copies done while the block is in cache;
// a large shard's blocks spread over the update threads.
void served_shard::apply_mean(shard_range part, std::span<const float* const> grads, float scale,
                              std::span<float* const> copies, std::uint64_t update)
{
    const std::size_t first = part.begin - range().begin, n = part.size();
    const float* values = shard_.values().data();
    const auto one_block = [&](std::size_t b) {
        const std::size_t from = b * update_block, len = std::min(update_block, n - from), at = first + from;
        float* sum = sum_.data() + at;
        std::fill(sum, sum + len, 0.0f);
        for (const float* g : grads)
            for (std::size_t e = 0; e < len; ++e) sum[e] += g[from + e];
        for (std::size_t e = 0; e < len; ++e) sum[e] *= scale;
        shard_.apply_block({sum, len}, at, update);
        for (float* copy : copies) std::copy(values + at, values + at + len, copy + at);
    };
    const std::size_t blocks = (n + update_block - 1) / update_block;
    if (pool_ && n >= threaded_update_elements) pool_->run(blocks, one_block);
    else
        for (std::size_t b = 0; b < blocks; ++b) one_block(b);
}

}  // namespace pstrain::ps
