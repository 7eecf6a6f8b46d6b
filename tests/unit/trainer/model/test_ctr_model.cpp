// Wide & deep and DeepFM over embedding rows against a naive
// double-precision reference written here: the loss and accuracy, and
// every dense and row gradient against the reference's central finite
// differences, with repeated keys (within a field, across fields and
// examples), empty bags, both combiners, a batch of one; bad batches refused.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE ctr_model
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include "common/random.hpp"
#include "pstrain/error.hpp"
#include "tests/unit/trainer/compute/bf16_here.hpp"
#include "trainer/compute/backend.hpp"
#include "trainer/model/ctr_model.hpp"

#include <cmath>
#include <vector>

using namespace pstrain;
using namespace pstrain::model;
namespace bdata = boost::unit_test::data;

namespace {

struct example_batch {
    int rows = 0, fields = 0, numeric = 0;
    std::vector<float> labels, features;
    std::vector<std::uint32_t> bag_begin{0}, places;
    std::size_t unique = 0;
    sparse_batch view() const
    {
        sparse_batch b;
        b.rows = rows;
        b.fields = fields;
        b.numeric = numeric;
        b.labels = labels;
        b.features = features;
        b.bag_begin = bag_begin;
        b.places = places;
        b.unique = unique;
        return b;
    }
};

// rows examples of `fields` fields; bags of 0 to 3 ids out of `unique`
// keys (so keys repeat within bags, across fields and examples).
example_batch make_batch(int rows, int fields, int numeric, std::size_t unique, std::uint64_t seed)
{
    random::splitmix64 g(seed);
    example_batch b;
    b.rows = rows;
    b.fields = fields;
    b.numeric = numeric;
    b.unique = unique;
    for (int r = 0; r < rows; ++r) {
        b.labels.push_back(static_cast<float>(g() % 2));
        for (int j = 0; j < numeric; ++j) b.features.push_back(static_cast<float>(random::uniform(g, -1, 2)));
        for (int f = 0; f < fields; ++f) {
            const int ids = static_cast<int>(g() % 4);  // 0: an empty bag
            for (int i = 0; i < ids; ++i) b.places.push_back(static_cast<std::uint32_t>(g() % unique));
            b.bag_begin.push_back(static_cast<std::uint32_t>(b.places.size()));
        }
    }
    return b;
}

std::vector<float> random_floats(std::size_t n, double scale, std::uint64_t seed)
{
    random::splitmix64 g(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(random::uniform(g, -scale, scale));
    return v;
}

// The model's definition, spelled out in double precision.
double reference_loss(const wide_deep_config& c, const std::vector<double>& p, const std::vector<double>& wide_rows,
                      const std::vector<double>& deep_rows, const example_batch& b)
{
    const std::size_t dim = static_cast<std::size_t>(c.embedding_dim);
    std::vector<int> widths{c.fields * c.embedding_dim + c.numeric};
    widths.insert(widths.end(), c.hidden.begin(), c.hidden.end());
    double loss = 0;
    for (int r = 0; r < b.rows; ++r) {
        std::size_t at = static_cast<std::size_t>(std::max(c.numeric, 1)) + 1;  // after wide/weights and wide/bias
        double z = p[static_cast<std::size_t>(std::max(c.numeric, 1))];
        std::vector<double> x;
        std::vector<std::vector<double>> e(static_cast<std::size_t>(c.fields), std::vector<double>(dim, 0.0));
        for (int f = 0; f < c.fields; ++f) {
            const std::size_t bag = static_cast<std::size_t>(r * c.fields + f);
            const auto first = b.bag_begin[bag], last = b.bag_begin[bag + 1];
            const double w = c.combiner == bag_combiner::mean && last > first ? 1.0 / (last - first) : 1.0;
            for (auto i = first; i < last; ++i) {
                z += w * wide_rows[b.places[i]];
                for (std::size_t d = 0; d < dim; ++d)
                    e[static_cast<std::size_t>(f)][d] += w * deep_rows[b.places[i] * dim + d];
            }
            x.insert(x.end(), e[static_cast<std::size_t>(f)].begin(), e[static_cast<std::size_t>(f)].end());
        }
        for (int j = 0; j < c.numeric; ++j) {
            const double v = b.features[static_cast<std::size_t>(r * c.numeric + j)];
            z += p[static_cast<std::size_t>(j)] * v;
            x.push_back(v);
        }
        if (c.fm)
            for (int f = 0; f < c.fields; ++f)
                for (int g = f + 1; g < c.fields; ++g)
                    for (std::size_t d = 0; d < dim; ++d)
                        z += e[static_cast<std::size_t>(f)][d] * e[static_cast<std::size_t>(g)][d];
        for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
            const std::size_t in = static_cast<std::size_t>(widths[l]), out = static_cast<std::size_t>(widths[l + 1]);
            std::vector<double> y(out);
            for (std::size_t o = 0; o < out; ++o) {
                double s = p[at + in * out + o];
                for (std::size_t i = 0; i < in; ++i) s += x[i] * p[at + i * out + o];
                y[o] = std::max(s, 0.0);
            }
            at += in * out + out;
            x = y;
        }
        double deep = p[at + x.size()];
        for (std::size_t i = 0; i < x.size(); ++i) deep += x[i] * p[at + i];
        z += deep;
        const double y = b.labels[static_cast<std::size_t>(r)];
        const double prob = 1 / (1 + std::exp(-z));
        loss -= y * std::log(prob) + (1 - y) * std::log(1 - prob);
    }
    return loss / b.rows;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

struct case_config {
    bool fm;
    bag_combiner combiner;
    int rows;
};
std::ostream& operator<<(std::ostream& os, const case_config& c)
{
    return os << (c.fm ? "deepfm" : "wide-deep") << (c.combiner == bag_combiner::sum ? " sum " : " mean ") << c.rows
              << " rows";
}

// The backend the trainer gives the model at --precision fp32 (one for the
// whole program: the models keep a pointer to it).
const std::unique_ptr<compute::backend>& cpu_fp32()
{
    static const auto be = compute::make_backend(compute::device_kind::cpu, compute::precision::fp32, 1);
    return be;
}

}  // namespace

BOOST_DATA_TEST_CASE(loss_and_every_gradient_match_the_reference,
                     bdata::make({case_config{false, bag_combiner::sum, 5}, case_config{true, bag_combiner::sum, 5},
                                  case_config{true, bag_combiner::mean, 4}, case_config{false, bag_combiner::mean, 1}}),
                     cc)
{
    wide_deep_config c;
    c.fields = 3;
    c.numeric = 2;
    c.embedding_dim = 4;
    c.hidden = {5, 3};
    c.combiner = cc.combiner;
    c.fm = cc.fm;
    c.max_batch = 8;
    auto m = make_wide_deep(c, cpu_fp32().get());
    BOOST_TEST(m->tables().size() == 2u);
    BOOST_TEST(m->tables()[0].dim == 1);
    BOOST_TEST(m->tables()[1].dim == 4);

    const std::size_t unique = 6;
    const auto b = make_batch(cc.rows, c.fields, c.numeric, unique, 17 + static_cast<std::uint64_t>(cc.rows));
    std::vector<float> params(m->num_params());
    m->initialize(params, 3);
    // Biases and wide weights start at 0: give them values so they are tested.
    const auto extra = random_floats(params.size(), 0.3, 5);
    for (std::size_t i = 0; i < params.size(); ++i) params[i] += extra[i];
    auto wide = random_floats(unique, 0.5, 7), deep = random_floats(unique * 4, 0.5, 8);
    const std::vector<std::span<const float>> rows{wide, deep};

    std::vector<float> grads(params.size(), 9.0f), wide_g(unique, 9.0f), deep_g(unique * 4, 9.0f);
    const std::vector<std::span<float>> row_grads{wide_g, deep_g};
    const auto r = m->compute_gradients(params, b.view(), rows, grads, row_grads);

    auto p = to_double(params), w = to_double(wide), d = to_double(deep);
    const double ref = reference_loss(c, p, w, d, b);
    BOOST_TEST(r.loss == ref, boost::test_tools::tolerance(1e-5));

    // Central differences of the reference, in double precision.
    const double h = 1e-5;
    auto check = [&](std::vector<double>& v, const std::vector<float>& g, const char* what) {
        for (std::size_t i = 0; i < v.size(); ++i) {
            const double keep = v[i];
            v[i] = keep + h;
            const double up = reference_loss(c, p, w, d, b);
            v[i] = keep - h;
            const double down = reference_loss(c, p, w, d, b);
            v[i] = keep;
            const double numeric = (up - down) / (2 * h);
            BOOST_TEST(std::abs(g[i] - numeric) <= 1e-4 + 1e-3 * std::abs(numeric),
                       what << "[" << i << "]: " << g[i] << " vs " << numeric);
        }
    };
    check(p, grads, "dense");
    check(w, wide_g, "wide row");
    check(d, deep_g, "deep row");

    // predict gives the probabilities the loss was computed from.
    std::vector<float> prob(static_cast<std::size_t>(b.rows));
    m->predict(params, b.view(), rows, prob);
    double loss = 0;
    for (int i = 0; i < b.rows; ++i) {
        const double y = b.labels[static_cast<std::size_t>(i)];
        loss -=
            y * std::log(prob[static_cast<std::size_t>(i)]) + (1 - y) * std::log(1 - prob[static_cast<std::size_t>(i)]);
    }
    BOOST_TEST(loss / b.rows == ref, boost::test_tools::tolerance(1e-4));
}

// --precision bf16: the deep part's products round their operands to bf16
// (8-bit mantissa: a relative 2^-9 each) and accumulate in FP32.  A
// gradient passes through at most three products (forward, dz, dW or da),
// each adding at most 2 * 2^-9 of the magnitudes it sums; with K terms of
// either sign the sum can be smaller than its terms, so the bound is on
// the gradient's scale: 3 * 2 * 2^-9 * K * max|g| / sqrt(K) (random signs)
// with K the widest reduction (16 here), about 0.05 of the largest entry.
BOOST_TEST_DECORATOR(*boost::unit_test::precondition(pstrain::testing::bf16_here()))
BOOST_AUTO_TEST_CASE(a_bf16_backend_gives_the_fp32_gradients_within_bf16s_rounding)
{
    wide_deep_config c;
    c.fields = 3;
    c.numeric = 2;
    c.embedding_dim = 4;
    c.hidden = {16, 8};
    c.fm = true;
    c.max_batch = 8;
    const auto fp32 = compute::make_backend(compute::device_kind::cpu, compute::precision::fp32, 1);
    const auto bf16 = compute::make_backend(compute::device_kind::cpu, compute::precision::bf16, 1);
    auto m32 = make_wide_deep(c, fp32.get());
    auto m16 = make_wide_deep(c, bf16.get());
    const std::size_t unique = 6;
    const auto b = make_batch(8, c.fields, c.numeric, unique, 23);
    std::vector<float> params(m32->num_params());
    m32->initialize(params, 3);
    auto wide = random_floats(unique, 0.5, 7), deep = random_floats(unique * 4, 0.5, 8);
    const std::vector<std::span<const float>> rows{wide, deep};
    auto gradients = [&](ctr_model& m) {
        std::vector<float> g(params.size()), wg(unique), dg(unique * 4);
        const std::vector<std::span<float>> row_grads{wg, dg};
        const auto r = m.compute_gradients(params, b.view(), rows, g, row_grads);
        g.insert(g.end(), dg.begin(), dg.end());  // the deep rows' gradients come through da
        return std::pair(r.loss, g);
    };
    const auto [loss32, g32] = gradients(*m32);
    const auto [loss16, g16] = gradients(*m16);
    BOOST_TEST(loss16 == loss32, boost::test_tools::tolerance(0.01));
    double scale = 0;
    for (float g : g32) scale = std::max(scale, double(std::abs(g)));
    const double bound = 3 * 2 * std::ldexp(1.0, -9) * std::sqrt(16.0) * scale;
    double worst = 0;
    for (std::size_t i = 0; i < g32.size(); ++i) {
        worst = std::max(worst, double(std::abs(g16[i] - g32[i])));
        BOOST_TEST(std::abs(g16[i] - g32[i]) <= bound, "gradient " << i << ": bf16 " << g16[i] << ", fp32 " << g32[i]);
    }
    BOOST_TEST(worst > 0.0, "the bf16 backend's products are bf16's: some gradient must differ");
}

BOOST_AUTO_TEST_CASE(the_name_is_the_shape_key)
{
    wide_deep_config c;
    BOOST_TEST(make_wide_deep(c)->describe() == "wide-deep 26x16+13 128-64 sum");
    c.fm = true;
    c.embedding_dim = 8;
    c.combiner = bag_combiner::mean;
    BOOST_TEST(make_wide_deep(c)->describe() == "deepfm 26x8+13 128-64 mean");
}

BOOST_AUTO_TEST_CASE(bad_batches_and_configurations_are_refused)
{
    wide_deep_config c;
    c.fields = 2;
    c.numeric = 1;
    c.embedding_dim = 2;
    c.hidden = {3};
    c.max_batch = 4;
    auto m = make_wide_deep(c, cpu_fp32().get());
    std::vector<float> params(m->num_params()), grads(m->num_params());
    auto b = make_batch(5, 2, 1, 3, 1);
    std::vector<float> wide(3), deep(6), wg(3), dg(6);
    const std::vector<std::span<const float>> rows{wide, deep};
    const std::vector<std::span<float>> row_grads{wg, dg};
    BOOST_CHECK_EXCEPTION(m->compute_gradients(params, b.view(), rows, grads, row_grads), error, [](const error& e) {
        return std::string(e.what()) == "wide-deep: a batch of 5 examples where the model holds 1 to 4";
    });
    BOOST_CHECK_EXCEPTION(
        make_wide_deep(c)->compute_gradients(params, make_batch(2, 2, 1, 3, 1).view(), rows, grads, row_grads), error,
        [](const error& e) {
            return std::string(e.what()) == "wide-deep: a model made without a backend is a shape: it computes nothing";
        });
    b = make_batch(2, 2, 1, 3, 1);
    b.places.push_back(0);  // more ids than the bags say
    BOOST_CHECK_THROW(m->compute_gradients(params, b.view(), rows, grads, row_grads), error);
    b = make_batch(2, 2, 1, 3, 1);
    const std::vector<std::span<const float>> short_rows{wide, std::span<const float>(deep).first(4)};
    BOOST_CHECK_THROW(m->compute_gradients(params, b.view(), short_rows, grads, row_grads), error);
    BOOST_CHECK_THROW(parse_bag_combiner("max"), error);
    c.embedding_dim = 0;
    BOOST_CHECK_EXCEPTION(make_wide_deep(c), error, [](const error& e) {
        return std::string(e.what()) == "wide-deep: --embedding-dim 0: give 1 to 1024";
    });
}

// A planted problem: clicks from a hidden teacher over a few keys; plain
// SGD on the model's gradients (dense and rows) brings the loss down.
BOOST_AUTO_TEST_CASE(learns_a_planted_teacher)
{
    wide_deep_config c;
    c.fields = 4;
    c.numeric = 1;
    c.embedding_dim = 4;
    c.hidden = {8};
    c.fm = true;
    c.max_batch = 64;
    auto m = make_wide_deep(c, cpu_fp32().get());
    std::vector<float> params(m->num_params()), grads(m->num_params());
    m->initialize(params, 1);
    const std::size_t keys = 40;
    auto wide = random_floats(keys, 0.05, 2), deep = random_floats(keys * 4, 0.05, 3);
    const auto truth = random_floats(keys, 1.5, 4);
    random::splitmix64 g(9);
    auto draw = [&](int rows) {
        example_batch b;
        b.rows = rows;
        b.fields = 4;
        b.numeric = 1;
        b.unique = keys;
        for (int r = 0; r < rows; ++r) {
            double z = 0;
            for (int f = 0; f < 4; ++f) {
                const auto k = static_cast<std::uint32_t>(f * 10 + static_cast<int>(g() % 10));
                b.places.push_back(k);
                b.bag_begin.push_back(static_cast<std::uint32_t>(b.places.size()));
                z += truth[k];
            }
            b.features.push_back(0.0f);
            b.labels.push_back(random::uniform(g, 0, 1) < 1 / (1 + std::exp(-z)) ? 1.0f : 0.0f);
        }
        return b;
    };
    std::vector<float> wg(keys), dg(keys * 4);
    const std::vector<std::span<float>> row_grads{wg, dg};
    double first = 0, last = 0;
    for (int step = 0; step < 600; ++step) {
        const auto b = draw(64);
        const std::vector<std::span<const float>> rows{wide, deep};
        const auto r = m->compute_gradients(params, b.view(), rows, grads, row_grads);
        if (step < 50) first += r.loss / 50;
        if (step >= 550) last += r.loss / 50;
        for (std::size_t i = 0; i < params.size(); ++i) params[i] -= 0.5f * grads[i];
        for (std::size_t i = 0; i < keys; ++i) wide[i] -= 0.5f * wg[i];
        for (std::size_t i = 0; i < deep.size(); ++i) deep[i] -= 0.5f * dg[i];
    }
    BOOST_TEST(last < first - 0.05, "loss " << first << " -> " << last);
}
