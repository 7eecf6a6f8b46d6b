// Augmentation: random shifts padded with the background, random flips,
// seeded; flat rows refused.  Per-channel normalisation.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE augment
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/data/augment.hpp"

#include <cmath>
#include <vector>

using namespace pstrain;

namespace {

// Two 3x4 single-channel images with distinct pixel values.
data::dataset images(int channels = 1)
{
    data::dataset d;
    d.rows = 2;
    d.channels = channels;
    d.height = 3;
    d.width = 4;
    d.cols = std::size_t(channels) * 12;
    d.num_classes = 2;
    for (std::size_t i = 0; i < d.rows * d.cols; ++i) d.features.push_back(float(i + 1));
    d.labels = {0, 1};
    d.background.assign(channels, -0.5f);
    return d;
}

float at(const data::dataset& d, std::size_t row, int y, int x) { return d.features[row * d.cols + y * d.width + x]; }

// Which (dy, dx, mirror) turns image `row` of `from` into row 0 of `got`; false when none does.
bool explained(const data::dataset& from, std::size_t row, const data::dataset& got, int shift, bool flip)
{
    for (int dy = -shift; dy <= shift; ++dy)
        for (int dx = -shift; dx <= shift; ++dx)
            for (int m = 0; m <= (flip ? 1 : 0); ++m) {
                bool same = true;
                for (int y = 0; y < 3 && same; ++y)
                    for (int x = 0; x < 4 && same; ++x) {
                        const int sy = y - dy, sx0 = x - dx, sx = m ? 3 - sx0 : sx0;
                        const float want = sy >= 0 && sy < 3 && sx0 >= 0 && sx0 < 4 ? at(from, row, sy, sx) : -0.5f;
                        same = at(got, 0, y, x) == want;
                    }
                if (same) return true;
            }
    return false;
}

}  // namespace

BOOST_AUTO_TEST_CASE(shifts_and_flips_are_seeded_and_padded_with_the_background)
{
    auto d = images();
    data::augmenter a({1, true}, d, 5), b({1, true}, d, 5), c({1, true}, d, 6);
    data::dataset x, y, z;
    std::vector<std::uint32_t> rows{1};
    int changed = 0, differs = 0;
    for (int i = 0; i < 50; ++i) {
        a.make_batch(d, rows, x);
        b.make_batch(d, rows, y);
        c.make_batch(d, rows, z);
        BOOST_TEST_REQUIRE(explained(d, 1, x, 1, true));
        BOOST_TEST_REQUIRE((x.features == y.features), "the same seed gives the same batches");
        BOOST_TEST(x.labels[0] == 1);
        changed += x.features != std::vector<float>(d.features.begin() + 12, d.features.end());
        differs += x.features != z.features;
    }
    BOOST_TEST(changed > 30);
    BOOST_TEST(differs > 30, "another seed gives other batches");
}

BOOST_AUTO_TEST_CASE(a_run_resumed_after_n_batches_draws_what_the_whole_run_drew_next)
{
    auto d = images();
    data::augmenter whole({1, true}, d, 5), resumed({1, true}, d, 5);
    std::vector<std::uint32_t> rows{0, 1};
    std::vector<std::vector<float>> drawn;
    data::dataset x;
    for (int i = 0; i < 8; ++i) {
        whole.make_batch(d, rows, x);
        drawn.push_back(x.features);
    }
    resumed.resume_after(5);
    for (int i = 5; i < 8; ++i) {
        resumed.make_batch(d, rows, x);
        BOOST_TEST((x.features == drawn[std::size_t(i)]), "batch " << i + 1);
    }
    // And back: a rollback rewinds it.
    resumed.resume_after(2);
    resumed.make_batch(d, rows, x);
    BOOST_TEST((x.features == drawn[2]));
    BOOST_TEST((drawn[2] != drawn[5]), "batches differ, so the comparisons above can fail");
}

BOOST_AUTO_TEST_CASE(flip_alone_mirrors_or_keeps)
{
    auto d = images();
    data::augmenter a({0, true}, d, 1);
    data::dataset x;
    std::vector<std::uint32_t> rows{0};
    int mirrored = 0;
    for (int i = 0; i < 40; ++i) {
        a.make_batch(d, rows, x);
        BOOST_TEST_REQUIRE(explained(d, 0, x, 0, true));
        mirrored += at(x, 0, 0, 0) == at(d, 0, 0, 3);
    }
    BOOST_TEST(mirrored > 5);
    BOOST_TEST(mirrored < 35);
}

BOOST_AUTO_TEST_CASE(every_channel_moves_together)
{
    auto d = images(2);
    d.background = {-1.0f, -2.0f};
    data::augmenter a({2, false}, d, 3);
    data::dataset x;
    std::vector<std::uint32_t> rows{0};
    for (int i = 0; i < 20; ++i) {
        a.make_batch(d, rows, x);
        // Channel 1 is channel 0 plus 12 wherever both come from the image.
        for (int p = 0; p < 12; ++p) {
            const float c0 = x.features[p], c1 = x.features[12 + p];
            if (c0 == -1.0f) BOOST_TEST_REQUIRE(c1 == -2.0f);
            else BOOST_TEST_REQUIRE(c1 == c0 + 12.0f);
        }
    }
}

BOOST_AUTO_TEST_CASE(flat_rows_and_large_shifts_are_refused)
{
    auto d = images();
    d.channels = d.height = d.width = 0;
    BOOST_CHECK_EXCEPTION(data::augmenter({1, false}, d, 1), error, [](const error& e) {
        return std::string(e.what()) ==
               "--augment-shift and --augment-flip need images (IDX files): the data are flat rows";
    });
    BOOST_CHECK_NO_THROW(data::augmenter({0, false}, d, 1));
    auto img = images();
    BOOST_CHECK_EXCEPTION(data::augmenter({3, false}, img, 1), error, [](const error& e) {
        return std::string(e.what()) ==
               "--augment-shift 3: the images are 3x4: give fewer pixels than the image's side";
    });
}

BOOST_AUTO_TEST_CASE(per_channel_normalisation_standardises_each_channel)
{
    data::train_test t;
    t.train = images(2);
    t.test = images(2);
    data::standardize(t, data::normalization::per_channel);
    for (int c = 0; c < 2; ++c) {
        double sum = 0, sq = 0;
        for (std::size_t r = 0; r < 2; ++r)
            for (int i = 0; i < 12; ++i) {
                const double v = t.train.features[r * 24 + c * 12 + i];
                sum += v;
                sq += v * v;
            }
        BOOST_TEST(std::fabs(sum / 24) < 1e-5);
        BOOST_TEST(sq / 24 == 1.0, boost::test_tools::tolerance(1e-4));
    }
    BOOST_TEST_REQUIRE(t.train.background.size() == 2u);
    BOOST_TEST(t.train.background[0] != t.train.background[1]);
    // Global: one mean and scale, the background the same for both channels.
    data::train_test g;
    g.train = images(2);
    g.test = images(2);
    data::standardize(g);
    BOOST_TEST(g.train.background[0] == g.train.background[1]);
}
