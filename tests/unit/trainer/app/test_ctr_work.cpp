// Click-through training's pieces above the model: a batch's ids made
// unique with each occurrence's place, bags of a part of the examples, the
// tables every task configures alike, the held-out set and its oracle.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE ctr_work
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/app/ctr_work.hpp"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace pstrain;
using namespace pstrain::trainer;

namespace {

data::ctr_sample sample(float label, std::vector<std::uint64_t> keys)
{
    data::ctr_sample s;
    s.label = label;
    for (int i = 0; i < data::ctr_numeric_fields; ++i)
        s.numeric[static_cast<std::size_t>(i)] = label + 0.5f * static_cast<float>(i);
    keys.resize(data::ctr_categorical_fields, 1000);  // the other fields share one id
    s.keys = keys;
    for (std::size_t f = 0; f <= keys.size(); ++f) s.field_begin[f] = static_cast<std::uint32_t>(f);
    return s;
}

struct temp_dir {
    std::filesystem::path path;
    temp_dir()
    {
        char t[] = "/tmp/pstrain-ctrwork-XXXXXX";
        path = mkdtemp(t);
    }
    ~temp_dir() { std::filesystem::remove_all(path); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_batch_pulls_each_id_once_and_knows_each_occurrence)
{
    ctr_examples e(data::ctr_categorical_fields, data::ctr_numeric_fields);
    e.add(sample(1, {7, 8, 7}));
    e.add(sample(0, {9, 7}));
    e.add(sample(1, {5}));
    BOOST_TEST(e.size() == 3u);

    auto b = e.batch(0, 3);
    BOOST_TEST(b.rows == 3);
    BOOST_TEST(b.fields == data::ctr_categorical_fields);
    BOOST_TEST(b.unique == 5u);
    const std::vector<std::uint64_t> unique(e.unique().begin(), e.unique().end());
    BOOST_TEST(unique == (std::vector<std::uint64_t>{7, 8, 1000, 9, 5}), boost::test_tools::per_element());
    BOOST_TEST(b.places.size() == 3u * data::ctr_categorical_fields);
    BOOST_TEST(b.places[0] == 0u);
    BOOST_TEST(b.places[1] == 1u);
    BOOST_TEST(b.places[2] == 0u);
    BOOST_TEST(b.places[3] == 2u);
    BOOST_TEST(b.places[data::ctr_categorical_fields] == 3u);  // example 1, field 0: id 9
    BOOST_TEST(b.bag_begin.size() == 3u * data::ctr_categorical_fields + 1);
    BOOST_TEST(b.bag_begin.back() == 3u * data::ctr_categorical_fields);
    BOOST_TEST(b.labels[1] == 0.0f);
    BOOST_TEST(b.features[data::ctr_numeric_fields + 1] == 0.5f);

    // A part of the examples: its bags start at 0, its ids are its own.
    b = e.batch(1, 3);
    BOOST_TEST(b.rows == 2);
    BOOST_TEST(b.unique == 4u);
    const std::vector<std::uint64_t> part(e.unique().begin(), e.unique().end());
    BOOST_TEST(part == (std::vector<std::uint64_t>{9, 7, 1000, 5}), boost::test_tools::per_element());
    BOOST_TEST(b.bag_begin[0] == 0u);
    BOOST_TEST(b.bag_begin.back() == 2u * data::ctr_categorical_fields);
    BOOST_TEST(b.labels[0] == 0.0f);
    BOOST_TEST(b.features[0] == 0.0f);

    e.clear();
    BOOST_TEST(e.size() == 0u);
}

BOOST_AUTO_TEST_CASE(every_task_configures_the_same_tables_from_the_options)
{
    train_options o;
    BOOST_TEST(embedding_tables_for(o).empty(), "a dense model has no tables");
    o.ctr = true;
    o.hidden = {8};
    o.embedding_dim = 6;
    o.embedding_optimizer = "ftrl";
    o.embedding_learning_rate = 0.2f;
    o.admit_after = 2;
    o.evict_after = 500;
    auto t = embedding_tables_for(o);
    BOOST_TEST_REQUIRE(t.size() == 2u);
    BOOST_TEST(t[0].dim == 1u);  // wide
    BOOST_TEST(t[1].dim == 6u);  // deep
    for (const auto& c : t) {
        BOOST_TEST((c.optimizer == ps::row_optimizer::ftrl));
        BOOST_TEST(c.learning_rate == 0.2f);
        BOOST_TEST(c.admit_after == 2u);
        BOOST_TEST(c.evict_after == 500u);
        BOOST_TEST(c.max_rows > 1000000u, "0 becomes what half the memory holds: " << c.max_rows);
    }
    BOOST_TEST(t[0].seed != t[1].seed, "each table its own rows");
    o.max_table_rows = 777;
    for (const auto& c : embedding_tables_for(o)) BOOST_TEST(c.max_rows == 777u);
}

BOOST_AUTO_TEST_CASE(the_held_out_set_and_its_oracle)
{
    temp_dir d;
    train_options o;
    o.data_dir = d.path.string();
    try {
        read_ctr_test_set(o, data::ctr_categorical_fields, data::ctr_numeric_fields);
        BOOST_FAIL("no test.tsv was accepted");
    } catch (const error& e) {
        BOOST_TEST(std::string(e.what()).find("no test.tsv") != std::string::npos, e.what());
    }
    std::string line = "1";
    for (int i = 0; i < data::ctr_numeric_fields; ++i) line += "\t" + std::to_string(i);
    for (int i = 0; i < data::ctr_categorical_fields; ++i) line += "\ta1b2c3d4";
    std::ofstream(d.path / "test.tsv") << line << "\n" << line << "\nnot a line\n";
    try {
        read_ctr_test_set(o, data::ctr_categorical_fields, data::ctr_numeric_fields);
        BOOST_FAIL("a malformed line was accepted");
    } catch (const error& e) {
        BOOST_TEST(std::string(e.what()).find("test.tsv") != std::string::npos, e.what());
        BOOST_TEST(std::string(e.what()).find("test.tsv:3:") != std::string::npos, e.what());
    }
    o.skip_bad_lines = true;
    auto t = read_ctr_test_set(o, data::ctr_categorical_fields, data::ctr_numeric_fields);
    BOOST_TEST(t.examples->size() == 2u);
    BOOST_TEST(!t.oracle_auc.has_value());
    std::ofstream(d.path / "oracle.json") << R"({"oracle_auc":0.781234,"oracle_logloss":0.5})";
    t = read_ctr_test_set(o, data::ctr_categorical_fields, data::ctr_numeric_fields);
    BOOST_TEST_REQUIRE(t.oracle_auc.has_value());
    BOOST_TEST(*t.oracle_auc == 0.781234);
}
