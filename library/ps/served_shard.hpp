// The shard as a server holds it: the parameter_shard (values and
// optimizer state) and what its updates need besides, and the one place
// that decides how an update is applied.  A push's gradient is applied in
// place; in blocks over the update threads when the shard is large; or,
// while a reply in flight still reads the values, into a back buffer
// that then becomes the values (the old ones stay where the reply reads
// them, without a copy).  A sync step's mean of a bucket's gradients (of
// the whole shard, or of a range of it) is summed, applied and copied into
// the workers' mapped buffers block by block, each block while it is in
// cache.
//
// Used by the server's thread only (the update threads work inside its calls).
#pragma once

#include "pstrain/optimizer.hpp"
#include "pstrain/partition.hpp"
#include "library/ps/aligned_buffer.hpp"
#include "library/ps/shard.hpp"
#include "library/ps/update_pool.hpp"

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace pstrain::ps {

class served_shard {
public:
    // A shard this large spreads its updates over the update threads.
    static constexpr std::size_t threaded_update_elements = std::size_t(1) << 18;
    // Elements a block of an update takes (16 KB: it stays in the L1 cache
    // between its sum, its update and its copies).
    static constexpr std::size_t update_block = 4096;

    // Allocates the values, the optimizer state and the sum of a step
    // (throws std::bad_alloc when they do not fit); `update_threads` > 1
    // starts the update threads of a large shard.
    served_shard(shard_range range, optimizer_config cfg, int update_threads);

    parameter_shard& shard() { return shard_; }
    const parameter_shard& shard() const { return shard_; }
    const shard_range& range() const { return shard_.range(); }
    // The values of `part` (inside the shard).
    std::span<const float> values(shard_range part) const
    {
        return shard_.values().subspan(part.begin - range().begin, part.size());
    }

    // One gradient of `part` as optimizer update `update` (0: a new one;
    // an async overlapped step's buckets share one); `read_by_a_reply(values,
    // part)` says whether a reply in flight still reads `part` of a values
    // buffer (a reply of another part leaves this one free to change in place).
    void apply(std::span<const float> grads, shard_range part,
               const std::function<bool(const float*, shard_range)>& read_by_a_reply, std::uint64_t update = 0);
    // Sync: the mean of gradients of `part` (`grads`, each pointing at the
    // part's first element, summed in this order) applied as optimizer
    // update `update` (parameter_shard::begin_update: the same for every
    // bucket of a step), its new values also copied to each of `copies`
    // (buffers of the whole shard).
    void apply_mean(shard_range part, std::span<const float* const> grads, float scale, std::span<float* const> copies,
                    std::uint64_t update);

private:
    // A back buffer that no reply in flight reads.  At most one more
    // buffer than workers.
    float_buffer& free_back_buffer(const std::function<bool(const float*, shard_range)>& read_by_a_reply);
    void apply_in_blocks(std::span<const float> grads, std::size_t at, std::uint64_t update);

    parameter_shard shard_;
    std::vector<float> sum_;  // sync: a step's sum
    std::optional<update_pool> pool_;
    std::vector<float_buffer> back_buffers_;  // async: buffers for the next values
};

}  // namespace pstrain::ps
