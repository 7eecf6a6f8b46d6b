#include "library/ps/sparse_service.hpp"

#include "common/log.hpp"

#include <algorithm>

namespace pstrain::ps {

sparse_service::sparse_service(const std::vector<embedding_config>& tables, const server_hooks& hooks,
                               worker_links& links, const training_state& state, server_clock& profile)
    : hooks_(hooks), links_(links), state_(state), profile_(profile), held_(links.size()), keys_(links.size())
{
    set_tables(tables);
}

void sparse_service::set_tables(const std::vector<embedding_config>& tables)
{
    tables_.clear();
    dims_.clear();
    for (const auto& t : tables) {
        tables_.emplace_back(t);
        dims_.push_back(t.dim);
    }
}

std::size_t sparse_service::slot_floats() const
{
    if (dims_.empty()) return 0;
    const std::uint64_t max_dim = *std::max_element(dims_.begin(), dims_.end());
    return static_cast<std::size_t>(wire::max_sparse_keys * (2 + max_dim));
}

std::uint64_t sparse_service::held_rows::keys() const
{
    std::uint64_t n = 0;
    for (std::size_t h = 0; h < count; ++h) n += rows[h].keys.size();
    return n;
}

// The keys of worker i's sparse request, out of its receive slot.
std::span<const std::uint64_t> sparse_service::keys_of(std::size_t i, std::uint64_t count)
{
    wire::decode_sparse_keys(links_[i].slot.data(), count, keys_[i]);
    return keys_[i];
}

void sparse_service::on_pull(std::size_t i, const wire::sparse_pull& m)
{
    server_clock::scope timed(profile_, sparse);
    auto& p = links_[i];
    links_.wait_for_payload_send(i);  // rows_out may still be read by the previous reply
    const auto keys = keys_of(i, m.count);
    auto& table = tables_[m.table];
    p.rows_out.resize(m.count * table.config().dim);
    // After training, and for evaluation, reads make no rows.
    if (state_.done || (m.flags & wire::sparse_lookup)) {
        table.lookup(keys, p.rows_out);
    } else {
        const auto refused = table.refused_rows();
        table.pull(keys, p.rows_out, state_.step);
        if (refused == 0 && table.refused_rows() > 0) warn_table_full(m.table);
    }
    keys_pulled_.fetch_add(m.count, std::memory_order_relaxed);
    reply(i, m.table, m.count);
}

// Once per table: memory is capped, new keys read as zeros from now on.
void sparse_service::warn_table_full(std::uint32_t t)
{
    const auto rows = tables_[t].config().max_rows;
    if (hooks_.table_full) return hooks_.table_full(t, rows);
    log::warn(
        "embedding table {} is full on this PS ({} rows, its max_rows): new keys read as zeros and are not learned", t,
        rows);
}

void sparse_service::on_push(std::size_t i, const wire::sparse_push& m)
{
    server_clock::scope timed(profile_, sparse);
    links_.wait_for_payload_send(i);
    const auto keys = keys_of(i, m.count);
    auto& table = tables_[m.table];
    float* grads = wire::sparse_push_grads(links_[i].slot.data(), m.count);
    wire::widen(grads, m.count * table.config().dim, links_.precision());  // FP32 from here on
    const std::span<const float> row_grads{grads, m.count * table.config().dim};
    if (!state_.done && hold_for_steps_) {
        auto& held = held_[i];
        const std::uint64_t keys_held = m.count + held.keys();
        if (keys_held > max_held_keys) {
            links_.refuse(i, wire::refusal_of(wire::refusal_code::rows_without_step, keys_held, max_held_keys));
            return;
        }
        if (held.count == held.rows.size()) held.rows.emplace_back();
        auto& h = held.rows[held.count++];
        h.table = m.table;
        h.keys.assign(keys.begin(), keys.end());
        h.grads.assign(row_grads.begin(), row_grads.end());
    } else if (!state_.done) {
        table.push(keys, row_grads, state_.step);
    }
    keys_pushed_.fetch_add(m.count, std::memory_order_relaxed);
    links_[i].rows_out.clear();
    reply(i, m.table, 0);
}

void sparse_service::reply(std::size_t i, std::uint32_t table, std::uint64_t count)
{
    links_.reply_rows(i, table, count, state_.step, state_.status(wire::values_status::ok));
}

// Nothing, not even a clock read, for a model without tables.
void sparse_service::apply_held(std::span<const std::size_t> workers)
{
    if (tables_.empty()) return;
    server_clock::scope timed(profile_, sparse);
    for (const auto w : workers) {
        auto& held = held_[w];
        for (std::size_t h = 0; h < held.count; ++h)
            tables_[held.rows[h].table].push(held.rows[h].keys, held.rows[h].grads, state_.step);
        held.count = 0;
    }
}

void sparse_service::step_done(std::uint64_t step)
{
    for (auto& t : tables_) {
        const auto after = t.config().evict_after;
        if (after > 0 && step % std::max<std::uint64_t>(after / 10, 1) == 0) t.evict(step);
    }
}

}  // namespace pstrain::ps
