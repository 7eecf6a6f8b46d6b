#include "trainer/checkpoint/table_chain.hpp"

#include "trainer/checkpoint/restore.hpp"

#include <algorithm>

namespace pstrain::checkpoint {

table_chains::chain& table_chains::of(int ps_index)
{
    std::lock_guard lock(mu_);
    return chains_[ps_index];
}

table_meta table_chains::next(std::uint64_t step, int ps_index, int num_ps)
{
    const auto& c = of(ps_index);
    table_meta t;
    t.global_step = step;
    t.ps_index = ps_index;
    t.num_ps = num_ps;
    t.full = c.steps.empty() || c.saves % std::max(full_every_, 1) == 0 || c.steps.back() >= step;
    t.chain = t.full ? std::vector<std::uint64_t>{} : c.steps;
    t.chain.push_back(step);
    return t;
}

table_entry table_chains::save(const std::string& dir, std::uint64_t step, int ps_index, int num_ps,
                               std::span<const ps::embedding_table> tables)
{
    auto t = next(step, ps_index, num_ps);
    auto e = write_tables(dir, t, tables);
    auto& c = of(ps_index);
    c.steps = std::move(t.chain);
    c.saves = t.full ? 1 : c.saves + 1;
    return e;
}

std::uint64_t table_chains::restore(const std::string& dir, const manifest& m, int index, int num_ps,
                                    std::span<ps::embedding_table> tables)
{
    const auto rows = load_tables(dir, m, index, num_ps, tables);
    of(index) = {};
    return rows;
}

}  // namespace pstrain::checkpoint
