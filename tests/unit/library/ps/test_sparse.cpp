// Sparse pulls and pushes of embedding rows through the PS library: each
// key served by the PS shard_of_key names, rows equal to one table's fed
// the same requests, whatever the number of PS tasks; refusals and the end
// of training.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE sparse
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "pstrain/embedding.hpp"
#include "tests/unit/library/ps/loopback_job.hpp"

#include <chrono>
#include <string>
#include <vector>

using namespace pstrain::ps;
using pstrain::testing::job_options;
using pstrain::testing::ps_job;
namespace bdata = boost::unit_test::data;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t dim = 3;

embedding_config table_config(row_optimizer o = row_optimizer::adagrad)
{
    embedding_config c;
    c.dim = dim;
    c.optimizer = o;
    c.seed = 11;
    return c;
}

server_config with_tables(bool sync, std::vector<embedding_config> tables)
{
    server_config c;
    c.training.sync = sync;
    c.training.optimizer.kind = optimizer_kind::sgd;
    c.training.tables = std::move(tables);
    c.shutdown_wait = 2s;
    return c;
}

job_options table_options(std::vector<std::uint32_t> dims)
{
    job_options o;
    o.num_params = 4;
    o.table_dims = std::move(dims);
    return o;
}

std::vector<float> pulled(client& w, std::size_t table, const std::vector<std::uint64_t>& keys)
{
    std::vector<float> out(keys.size() * dim, -7.0f);
    w.wait(w.async_pull_rows(table, keys, out));
    return out;
}

}  // namespace

// Two workers' pulls and pushes over 1, 2 or 3 PS tasks give exactly the
// rows one table gives for the same requests in the same order.
BOOST_DATA_TEST_CASE(rows_are_those_of_one_table_whatever_the_ps_count, bdata::make({1, 2, 3}), num_ps)
{
    ps_job job(num_ps, 2, with_tables(false, {table_config(), table_config(row_optimizer::adam)}), {},
               table_options({dim, dim}));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    w0.wait(w0.async_init());
    w1.wait(w1.async_pull());
    embedding_table ref0(table_config()), ref1(table_config(row_optimizer::adam));

    const std::vector<std::uint64_t> keys{5, 1ull << 50, 5, 77, 123456789, 0};
    std::vector<float> expect(keys.size() * dim);
    ref0.pull(keys, expect, 0);
    BOOST_TEST(pulled(w0, 0, keys) == expect, boost::test_tools::per_element());

    std::vector<std::uint64_t> unique;
    std::vector<std::uint32_t> place;
    deduplicate(keys, unique, place);
    BOOST_TEST(unique == (std::vector<std::uint64_t>{5, 1ull << 50, 77, 123456789, 0}),
               boost::test_tools::per_element());
    BOOST_TEST(place == (std::vector<std::uint32_t>{0, 1, 0, 2, 3, 4}), boost::test_tools::per_element());
    std::vector<float> grads(unique.size() * dim);
    for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = 0.25f * static_cast<float>(i) - 1.0f;
    w1.wait(w1.async_push_rows(0, unique, grads));
    ref0.push(unique, grads, 0);
    ref0.pull(keys, expect, 0);
    BOOST_TEST(pulled(w0, 0, keys) == expect, boost::test_tools::per_element());

    // The second table (Adam) is its own: keys of the first are new there.
    std::vector<float> expect1(2 * dim);
    const std::vector<std::uint64_t> two{5, 9};
    ref1.pull(two, expect1, 0);
    BOOST_TEST(pulled(w1, 1, two) == expect1, boost::test_tools::per_element());
    w0.wait(w0.async_push_rows(1, two, std::vector<float>(2 * dim, 1.0f)));
    ref1.push(two, std::vector<float>(2 * dim, 1.0f), 0);
    ref1.pull(two, expect1, 0);
    BOOST_TEST(pulled(w1, 1, two) == expect1, boost::test_tools::per_element());

    // An empty request is answered at once.
    std::vector<float> none;
    w0.wait(w0.async_pull_rows(0, {}, none));

    w0.shutdown();
    // Keys on every PS: each one's reply says training is done, and it leaves.
    std::vector<std::uint64_t> everywhere(64);
    for (std::uint64_t k = 0; k < everywhere.size(); ++k) everywhere[k] = k;
    for (int i = 0; i < 100 && !w1.done(); ++i) pulled(w1, 0, everywhere);
    BOOST_TEST(w1.done(), "no sparse reply said training is done");
    for (int p = 0; p < num_ps; ++p) BOOST_TEST_REQUIRE(job.finish(p).returned);
}

// Evaluation's lookups read the rows that exist and zeros for the others,
// make and count nothing (a lookup is no occurrence for admission), and are
// answered with the rows after the chief has ended training.
BOOST_DATA_TEST_CASE(lookups_read_without_making_rows, bdata::make({1, 2}), num_ps)
{
    auto admitted = table_config();
    admitted.admit_after = 2;
    ps_job job(num_ps, 2, with_tables(false, {admitted}), {}, table_options({dim}));
    auto& w0 = job.chief();
    auto& w1 = job.worker(1);
    w0.wait(w0.async_init());
    w1.wait(w1.async_pull());
    embedding_table ref(admitted);
    const std::vector<std::uint64_t> known{3, 3, 8};  // 3 admitted on its second occurrence
    std::vector<float> expect(known.size() * dim);
    ref.pull(known, expect, 0);
    BOOST_TEST(pulled(w0, 0, known) == expect, boost::test_tools::per_element());

    const std::vector<std::uint64_t> keys{3, 8, 42};
    std::vector<float> looked(keys.size() * dim, -7.0f), want(keys.size() * dim);
    // 3 has a row, but no update has reached it: it reads as zeros, like
    // 8 and 42, which have none.
    w1.wait(w1.async_lookup_rows(0, keys, looked));
    BOOST_TEST(looked == std::vector<float>(keys.size() * dim, 0.0f), boost::test_tools::per_element());
    const std::vector<std::uint64_t> three{3};
    const std::vector<float> g3{0.5f, -1.0f, 2.0f};
    w0.wait(w0.async_push_rows(0, three, g3));
    ref.push(three, g3, 0);
    ref.lookup(keys, want);
    BOOST_TEST(want[0] != 0.0f);  // 3 updated, 8 and 42 no rows
    for (int i = 0; i < 3; ++i) w1.wait(w1.async_lookup_rows(0, keys, looked));
    BOOST_TEST(looked == want, boost::test_tools::per_element());
    // Three lookups of 42 did not count: its first pull is its first occurrence.
    const std::vector<std::uint64_t> once{42};
    BOOST_TEST(pulled(w1, 0, once) == std::vector<float>(dim, 0.0f), boost::test_tools::per_element());

    w0.shutdown();
    for (int i = 0; i < 100 && !w1.done(); ++i) w1.wait(w1.async_lookup_rows(0, keys, looked));
    BOOST_TEST(w1.done());
    BOOST_TEST(looked == want, boost::test_tools::per_element());
    // Every key read or updated is counted by the PS that holds it.
    std::uint64_t pulled_keys = 0, pushed_keys = 0;
    for (int p = 0; p < num_ps; ++p) {
        BOOST_TEST_REQUIRE(job.finish(p).returned);
        pulled_keys += job.server(p).sparse().keys_pulled;
        pushed_keys += job.server(p).sparse().keys_pushed;
    }
    BOOST_TEST(pulled_keys >= known.size() + 5 * keys.size() + once.size());
    BOOST_TEST(pushed_keys == three.size());
}

// More keys than one message may carry are split, and come back in order.
BOOST_AUTO_TEST_CASE(a_request_larger_than_a_message_is_split)
{
    ps_job job(2, 1, with_tables(true, {table_config()}), {}, table_options({dim}));
    auto& w = job.chief();
    w.wait(w.async_init());
    std::vector<std::uint64_t> keys(150000);
    for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = i * 7919;
    embedding_table ref(table_config());
    std::vector<float> expect(keys.size() * dim);
    ref.pull(keys, expect, 0);
    BOOST_TEST(pulled(w, 0, keys) == expect, boost::test_tools::per_element());
    std::vector<float> grads(keys.size() * dim, 0.5f);
    w.wait(w.async_push_rows(0, keys, grads));
    w.step();  // sync: the rows apply with the step
    ref.push(keys, grads, 0);
    ref.pull(keys, expect, 0);
    BOOST_TEST(pulled(w, 0, keys) == expect, boost::test_tools::per_element());
    w.shutdown();
    BOOST_TEST_REQUIRE(job.finish(0).returned);
}

// Sync: a worker's row updates wait for the step its next dense push joins
// and apply with it, the step's workers in index order whatever the order
// they came in; a stale push drops its batch's row updates with it.
BOOST_DATA_TEST_CASE(in_sync_mode_row_updates_move_with_the_dense_step, bdata::make({1, 2}), num_ps)
{
    auto config = with_tables(true, {table_config(row_optimizer::adam)});
    config.training.replicas_to_aggregate = 2;
    ps_job job(num_ps, 3, config, {}, table_options({dim}));
    auto& w0 = job.chief();
    auto &w1 = job.worker(1), &w2 = job.worker(2);
    w0.wait(w0.async_init());
    w1.wait(w1.async_pull());
    w2.wait(w2.async_pull());
    const std::vector<std::uint64_t> keys{4, 1ull << 40, 99};
    embedding_table ref(table_config(row_optimizer::adam));
    std::vector<float> before(keys.size() * dim), after(keys.size() * dim);
    ref.pull(keys, before, 0);
    BOOST_TEST(pulled(w0, 0, keys) == before, boost::test_tools::per_element());

    std::vector<float> g0(keys.size() * dim), g1(keys.size() * dim, -0.75f), g2(keys.size() * dim, 3.0f);
    for (std::size_t i = 0; i < g0.size(); ++i) g0[i] = 0.5f * static_cast<float>(i) - 2.0f;
    // Worker 1 before worker 0: Adam's result depends on the order.
    w1.wait(w1.async_push_rows(0, keys, g1));
    w0.wait(w0.async_push_rows(0, keys, g0));
    // The rows exist (pulled) but no update has reached them: a lookup
    // reads zeros.
    std::vector<float> looked(keys.size() * dim, -7.0f);
    w2.wait(w2.async_lookup_rows(0, keys, looked));
    BOOST_TEST_CONTEXT("a row update must wait for its step")
    BOOST_TEST(looked == std::vector<float>(keys.size() * dim, 0.0f), boost::test_tools::per_element());
    BOOST_TEST(pulled(w2, 0, keys) == before, boost::test_tools::per_element());

    const auto t1 = w1.async_push(), t0 = w0.async_push();
    w0.wait(t0);
    w1.wait(t1);
    ref.push(keys, g0, 0);
    ref.push(keys, g1, 0);
    ref.lookup(keys, after);
    w2.wait(w2.async_lookup_rows(0, keys, looked));
    BOOST_TEST(looked == after, boost::test_tools::per_element());

    // Worker 2 computed on step 0's values: its push is stale at step 1,
    // and its rows go with it.
    w2.wait(w2.async_push_rows(0, keys, g2));
    w2.wait(w2.async_push());
    w0.wait(w0.async_lookup_rows(0, keys, looked));
    BOOST_TEST_CONTEXT("a stale push's row updates must be dropped")
    BOOST_TEST(looked == after, boost::test_tools::per_element());

    w0.shutdown();
    for (int p = 0; p < num_ps; ++p) BOOST_TEST_REQUIRE(job.finish(p).returned);
}

// Sync: row updates held for a step that never comes are bounded; past the
// bound the PS refuses them, saying what to do.
BOOST_AUTO_TEST_CASE(row_updates_without_a_dense_push_are_bounded)
{
    ps_job job(1, 1, with_tables(true, {table_config()}), {}, table_options({dim}));
    auto& w = job.chief();
    w.wait(w.async_init());
    std::vector<std::uint64_t> keys(16 * 65536 + 1);
    for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = i;
    const std::vector<float> grads(keys.size() * dim, 0.5f);
    std::string why;
    try {
        w.wait(w.async_push_rows(0, keys, grads));
    } catch (const pstrain::peer_error& e) {
        why = e.what();
    }
    BOOST_TEST(why.find("held for one step") != std::string::npos, why);
    BOOST_TEST(why.find("async_push() the dense gradient") != std::string::npos, why);
}

BOOST_AUTO_TEST_CASE(a_worker_with_other_tables_is_refused_at_hello_naming_both_counts)
{
    ps_job job(1, 1, with_tables(false, {table_config()}), {}, table_options({}));
    auto& w = job.chief();
    try {
        w.wait(w.async_init());
        BOOST_ERROR("a worker without the PS's embedding table was accepted");
    } catch (const pstrain::peer_error& e) {
        BOOST_TEST(std::string(e.what()).find("0 embedding tables where this PS has 1") != std::string::npos, e.what());
    }
}

BOOST_AUTO_TEST_CASE(the_client_checks_the_table_and_the_sizes_before_sending)
{
    ps_job job(1, 1, with_tables(false, {table_config()}), {}, table_options({dim}));
    auto& w = job.chief();
    w.wait(w.async_init());
    std::vector<float> out(2 * dim);
    BOOST_CHECK_THROW(w.async_pull_rows(1, std::vector<std::uint64_t>{1, 2}, out), pstrain::error);
    BOOST_CHECK_THROW(w.async_pull_rows(0, std::vector<std::uint64_t>{1}, out), pstrain::error);
    BOOST_CHECK_THROW(w.async_push_rows(0, std::vector<std::uint64_t>{1, 2, 3}, out), pstrain::error);
    // Still usable after a refused call.
    w.wait(w.async_pull_rows(0, std::vector<std::uint64_t>{1, 2}, out));
    w.shutdown();
    BOOST_TEST_REQUIRE(job.finish().returned);
}

// The snapshot hook reads the rows changed since the last snapshot stored;
// once it has returned the server forgets the marks, and when it throws
// they stay for the next one.
BOOST_AUTO_TEST_CASE(a_stored_snapshot_clears_the_change_marks_and_a_failed_one_keeps_them)
{
    std::vector<std::size_t> seen;  // the changed rows each snapshot's hook saw
    bool fail = false;
    server_hooks h;
    h.snapshot = [&](const shard_snapshot& s) {
        std::size_t n = 0;
        s.tables[0].for_each_changed([&](const embedding_row&) { ++n; });
        seen.push_back(n);
        if (fail) throw pstrain::error("the disk is full");
        return snapshot_receipt{};
    };
    ps_job job(1, 1, with_tables(false, {table_config()}), h, table_options({dim}));
    auto& w = job.chief();
    w.wait(w.async_init());
    pulled(w, 0, {1, 2, 3});
    BOOST_TEST((w.snapshot(1).at(0).outcome == snapshot_result::status::taken));
    pulled(w, 0, {4});
    fail = true;
    BOOST_TEST((w.snapshot(2).at(0).outcome == snapshot_result::status::failed));
    fail = false;
    pulled(w, 0, {5});
    BOOST_TEST((w.snapshot(3).at(0).outcome == snapshot_result::status::taken));
    BOOST_TEST((w.snapshot(4).at(0).outcome == snapshot_result::status::taken));
    const std::vector<std::size_t> expect{3, 1, 2, 0};
    BOOST_TEST(seen == expect, boost::test_tools::per_element());
    w.shutdown();
}
