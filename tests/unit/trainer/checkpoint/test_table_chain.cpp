// Which table file a PS writes next: the first full, then every Nth, the
// others incremental on the chain since the full one; a step that does not
// move on, and a restore, start a new chain.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE table_chain
#include <boost/test/unit_test.hpp>

#include "tests/unit/trainer/checkpoint/helpers.hpp"
#include "trainer/checkpoint/table_chain.hpp"

#include <cstdint>
#include <vector>

using namespace pstrain;
using namespace pstrain::checkpoint;
using pstrain::testing::temp_dir;

namespace {

using steps = std::vector<std::uint64_t>;

// A PS without tables: its table files hold only their metadata.
const std::span<ps::embedding_table> no_tables;

}  // namespace

BOOST_AUTO_TEST_CASE(every_third_save_is_full_and_the_others_extend_its_chain)
{
    temp_dir d;
    table_chains chains(3);
    std::vector<bool> full;
    std::vector<steps> chain_of;
    for (std::uint64_t step = 10; step <= 70; step += 10) {
        const auto e = chains.save(d.path, step, 0, 1, no_tables);
        full.push_back(e.full);
        chain_of.push_back(e.chain);
        BOOST_TEST(e.file == table_name(step, 0, 1));
        BOOST_TEST(read_tables(d.path, e.file, true).meta.full == e.full);
    }
    BOOST_TEST(full == (std::vector<bool>{true, false, false, true, false, false, true}),
               boost::test_tools::per_element());
    BOOST_TEST(chain_of[0] == (steps{10}), boost::test_tools::per_element());
    BOOST_TEST(chain_of[2] == (steps{10, 20, 30}), boost::test_tools::per_element());
    BOOST_TEST(chain_of[4] == (steps{40, 50}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(next_says_what_the_save_would_write_without_recording_it)
{
    temp_dir d;
    table_chains chains(10);
    BOOST_TEST(chains.next(5, 0, 2).full);
    chains.save(d.path, 5, 0, 2, no_tables);
    const auto t = chains.next(6, 0, 2);
    BOOST_TEST(!t.full);
    BOOST_TEST(t.chain == (steps{5, 6}), boost::test_tools::per_element());
    BOOST_TEST(t.ps_index == 0);
    BOOST_TEST(t.num_ps == 2);
    BOOST_TEST(chains.next(6, 0, 2).chain == (steps{5, 6}), boost::test_tools::per_element());
    // Each PS index its own chain.
    BOOST_TEST(chains.next(6, 1, 2).full);
}

BOOST_AUTO_TEST_CASE(a_step_that_does_not_move_past_the_chain_starts_a_new_one)
{
    temp_dir d;
    table_chains chains(10);
    chains.save(d.path, 5, 0, 1, no_tables);
    chains.save(d.path, 8, 0, 1, no_tables);
    BOOST_TEST(chains.next(8, 0, 1).full);
    BOOST_TEST(chains.next(7, 0, 1).full);
    BOOST_TEST(!chains.next(9, 0, 1).full);
}

BOOST_AUTO_TEST_CASE(a_restore_makes_the_next_save_full)
{
    temp_dir d;
    table_chains chains(10);
    chains.save(d.path, 5, 0, 1, no_tables);
    BOOST_TEST(!chains.next(6, 0, 1).full);
    manifest m;
    m.global_step = 5;
    BOOST_TEST(chains.restore(d.path, m, 0, 1, no_tables) == 0u);
    BOOST_TEST(chains.next(6, 0, 1).full);
}

BOOST_AUTO_TEST_CASE(a_save_that_cannot_write_keeps_the_chain)
{
    temp_dir d;
    table_chains chains(10);
    chains.save(d.path, 5, 0, 1, no_tables);
    BOOST_CHECK_THROW(chains.save(d.path + "/no-such-directory", 6, 0, 1, no_tables), error);
    const auto t = chains.next(6, 0, 1);
    BOOST_TEST(!t.full);
    BOOST_TEST(t.chain == (steps{5, 6}), boost::test_tools::per_element());
}
