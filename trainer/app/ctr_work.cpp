#include "trainer/app/ctr_work.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace pstrain::trainer {
namespace {

std::uint64_t physical_memory()
{
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

// The held-out evaluation reads this many examples at a time.
constexpr std::size_t eval_chunk = 1024;

}  // namespace

model::wide_deep_config wide_deep_config_for(const train_options& o)
{
    model::wide_deep_config c;
    c.fields = data::ctr_categorical_fields;
    c.numeric = data::ctr_numeric_fields;
    c.embedding_dim = o.embedding_dim;
    c.hidden = o.hidden;
    c.combiner = model::parse_bag_combiner(o.embedding_combiner);
    c.fm = o.family == model_family::deepfm;
    c.max_batch = std::max<std::size_t>(static_cast<std::size_t>(o.batch_size), eval_chunk);
    return c;
}

std::vector<ps::embedding_config> embedding_tables_for(const train_options& o)
{
    std::vector<ps::embedding_config> tables;
    if (!o.ctr) return tables;
    const auto spec = model::make_wide_deep(wide_deep_config_for(o));
    for (std::size_t t = 0; t < spec->tables().size(); ++t) {
        ps::embedding_config c;
        c.dim = static_cast<std::uint32_t>(spec->tables()[t].dim);
        c.optimizer = ps::parse_row_optimizer(o.embedding_optimizer);
        c.learning_rate = o.embedding_learning_rate;
        c.seed = o.seed * 7919u + t + 1;  // each table its own rows
        c.admit_after = o.admit_after;
        c.evict_after = o.evict_after;
        c.max_rows = o.max_table_rows;
        if (c.max_rows == 0) {
            // Half the memory, shared by the tables: a row's floats (values
            // and optimizer state), its bookkeeping and its index slot.
            const std::uint64_t slots = c.optimizer == ps::row_optimizer::adagrad ? 1 : 2;
            const std::uint64_t row_bytes = c.dim * (1 + slots) * 4 + 32 + 24;
            std::uint64_t per_row = 0;
            for (const auto& s : spec->tables())
                per_row += static_cast<std::uint64_t>(s.dim) * (1 + slots) * 4 + 32 + 24;
            c.max_rows =
                std::max<std::uint64_t>(physical_memory() / 2 / std::max<std::uint64_t>(per_row, row_bytes), 1024);
        }
        tables.push_back(c);
    }
    return tables;
}

void ctr_examples::clear()
{
    labels_.clear();
    numeric_values_.clear();
    ids_.clear();
    bag_begin_.assign(1, 0);
}

void ctr_examples::add(const data::ctr_sample& s)
{
    labels_.push_back(s.label);
    numeric_values_.insert(numeric_values_.end(), s.numeric.begin(), s.numeric.begin() + numeric_);
    for (int f = 0; f < fields_; ++f) {
        const auto ids = s.field(f);
        ids_.insert(ids_.end(), ids.begin(), ids.end());
        bag_begin_.push_back(static_cast<std::uint32_t>(ids_.size()));
    }
}

model::sparse_batch ctr_examples::batch(std::size_t begin, std::size_t end)
{
    const auto per = static_cast<std::size_t>(fields_);
    const auto first = bag_begin_[begin * per], last = bag_begin_[end * per];
    batch_bags_.resize((end - begin) * per + 1);
    for (std::size_t i = 0; i < batch_bags_.size(); ++i) batch_bags_[i] = bag_begin_[begin * per + i] - first;
    ps::deduplicate(std::span<const std::uint64_t>(ids_).subspan(first, last - first), unique_, places_);
    model::sparse_batch b;
    b.rows = static_cast<int>(end - begin);
    b.fields = fields_;
    b.numeric = numeric_;
    b.labels = std::span<const float>(labels_).subspan(begin, end - begin);
    b.features =
        std::span<const float>(numeric_values_)
            .subspan(begin * static_cast<std::size_t>(numeric_), (end - begin) * static_cast<std::size_t>(numeric_));
    b.bag_begin = batch_bags_;
    b.places = places_;
    b.unique = unique_.size();
    return b;
}

ctr_test_set read_ctr_test_set(const train_options& o, int fields, int numeric)
{
    const std::filesystem::path dir = o.data_dir, test = dir / "test.tsv";
    if (!std::filesystem::is_regular_file(test))
        throw error(
            fmt::format("{}: no test.tsv, the held-out part the chief evaluates on: put a part of the data there "
                        "(`pstrain datagen ctr` writes one)",
                        dir.string()));
    ctr_test_set t;
    t.examples = std::make_unique<ctr_examples>(fields, numeric);
    data::ctr_reader r({test}, 0, 1, o.skip_bad_lines);
    data::ctr_sample s;
    while (r.next(s)) t.examples->add(s);
    if (t.examples->size() == 0)
        throw error(fmt::format("{}: no examples: the chief has nothing to evaluate on", test.string()));
    if (r.bad_lines() > 0) log::warn("{}: {} malformed lines skipped (--skip-bad-lines)", test.string(), r.bad_lines());
    const auto oracle = dir / "oracle.json";
    if (std::filesystem::is_regular_file(oracle)) {
        try {
            std::ifstream in(oracle);
            const auto j = nlohmann::json::parse(in);
            t.oracle_auc = j.at("oracle_auc").get<double>();
        } catch (const std::exception& e) {
            log::warn("{}: not read ({}): the final line has no oracle_auc", oracle.string(), e.what());
        }
    }
    return t;
}

ctr_work::ctr_work(const train_options& o, model::ctr_model& m, ps::client& c, int worker, int num_workers)
    : o_(o), model_(m), client_(c), reader_(data::ctr_train_files(o.data_dir), static_cast<std::size_t>(worker),
                                            static_cast<std::size_t>(num_workers), o.skip_bad_lines),
      batch_(data::ctr_categorical_fields, data::ctr_numeric_fields)
{
    for (const auto& t : m.tables()) {
        (void)t;
        rows_.emplace_back();
        row_grads_.emplace_back();
    }
    row_views_.resize(rows_.size());
    grad_views_.resize(rows_.size());
}

bool ctr_work::read_example(data::ctr_sample& s)
{
    if (reader_.next(s)) return true;
    if (reader_.lines_read() == 0)
        throw error(
            fmt::format("{}: no training examples for this worker: give more data or fewer workers", o_.data_dir));
    reader_.rewind();
    ++epoch_;
    return reader_.next(s);
}

void ctr_work::pull(std::span<const std::uint64_t> keys, bool lookup)
{
    const auto& tables = model_.tables();
    std::vector<ps::ticket> pulls;
    for (std::size_t t = 0; t < tables.size(); ++t) {
        rows_[t].resize(keys.size() * static_cast<std::size_t>(tables[t].dim));
        pulls.push_back(lookup ? client_.async_lookup_rows(t, keys, rows_[t])
                               : client_.async_pull_rows(t, keys, rows_[t]));
    }
    for (auto id : pulls) client_.wait(id);
    for (std::size_t t = 0; t < tables.size(); ++t) row_views_[t] = rows_[t];
}

model::batch_result ctr_work::compute()
{
    batch_.clear();
    for (int i = 0; i < o_.batch_size; ++i) {
        if (!read_example(sample_)) break;
        batch_.add(sample_);
    }
    const auto b = batch_.batch(0, batch_.size());
    pull(batch_.unique(), false);
    const auto& tables = model_.tables();
    for (std::size_t t = 0; t < tables.size(); ++t) {
        row_grads_[t].resize(rows_[t].size());
        grad_views_[t] = row_grads_[t];
    }
    const auto c0 = std::chrono::steady_clock::now();
    const auto r = model_.compute_gradients(client_.params(), b, row_views_, client_.grads(), grad_views_);
    model_time_ += std::chrono::steady_clock::now() - c0;
    pushes_.clear();
    for (std::size_t t = 0; t < tables.size(); ++t)
        pushes_.push_back(client_.async_push_rows(t, batch_.unique(), row_grads_[t]));
    return r;
}

void ctr_work::finish()
{
    for (auto id : pushes_) client_.wait(id);
    pushes_.clear();
}

void ctr_work::skip_batches(std::uint64_t batches)
{
    for (std::uint64_t n = 0; n < batches * static_cast<std::uint64_t>(o_.batch_size); ++n)
        if (!read_example(sample_)) break;
}

ctr_metrics ctr_work::evaluate(ctr_examples& test)
{
    probabilities_.resize(test.size());
    for (std::size_t at = 0; at < test.size(); at += eval_chunk) {
        const auto end = std::min(test.size(), at + eval_chunk);
        const auto b = test.batch(at, end);
        pull(test.unique(), true);
        model_.predict(client_.params(), b, row_views_, std::span<float>(probabilities_).subspan(at, end - at));
    }
    ctr_metrics m;
    m.examples = test.size();
    const auto labels = test.labels();
    double loss = 0;
    std::size_t right = 0;
    for (std::size_t i = 0; i < labels.size(); ++i) {
        const double p = std::clamp<double>(probabilities_[i], 1e-7, 1 - 1e-7);
        loss -= labels[i] > 0.5f ? std::log(p) : std::log1p(-p);
        right += (p >= 0.5) == (labels[i] > 0.5f);
    }
    m.logloss = loss / static_cast<double>(labels.size());
    m.accuracy = static_cast<double>(right) / static_cast<double>(labels.size());
    m.auc = data::auc(probabilities_, labels);
    return m;
}

}  // namespace pstrain::trainer
