#include "library/ps/shard.hpp"

#include "pstrain/error.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pstrain::ps {

std::vector<shard_range> make_partition(std::uint64_t n, int num_shards)
{
    if (num_shards < 1) throw error("a partition needs at least one shard");
    std::vector<shard_range> parts;
    const auto p = static_cast<unsigned __int128>(num_shards);
    // 128-bit products: n * s does not overflow for any 64-bit n.
    for (unsigned s = 0; s < static_cast<unsigned>(num_shards); ++s)
        parts.push_back({static_cast<std::uint64_t>(n * static_cast<unsigned __int128>(s) / p),
                         static_cast<std::uint64_t>(n * static_cast<unsigned __int128>(s + 1) / p)});
    return parts;
}

parameter_shard::parameter_shard(shard_range range, optimizer_config cfg)
    : range_(range), cfg_(cfg), values_(range.size(), page_offset_of(range.begin)),
      state_(range.size() * static_cast<std::size_t>(state_slots(cfg.kind)))
{
    initialize_state(cfg_, state_);
}

void parameter_shard::assign(std::span<const float> values)
{
    if (values.size() != values_.size())
        throw error(fmt::format("shard of {} values given {}", values_.size(), values.size()));
    std::copy(values.begin(), values.end(), values_.begin());
}

void parameter_shard::restore(std::span<const float> values, std::span<const float> state, std::uint64_t updates)
{
    assign(values);
    if (state.size() != state_.size())
        throw error(fmt::format("shard optimizer state of {} values given {}", state_.size(), state.size()));
    std::copy(state.begin(), state.end(), state_.begin());
    updates_ = updates;
}

void parameter_shard::set_moving_averages(const std::vector<shard_range>& ranges)
{
    moving_.clear();
    std::uint64_t last = 0;
    for (const auto& r : ranges) {
        if (r.end < r.begin || r.begin < last)
            throw error(
                fmt::format("moving-average range [{}, {}) is out of order or overlaps the one before: give ranges in "
                            "order, each ending before the next begins",
                            r.begin, r.end));
        last = r.end;
        const auto b = std::max(r.begin, range_.begin), e = std::min(r.end, range_.end);
        if (b < e) moving_.push_back({b - range_.begin, e - range_.begin});
    }
}

void parameter_shard::update_part(std::span<const float> in, std::span<float> out, std::span<const float> grads,
                                  std::size_t at, std::uint64_t update)
{
    if (moving_.empty()) {
        apply_update_to(cfg_, in, out, grads, state_at(at), values_.size(), update);
        return;
    }
    const std::size_t end = at + grads.size();
    std::size_t pos = at;
    auto optimize = [&](std::size_t to) {
        if (to <= pos) return;
        const std::size_t off = pos - at, len = to - pos;
        apply_update_to(cfg_, in.subspan(off, len), out.subspan(off, len), grads.subspan(off, len), state_at(pos),
                        values_.size(), update);
        pos = to;
    };
    for (const auto& m : moving_) {
        if (m.end <= pos) continue;
        if (m.begin >= end) break;
        optimize(std::max<std::size_t>(m.begin, pos));
        const std::size_t to = std::min<std::size_t>(m.end, end);
        for (; pos < to; ++pos) out[pos - at] = in[pos - at] + grads[pos - at];
    }
    optimize(end);
}

void parameter_shard::apply(std::span<const float> grads, shard_range part, std::uint64_t update)
{
    const std::size_t at = part.begin - range_.begin;
    auto values = std::span(values_).subspan(at, part.size());
    update_part(values, values, grads, at, update > 0 ? update : begin_update());
}

void parameter_shard::apply_block(std::span<const float> grads, std::size_t at, std::uint64_t update)
{
    auto values = std::span(values_).subspan(at, grads.size());
    update_part(values, values, grads, at, update);
}

void parameter_shard::apply_into(float_buffer& back, std::span<const float> grads, shard_range part,
                                 std::uint64_t update)
{
    if (back.size() != values_.size() || back.page_offset() != values_.page_offset())
        back = float_buffer(values_.size(), values_.page_offset());
    const std::size_t at = part.begin - range_.begin;
    // Outside `part` the new values are the old ones.
    if (part.size() != values_.size()) std::copy(values_.begin(), values_.end(), back.begin());
    update_part(std::span(values_).subspan(at, part.size()), std::span(back).subspan(at, part.size()), grads, at,
                update > 0 ? update : begin_update());
    values_.swap(back);
}

}  // namespace pstrain::ps
