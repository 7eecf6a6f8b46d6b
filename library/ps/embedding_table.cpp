#include "pstrain/embedding.hpp"

#include "common/random.hpp"
#include "pstrain/error.hpp"
#include "library/ps/update_rules.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>
#include <fmt/format.h>

namespace pstrain::ps {
namespace {

// 64 well-mixed bits of x: splitmix64's first output from seed x.
std::uint64_t mix(std::uint64_t x) { return random::splitmix64(x)(); }

// FTRL-Proximal on one coordinate: z and n are its state.
inline void ftrl_update(float& w, float& z, float& n, float g, float lr, float l1, float l2, float beta)
{
    const float n_new = n + g * g;
    const float sigma = (std::sqrt(n_new) - std::sqrt(n)) / lr;
    z += g - sigma * w;
    n = n_new;
    const float quadratic = (beta + std::sqrt(n)) / lr + 2.0f * l2;
    w = std::fabs(z) <= l1 ? 0.0f : (std::copysign(l1, z) - z) / quadratic;
}

// A row's bookkeeping, in front of its floats: a pull touches one place.
struct row_meta {
    std::uint64_t key = 0;
    std::uint64_t last_seen = 0;
    std::uint64_t count = 0;
    std::uint32_t updates = 0;
    std::uint8_t in_use = 0;
    std::uint8_t changed = 0;
};
static_assert(sizeof(row_meta) == 32);

struct pending_key {
    std::uint32_t count = 0;
    std::uint64_t last_seen = 0;
};

}  // namespace

row_optimizer parse_row_optimizer(const std::string& name)
{
    if (name == "adagrad") return row_optimizer::adagrad;
    if (name == "adam") return row_optimizer::adam;
    if (name == "ftrl") return row_optimizer::ftrl;
    throw error(fmt::format("embedding optimizer {} is not one of adagrad, adam, ftrl", name));
}

std::string row_optimizer_name(row_optimizer o)
{
    switch (o) {
    case row_optimizer::adagrad: return "adagrad";
    case row_optimizer::adam: return "adam";
    case row_optimizer::ftrl: return "ftrl";
    }
    return "?";
}

std::size_t shard_of_key(std::uint64_t key, std::size_t num_ps)
{
    if (num_ps == 0) throw error("shard_of_key: no PS tasks");
    return static_cast<std::size_t>(mix(key) % num_ps);
}

void deduplicate(std::span<const std::uint64_t> keys, std::vector<std::uint64_t>& unique,
                 std::vector<std::uint32_t>& place)
{
    unique.clear();
    place.resize(keys.size());
    absl::flat_hash_map<std::uint64_t, std::uint32_t> seen;
    seen.reserve(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
        auto [it, fresh] = seen.try_emplace(keys[i], static_cast<std::uint32_t>(unique.size()));
        if (fresh) unique.push_back(keys[i]);
        place[i] = it->second;
    }
}

class embedding_table::impl {
public:
    explicit impl(embedding_config c) : cfg_(c)
    {
        if (cfg_.dim == 0) throw error("an embedding table needs dim >= 1");
        if (!(cfg_.learning_rate > 0))
            throw error(fmt::format("embedding learning rate {} must be > 0", cfg_.learning_rate));
        slots_ = cfg_.optimizer == row_optimizer::adagrad ? 1 : 2;
        stride_ = sizeof(row_meta) + static_cast<std::size_t>(cfg_.dim) * (1 + slots_) * sizeof(float);
        stride_ = (stride_ + 15) / 16 * 16;
    }

    void pull(std::span<const std::uint64_t> keys, std::span<float> out, std::uint64_t step)
    {
        const std::size_t dim = cfg_.dim;
        if (out.size() != keys.size() * dim)
            throw error(fmt::format("pull of {} keys of dim {} into {} floats", keys.size(), dim, out.size()));
        // In groups: the index probes of a group in flight together, then
        // its rows, then the copies (a table far larger than the caches is
        // bound by the latency of these misses, not by bandwidth).
        std::uint32_t found[group];
        for (std::size_t at = 0; at < keys.size(); at += group) {
            const std::size_t n = std::min(group, keys.size() - at);
            for (std::size_t i = 0; i < n; ++i) index_.prefetch(keys[at + i]);
            for (std::size_t i = 0; i < n; ++i) {
                found[i] = find_or_make(keys[at + i], step);
                if (found[i] != none) __builtin_prefetch(row(found[i]));
            }
            for (std::size_t i = 0; i < n; ++i) {
                float* to = out.data() + (at + i) * dim;
                if (found[i] == none) {
                    std::fill(to, to + dim, 0.0f);
                    continue;
                }
                auto& m = meta(found[i]);
                ++m.count;
                m.last_seen = std::max(m.last_seen, step);
                m.changed = 1;
                const float* w = row(found[i]);
                std::copy(w, w + dim, to);
            }
        }
    }

    void lookup(std::span<const std::uint64_t> keys, std::span<float> out) const
    {
        const std::size_t dim = cfg_.dim;
        if (out.size() != keys.size() * dim)
            throw error(fmt::format("lookup of {} keys of dim {} into {} floats", keys.size(), dim, out.size()));
        std::uint32_t found[group];
        for (std::size_t at = 0; at < keys.size(); at += group) {
            const std::size_t n = std::min(group, keys.size() - at);
            for (std::size_t i = 0; i < n; ++i) index_.prefetch(keys[at + i]);
            for (std::size_t i = 0; i < n; ++i) {
                const auto it = index_.find(keys[at + i]);
                found[i] = it == index_.end() ? none : it->second;
                if (found[i] != none) __builtin_prefetch(row(found[i]));
            }
            for (std::size_t i = 0; i < n; ++i) {
                float* to = out.data() + (at + i) * dim;
                if (found[i] == none || meta(found[i]).updates == 0) {
                    std::fill(to, to + dim, 0.0f);
                    continue;
                }
                const float* w = row(found[i]);
                std::copy(w, w + dim, to);
            }
        }
    }

    std::size_t push(std::span<const std::uint64_t> keys, std::span<const float> grads, std::uint64_t step)
    {
        const std::size_t dim = cfg_.dim;
        if (grads.size() != keys.size() * dim)
            throw error(fmt::format("push of {} keys of dim {} with {} floats", keys.size(), dim, grads.size()));
        std::size_t updated = 0;
        std::uint32_t found[group];
        for (std::size_t at = 0; at < keys.size(); at += group) {
            const std::size_t n = std::min(group, keys.size() - at);
            for (std::size_t i = 0; i < n; ++i) index_.prefetch(keys[at + i]);
            for (std::size_t i = 0; i < n; ++i) {
                const auto it = index_.find(keys[at + i]);
                found[i] = it == index_.end() ? none : it->second;
                if (found[i] != none) __builtin_prefetch(row(found[i]), 1);
            }
            for (std::size_t i = 0; i < n; ++i) {
                if (found[i] == none) continue;
                auto& m = meta(found[i]);
                m.last_seen = std::max(m.last_seen, step);
                m.changed = 1;
                ++m.updates;
                update(row(found[i]), grads.data() + (at + i) * dim, m.updates);
                ++updated;
            }
        }
        return updated;
    }

    std::size_t evict(std::uint64_t now)
    {
        if (cfg_.evict_after == 0 || now <= cfg_.evict_after) return 0;
        const std::uint64_t oldest = now - cfg_.evict_after;
        std::size_t dropped = 0;
        for (std::uint32_t r = 0; r < capacity_; ++r) {
            auto& m = meta(r);
            if (!m.in_use || m.last_seen >= oldest) continue;
            index_.erase(m.key);
            removed_.insert(m.key);
            m = row_meta{};
            free_.push_back(r);
            ++dropped;
        }
        absl::erase_if(pending_, [&](const auto& kv) { return kv.second.last_seen < oldest; });
        evicted_ += dropped;
        return dropped;
    }

    void for_each(const std::function<void(const embedding_row&)>& f, bool changed_only) const
    {
        for (std::uint32_t r = 0; r < capacity_; ++r) {
            const auto& m = meta(r);
            if (!m.in_use || (changed_only && !m.changed)) continue;
            const float* w = row(r);
            embedding_row e;
            e.key = m.key;
            e.values = {w, cfg_.dim};
            e.state = {w + cfg_.dim, static_cast<std::size_t>(cfg_.dim) * slots_};
            e.last_seen = m.last_seen;
            e.count = m.count;
            e.updates = m.updates;
            f(e);
        }
    }

    void clear_changed()
    {
        for (std::uint32_t r = 0; r < capacity_; ++r) meta(r).changed = 0;
        removed_.clear();
    }

    std::vector<std::uint64_t> removed_keys() const
    {
        std::vector<std::uint64_t> keys(removed_.begin(), removed_.end());
        std::sort(keys.begin(), keys.end());
        return keys;
    }

    bool erase(std::uint64_t key)
    {
        const auto it = index_.find(key);
        if (it == index_.end()) return false;
        const std::uint32_t r = it->second;
        index_.erase(it);
        meta(r) = row_meta{};
        free_.push_back(r);
        return true;
    }

    void restore(const embedding_row& e)
    {
        if (e.values.size() != cfg_.dim || e.state.size() != static_cast<std::size_t>(cfg_.dim) * slots_)
            throw error(
                fmt::format("a stored row of key {} has {} values and {} state floats where this table has dim {} and "
                            "{} ({} slots): was it saved with another --embedding-dim or optimizer?",
                            e.key, e.values.size(), e.state.size(), cfg_.dim, cfg_.dim * slots_, slots_));
        auto it = index_.find(e.key);
        const std::uint32_t r = it != index_.end() ? it->second : allocate(e.key);
        float* w = row(r);
        std::copy(e.values.begin(), e.values.end(), w);
        std::copy(e.state.begin(), e.state.end(), w + cfg_.dim);
        auto& m = meta(r);
        m.last_seen = e.last_seen;
        m.count = e.count;
        m.updates = static_cast<std::uint32_t>(std::min<std::uint64_t>(e.updates, UINT32_MAX));
        m.changed = 0;
    }

    double bytes_per_row() const
    {
        const double rows = static_cast<double>(std::max<std::size_t>(index_.size(), 1));
        const double index_bytes =
            static_cast<double>(index_.capacity()) * (sizeof(std::pair<const std::uint64_t, std::uint32_t>) + 1);
        return static_cast<double>(stride_) + index_bytes / rows;
    }

    const embedding_config cfg_;
    std::uint32_t slots_ = 1;
    std::size_t stride_ = 0;
    absl::flat_hash_map<std::uint64_t, std::uint32_t> index_;
    absl::flat_hash_map<std::uint64_t, pending_key> pending_;
    // Row r: its row_meta, then dim floats of embedding and slots_ * dim of
    // optimizer state, at bytes_ + r * stride_ (16-byte aligned).
    std::vector<std::byte> bytes_;
    std::uint32_t capacity_ = 0;  // rows made so far, in use or free
    std::vector<std::uint32_t> free_;
    // Keys evict() dropped since clear_changed() that have no row again.
    absl::flat_hash_set<std::uint64_t> removed_;
    std::uint64_t refused_ = 0, evicted_ = 0;

private:
    static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
    static constexpr std::size_t group = 16;

    std::byte* at(std::uint32_t r) { return bytes_.data() + static_cast<std::size_t>(r) * stride_; }
    const std::byte* at(std::uint32_t r) const { return bytes_.data() + static_cast<std::size_t>(r) * stride_; }
    row_meta& meta(std::uint32_t r) { return *reinterpret_cast<row_meta*>(at(r)); }
    const row_meta& meta(std::uint32_t r) const { return *reinterpret_cast<const row_meta*>(at(r)); }
    float* row(std::uint32_t r) { return reinterpret_cast<float*>(at(r) + sizeof(row_meta)); }
    const float* row(std::uint32_t r) const { return reinterpret_cast<const float*>(at(r) + sizeof(row_meta)); }

    // The row of key (its count and last_seen are the caller's to update), or none.
    std::uint32_t find_or_make(std::uint64_t key, std::uint64_t step)
    {
        if (const auto it = index_.find(key); it != index_.end()) return it->second;
        std::uint64_t count = 1;
        if (cfg_.admit_after > 1) {
            auto& p = pending_[key];
            p.last_seen = std::max(p.last_seen, step);
            if (++p.count < cfg_.admit_after) return none;
            count = p.count;
        }
        if (cfg_.max_rows > 0 && index_.size() >= cfg_.max_rows) {
            ++refused_;
            return none;
        }
        if (cfg_.admit_after > 1) pending_.erase(key);
        const std::uint32_t r = allocate(key);
        initialise(r, key);
        auto& m = meta(r);
        m.count = count - 1;  // the caller counts this occurrence
        m.last_seen = step;
        m.changed = 1;
        return r;
    }

    std::uint32_t allocate(std::uint64_t key)
    {
        std::uint32_t r;
        if (!free_.empty()) {
            r = free_.back();
            free_.pop_back();
        } else {
            if (capacity_ == none - 1) throw error("an embedding table shard cannot hold more than 2^32 - 2 rows");
            r = capacity_++;
            if (bytes_.size() < static_cast<std::size_t>(capacity_) * stride_)
                bytes_.resize(
                    std::max<std::size_t>(bytes_.size() * 3 / 2, static_cast<std::size_t>(capacity_) * stride_));
        }
        index_.emplace(key, r);
        removed_.erase(key);
        auto& m = meta(r);
        m = row_meta{};
        m.key = key;
        m.in_use = 1;
        return r;
    }

    // Uniform in [-init_range, init_range] from (seed, key, i) alone.
    void initialise(std::uint32_t r, std::uint64_t key)
    {
        float* w = row(r);
        const std::uint64_t base = mix(cfg_.seed ^ mix(key));
        for (std::uint32_t i = 0; i < cfg_.dim; ++i) {
            const double u = static_cast<double>(mix(base + i) >> 11) * 0x1.0p-53;  // [0, 1)
            w[i] = static_cast<float>((2 * u - 1) * cfg_.init_range);
        }
        const float initial = cfg_.optimizer == row_optimizer::adam ? 0.0f : cfg_.adagrad_initial;
        float* state = w + cfg_.dim;
        std::fill(state, state + cfg_.dim, initial);                               // Adagrad's a, Adam's m, FTRL's n
        if (slots_ == 2) std::fill(state + cfg_.dim, state + 2 * cfg_.dim, 0.0f);  // Adam's v, FTRL's z
    }

    void update(float* w, const float* g, std::uint64_t t)
    {
        const std::size_t dim = cfg_.dim;
        float* s0 = w + dim;
        float* s1 = w + 2 * dim;
        const float lr = cfg_.learning_rate;
        switch (cfg_.optimizer) {
        case row_optimizer::adagrad:
            for (std::size_t i = 0; i < dim; ++i) adagrad_update(w[i], s0[i], g[i], lr);
            break;
        case row_optimizer::adam: {
            const double td = static_cast<double>(t);
            const float lr_t =
                static_cast<float>(lr * std::sqrt(1.0 - std::pow(cfg_.beta2, td)) / (1.0 - std::pow(cfg_.beta1, td)));
            for (std::size_t i = 0; i < dim; ++i)
                adam_update(w[i], s0[i], s1[i], g[i], lr_t, cfg_.beta1, cfg_.beta2, cfg_.epsilon);
            break;
        }
        case row_optimizer::ftrl:
            for (std::size_t i = 0; i < dim; ++i)
                ftrl_update(w[i], s1[i], s0[i], g[i], lr, cfg_.l1, cfg_.l2, cfg_.ftrl_beta);
            break;
        }
    }
};

embedding_table::embedding_table(embedding_config config) : impl_(std::make_unique<impl>(config)) {}
embedding_table::~embedding_table() = default;
embedding_table::embedding_table(embedding_table&&) noexcept = default;
embedding_table& embedding_table::operator=(embedding_table&&) noexcept = default;

const embedding_config& embedding_table::config() const { return impl_->cfg_; }
std::uint32_t embedding_table::slots() const { return impl_->slots_; }
void embedding_table::pull(std::span<const std::uint64_t> keys, std::span<float> out, std::uint64_t step)
{
    impl_->pull(keys, out, step);
}
void embedding_table::lookup(std::span<const std::uint64_t> keys, std::span<float> out) const
{
    impl_->lookup(keys, out);
}
std::size_t embedding_table::push(std::span<const std::uint64_t> keys, std::span<const float> grads, std::uint64_t step)
{
    return impl_->push(keys, grads, step);
}
std::size_t embedding_table::evict(std::uint64_t now) { return impl_->evict(now); }
std::size_t embedding_table::rows() const { return impl_->index_.size(); }
std::uint64_t embedding_table::refused_rows() const { return impl_->refused_; }
std::uint64_t embedding_table::evicted_rows() const { return impl_->evicted_; }
double embedding_table::bytes_per_row() const { return impl_->bytes_per_row(); }
void embedding_table::for_each(const std::function<void(const embedding_row&)>& f) const { impl_->for_each(f, false); }
void embedding_table::for_each_changed(const std::function<void(const embedding_row&)>& f) const
{
    impl_->for_each(f, true);
}
void embedding_table::clear_changed() { impl_->clear_changed(); }
std::vector<std::uint64_t> embedding_table::removed_keys() const { return impl_->removed_keys(); }
bool embedding_table::erase(std::uint64_t key) { return impl_->erase(key); }
void embedding_table::restore(const embedding_row& row) { impl_->restore(row); }

}  // namespace pstrain::ps
