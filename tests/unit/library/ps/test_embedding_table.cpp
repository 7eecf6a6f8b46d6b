// The PS's sparse embedding tables: rows made on first sight from (seed,
// key) alone, admission and eviction, the row cap, the three row-wise
// optimizers against a scalar reference, and what a checkpoint stores.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE embedding_table
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "pstrain/embedding.hpp"
#include "pstrain/error.hpp"

#include <cmath>
#include <map>
#include <ostream>
#include <vector>

using namespace pstrain::ps;
namespace bdata = boost::unit_test::data;

namespace pstrain::ps {
std::ostream& operator<<(std::ostream& os, row_optimizer o) { return os << row_optimizer_name(o); }
}  // namespace pstrain::ps

namespace {

embedding_config config(std::uint32_t dim = 4, row_optimizer o = row_optimizer::adagrad)
{
    embedding_config c;
    c.dim = dim;
    c.optimizer = o;
    c.seed = 7;
    return c;
}

std::vector<float> pull(embedding_table& t, std::vector<std::uint64_t> keys, std::uint64_t step = 1)
{
    std::vector<float> out(keys.size() * t.config().dim, -1.0f);
    t.pull(keys, out, step);
    return out;
}

std::vector<float> row_of(const std::vector<float>& pulled, std::size_t i, std::uint32_t dim)
{
    return {pulled.begin() + static_cast<long>(i * dim), pulled.begin() + static_cast<long>((i + 1) * dim)};
}

bool all_zero(const std::vector<float>& v)
{
    for (float x : v)
        if (x != 0.0f) return false;
    return true;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_new_row_depends_on_the_seed_and_its_key_only)
{
    embedding_table a(config()), b(config());
    const auto one = pull(a, {42});
    // Another table (another PS, another order, other keys first) makes the same row.
    const auto many = pull(b, {9, 1ull << 40, 42, 3});
    BOOST_TEST(one == row_of(many, 2, 4), boost::test_tools::per_element());
    BOOST_TEST(row_of(many, 0, 4) != row_of(many, 3, 4));
    BOOST_TEST(!all_zero(one));
    for (float x : many) BOOST_TEST(std::fabs(x) <= a.config().init_range);
    // A second pull reads the same row; the table holds one row per key.
    BOOST_TEST(pull(b, {42, 42}) ==
                   (std::vector<float>{one[0], one[1], one[2], one[3], one[0], one[1], one[2], one[3]}),
               boost::test_tools::per_element());
    BOOST_TEST(b.rows() == 4u);
    auto other_seed = config();
    other_seed.seed = 8;
    embedding_table c(other_seed);
    BOOST_TEST(pull(c, {42}) != one);
}

BOOST_AUTO_TEST_CASE(a_key_reads_zeros_until_its_admission_and_pushes_before_are_ignored)
{
    auto cfg = config();
    cfg.admit_after = 3;
    embedding_table t(cfg);
    BOOST_TEST(all_zero(pull(t, {5})));
    BOOST_TEST(t.push(std::vector<std::uint64_t>{5}, std::vector<float>(4, 1.0f), 1) == 0u);
    BOOST_TEST(all_zero(pull(t, {5})));
    BOOST_TEST(t.rows() == 0u);
    const auto third = pull(t, {5});  // the third occurrence admits it
    BOOST_TEST(!all_zero(third));
    BOOST_TEST(t.rows() == 1u);
    embedding_table at_once(config());
    BOOST_TEST(pull(at_once, {5}) == third, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(rows_unseen_for_evict_after_steps_are_dropped_and_come_back_fresh)
{
    auto cfg = config();
    cfg.evict_after = 10;
    embedding_table t(cfg);
    const auto fresh = pull(t, {1, 2}, 1);
    t.push(std::vector<std::uint64_t>{1}, std::vector<float>(4, 1.0f), 1);
    pull(t, {2}, 8);
    BOOST_TEST(t.evict(11) == 0u);  // both seen within 10 steps
    BOOST_TEST(t.evict(12) == 1u);  // key 1 last seen at step 1
    BOOST_TEST(t.rows() == 1u);
    BOOST_TEST(t.evicted_rows() == 1u);
    // Evicted, key 1 is made again as new (its update is gone).
    BOOST_TEST(pull(t, {1}, 12) == row_of(fresh, 0, 4), boost::test_tools::per_element());
    BOOST_TEST(t.rows() == 2u);
}

BOOST_AUTO_TEST_CASE(beyond_max_rows_new_keys_read_zeros_and_are_counted)
{
    auto cfg = config();
    cfg.max_rows = 2;
    embedding_table t(cfg);
    const auto first = pull(t, {1, 2});
    const auto third = pull(t, {3, 1});
    BOOST_TEST(all_zero(row_of(third, 0, 4)));
    BOOST_TEST(row_of(third, 1, 4) == row_of(first, 0, 4), boost::test_tools::per_element());
    BOOST_TEST(t.rows() == 2u);
    BOOST_TEST(t.refused_rows() == 1u);
}

// One coordinate of each optimizer, step by step, in double precision.
BOOST_DATA_TEST_CASE(each_optimizer_updates_only_the_pushed_rows_as_its_rule_says,
                     bdata::make({row_optimizer::adagrad, row_optimizer::adam, row_optimizer::ftrl}), opt)
{
    auto cfg = config(3, opt);
    cfg.l1 = 0.001f;
    cfg.l2 = 0.01f;
    cfg.ftrl_beta = 0.5f;
    embedding_table t(cfg);
    const auto before = pull(t, {10, 11});
    std::vector<double> w(before.begin(), before.begin() + 3), a(3, cfg.adagrad_initial), m(3, 0), v(3, 0),
        n(3, cfg.adagrad_initial), z(3, 0);
    const std::vector<std::vector<float>> grads{{0.5f, -1.0f, 0.25f}, {0.1f, 0.2f, -0.3f}, {-2.0f, 0.0f, 1.0f}};
    const double lr = cfg.learning_rate;
    for (std::size_t s = 0; s < grads.size(); ++s) {
        t.push(std::vector<std::uint64_t>{10}, grads[s], s + 2);
        for (std::size_t i = 0; i < 3; ++i) {
            const double g = grads[s][i];
            if (opt == row_optimizer::adagrad) {
                a[i] += g * g;
                w[i] -= lr * g / std::sqrt(a[i]);
            } else if (opt == row_optimizer::adam) {
                const double k = static_cast<double>(s + 1);
                m[i] = 0.9 * m[i] + 0.1 * g;
                v[i] = 0.999 * v[i] + 0.001 * g * g;
                w[i] -=
                    lr * std::sqrt(1 - std::pow(0.999, k)) / (1 - std::pow(0.9, k)) * m[i] / (std::sqrt(v[i]) + 1e-8);
            } else {
                const double n_new = n[i] + g * g;
                z[i] += g - (std::sqrt(n_new) - std::sqrt(n[i])) / lr * w[i];
                n[i] = n_new;
                w[i] = std::fabs(z[i]) <= 0.001
                           ? 0.0
                           : (std::copysign(0.001, z[i]) - z[i]) / ((0.5 + std::sqrt(n[i])) / lr + 0.02);
            }
        }
    }
    const auto after = pull(t, {10, 11});
    for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(after[i] == w[i], boost::test_tools::tolerance(1e-5));
    BOOST_TEST(row_of(after, 1, 3) == row_of(before, 1, 3),
               boost::test_tools::per_element());  // lazy: key 11 untouched
}

BOOST_AUTO_TEST_CASE(a_checkpoint_gets_every_row_and_the_changed_ones_since_the_last_save)
{
    auto cfg = config(2, row_optimizer::adam);
    embedding_table t(cfg);
    pull(t, {1, 2, 3});
    t.push(std::vector<std::uint64_t>{2}, std::vector<float>{1, 1}, 2);
    std::map<std::uint64_t, std::vector<float>> saved;
    t.for_each([&](const embedding_row& r) {
        BOOST_TEST(r.state.size() == 4u);
        saved[r.key] = {r.values.begin(), r.values.end()};
    });
    BOOST_TEST(saved.size() == 3u);
    t.clear_changed();
    t.push(std::vector<std::uint64_t>{3}, std::vector<float>{1, -1}, 3);
    pull(t, {4});
    std::vector<std::uint64_t> changed;
    t.for_each_changed([&](const embedding_row& r) { changed.push_back(r.key); });
    std::sort(changed.begin(), changed.end());
    BOOST_TEST(changed == (std::vector<std::uint64_t>{3, 4}), boost::test_tools::per_element());

    // Restored into another table, a row carries its values, state and update count on.
    embedding_table u(cfg);
    t.for_each([&](const embedding_row& r) { u.restore(r); });
    BOOST_TEST(u.rows() == 4u);
    t.push(std::vector<std::uint64_t>{2}, std::vector<float>{0.5f, 0.5f}, 4);
    u.push(std::vector<std::uint64_t>{2}, std::vector<float>{0.5f, 0.5f}, 4);
    BOOST_TEST(pull(t, {1, 2, 3, 4}) == pull(u, {1, 2, 3, 4}), boost::test_tools::per_element());

    embedding_table wider(config(3, row_optimizer::adam));
    embedding_row r;
    r.key = 9;
    const std::vector<float> values{1, 2}, state{0, 0, 0, 0};
    r.values = values;
    r.state = state;
    BOOST_CHECK_THROW(wider.restore(r), pstrain::error);
}

// A pull changes a row's count and last_seen, so an incremental save
// holds the rows only pulled too; an evicted key is a tombstone until the
// next clear_changed(), unless it has a row again.
BOOST_AUTO_TEST_CASE(pulls_mark_rows_changed_and_evicted_keys_are_listed_until_cleared)
{
    auto cfg = config(2);
    cfg.evict_after = 2;
    embedding_table t(cfg);
    pull(t, {1, 2, 3}, 1);
    t.clear_changed();
    pull(t, {2}, 2);
    std::vector<std::uint64_t> changed;
    t.for_each_changed([&](const embedding_row& r) { changed.push_back(r.key); });
    BOOST_TEST(changed == (std::vector<std::uint64_t>{2}), boost::test_tools::per_element());
    BOOST_TEST(t.removed_keys().empty());

    BOOST_TEST(t.evict(4) == 2u);  // 1 and 3, last seen at step 1
    BOOST_TEST(t.removed_keys() == (std::vector<std::uint64_t>{1, 3}), boost::test_tools::per_element());
    pull(t, {3}, 5);  // a row again: no longer a tombstone
    BOOST_TEST(t.removed_keys() == (std::vector<std::uint64_t>{1}), boost::test_tools::per_element());
    t.clear_changed();
    BOOST_TEST(t.removed_keys().empty());

    // erase (a restore's tombstone) drops a row and is not an eviction.
    BOOST_TEST(t.erase(2));
    BOOST_TEST(!t.erase(2));
    BOOST_TEST(t.rows() == 1u);
    BOOST_TEST(t.evicted_rows() == 2u);
    BOOST_TEST(t.removed_keys().empty());
}

BOOST_AUTO_TEST_CASE(keys_spread_evenly_over_the_ps_tasks_whatever_their_pattern)
{
    for (std::size_t ps : {2u, 3u, 8u}) {
        std::vector<int> sequential(ps, 0), strided(ps, 0);
        for (std::uint64_t k = 0; k < 80000; ++k) {
            ++sequential[shard_of_key(k, ps)];
            ++strided[shard_of_key(k * 1024, ps)];
        }
        for (std::size_t p = 0; p < ps; ++p) {
            BOOST_TEST(std::abs(sequential[p] - 80000.0 / ps) < 0.03 * 80000 / ps, "ps " << p << " of " << ps);
            BOOST_TEST(std::abs(strided[p] - 80000.0 / ps) < 0.03 * 80000 / ps, "ps " << p << " of " << ps);
        }
    }
    BOOST_CHECK_THROW(shard_of_key(1, 0), pstrain::error);
}

BOOST_AUTO_TEST_CASE(settings_and_names_are_checked)
{
    BOOST_TEST(row_optimizer_name(parse_row_optimizer("ftrl")) == "ftrl");
    BOOST_CHECK_THROW(parse_row_optimizer("sgd"), pstrain::error);
    auto cfg = config();
    cfg.dim = 0;
    BOOST_CHECK_THROW(embedding_table{cfg}, pstrain::error);
    embedding_table t(config(16));
    std::vector<std::uint64_t> keys(1000);
    for (std::uint64_t k = 0; k < keys.size(); ++k) keys[k] = k;
    pull(t, keys);
    // 16 floats and 16 of Adagrad's: 128 bytes, plus bookkeeping and the index.
    BOOST_TEST(t.bytes_per_row() > 128.0);
    BOOST_TEST(t.bytes_per_row() < 128.0 + 40 + 40);
    std::vector<float> small(3);
    BOOST_CHECK_THROW(t.pull(keys, small, 1), pstrain::error);
}
