// A server's embedding tables and the sparse requests it serves: pulls and
// lookups of rows, and row updates.  Async (and on a PS without dense
// values, which has no steps) a row update applies on arrival.  Sync, it
// is held until the step that its worker's next dense gradient joins, and
// applies with that step, in worker order, before the dense update; it is
// dropped with a stale gradient.  So a step's snapshot holds exactly the
// row updates of the batches its data positions count, and a worker's
// pulls for a step read the rows of the step before, like its dense values.
//
// Used by the server's thread only; keys_pulled() and keys_pushed() from any.
#pragma once

#include "pstrain/embedding.hpp"
#include "pstrain/server.hpp"
#include "library/ps/protocol.hpp"
#include "library/ps/server_state.hpp"
#include "library/ps/worker_link.hpp"

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

namespace pstrain::ps {

class sparse_service {
public:
    sparse_service(const std::vector<embedding_config>& tables, const server_hooks& hooks, worker_links& links,
                   const training_state& state, server_clock& profile);

    // The tables, made anew (empty): before serving, when the chief's
    // hello says them.
    void set_tables(const std::vector<embedding_config>& tables);
    std::vector<embedding_table>& tables() { return tables_; }
    std::span<const std::uint32_t> dims() const { return dims_; }
    // Sync training with dense values on this PS: row updates wait for their steps.
    void hold_for_steps(bool on) { hold_for_steps_ = on; }
    // The floats a worker's receive slot needs for the largest sparse request.
    std::size_t slot_floats() const;

    void on_pull(std::size_t i, const wire::sparse_pull& m);
    void on_push(std::size_t i, const wire::sparse_push& m);

    // Sync: the held row updates of `workers` (in worker order), applied.
    void apply_held(std::span<const std::size_t> workers);
    // Sync: worker i's held row updates, dropped (its gradient was stale).
    void drop_held(std::size_t i) { held_[i].count = 0; }
    // The global step advanced: rows unused for their evict_after go.
    void step_done(std::uint64_t step);

    std::uint64_t keys_pulled() const { return keys_pulled_.load(std::memory_order_relaxed); }
    std::uint64_t keys_pushed() const { return keys_pushed_.load(std::memory_order_relaxed); }

    // Sync: the row updates one worker may have held for its next step (16
    // full messages; a batch's unique keys of every table fit many times),
    // so that a worker that never pushes its dense gradient cannot grow a
    // PS's memory without bound.
    static constexpr std::uint64_t max_held_keys = 16 * wire::max_sparse_keys;

private:
    // One worker's row updates since its last dense gradient:
    // rows[0, count) are in use; the vectors keep their capacity.
    struct held_rows {
        struct update {
            std::uint32_t table = 0;
            std::vector<std::uint64_t> keys;
            std::vector<float> grads;
        };
        std::vector<update> rows;
        std::size_t count = 0;
        std::uint64_t keys() const;
    };

    std::span<const std::uint64_t> keys_of(std::size_t i, std::uint64_t count);
    void warn_table_full(std::uint32_t t);
    void reply(std::size_t i, std::uint32_t table, std::uint64_t count);

    std::vector<embedding_table> tables_;  // this PS's rows of each table
    std::vector<std::uint32_t> dims_;
    const server_hooks& hooks_;
    worker_links& links_;
    const training_state& state_;
    server_clock& profile_;
    bool hold_for_steps_ = false;
    std::vector<held_rows> held_;                   // per worker
    std::vector<std::vector<std::uint64_t>> keys_;  // per worker: its request's keys, copied out of the slot
    std::atomic<std::uint64_t> keys_pulled_{0}, keys_pushed_{0};
};

}  // namespace pstrain::ps
