// How each PS task saves and restores its embedding tables across
// checkpoints: its chain of table files since its last full save.  The
// first save of a process is full (a restore, perhaps onto another PS
// count, starts a new chain), then every `full_every`-th; the others hold
// the rows changed since the save before (table_file.hpp).  A save at a
// step that does not move past the chain's last is full too.  What a kept
// checkpoint's chain needs is kept by prune (store.hpp).
//
// One table_chains serves every PS of a process (tests run several in one):
// the chains are per PS index, and each index is used by one thread at a
// time (its server's).
#pragma once

#include "pstrain/embedding.hpp"
#include "trainer/checkpoint/manifest.hpp"
#include "trainer/checkpoint/table_file.hpp"

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace pstrain::checkpoint {

class table_chains {
public:
    explicit table_chains(int full_every) : full_every_(full_every) {}

    // The metadata (step, PS, full or not, chain) of the table file PS
    // `ps_index` of `num_ps` writes next, at `step`.
    table_meta next(std::uint64_t step, int ps_index, int num_ps);

    // Writes that file (write_tables) into `dir`, then, the file being
    // durable, extends the chain (the server clears the tables' changed
    // marks once the snapshot hook has returned).  Returns its manifest
    // entry.  Throws pstrain::error when the file cannot be written: the
    // chain stays as it was, and the marks stay for the next save.
    table_entry save(const std::string& dir, std::uint64_t step, int ps_index, int num_ps,
                     std::span<const ps::embedding_table> tables);

    // Puts back the rows of checkpoint `m` in `dir` that PS `index` of
    // `num_ps` holds (load_tables) and starts its chain afresh: its next
    // save is full.  Returns the rows restored.
    std::uint64_t restore(const std::string& dir, const manifest& m, int index, int num_ps,
                          std::span<ps::embedding_table> tables);

private:
    struct chain {
        std::vector<std::uint64_t> steps;  // the table files since the full save, its step first
        int saves = 0;                     // files in the chain so far
    };
    chain& of(int ps_index);

    const int full_every_;
    std::mutex mu_;  // guards the map, not a chain (one thread per PS index)
    std::map<int, chain> chains_;
};

}  // namespace pstrain::checkpoint
