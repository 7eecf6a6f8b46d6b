#include "trainer/data/augment.hpp"

#include "pstrain/error.hpp"
#include "common/random.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pstrain::data {

augmenter::augmenter(augment_options o, const dataset& d, std::uint64_t seed) : o_(o), seed_(seed)
{
    if (o_.enabled() && (d.height <= 0 || d.width <= 0))
        throw error("--augment-shift and --augment-flip need images (IDX files): the data are flat rows");
    if (o_.enabled() && (o_.shift >= d.height || o_.shift >= d.width))
        throw error(fmt::format("--augment-shift {}: the images are {}x{}: give fewer pixels than the image's side",
                                o_.shift, d.height, d.width));
}

void augmenter::make_batch(const dataset& from, std::span<const std::uint32_t> rows, dataset& batch)
{
    const int c = std::max(from.channels, 1), h = from.height, w = from.width;
    batch.rows = rows.size();
    batch.cols = from.cols;
    batch.num_classes = from.num_classes;
    batch.channels = from.channels;
    batch.height = h;
    batch.width = w;
    batch.background = from.background;
    batch.features.resize(rows.size() * from.cols);
    batch.labels.resize(rows.size());
    // One stream per batch, so a batch's images do not depend on how many
    // numbers earlier batches drew.
    random::splitmix64 rng(seed_ ^ (0xa0761d6478bd642full * ++batches_));
    const int span = 2 * o_.shift + 1;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const std::uint64_t bits = rng();
        const int dy = o_.shift ? static_cast<int>(bits % span) - o_.shift : 0;
        const int dx = o_.shift ? static_cast<int>((bits >> 16) % span) - o_.shift : 0;
        const bool mirror = o_.flip && ((bits >> 63) & 1);
        const float* src = from.row(rows[i]);
        float* dst = batch.features.data() + i * from.cols;
        for (int ch = 0; ch < c; ++ch) {
            const float fill = ch < static_cast<int>(from.background.size()) ? from.background[ch] : 0.0f;
            const float* sp = src + std::size_t(ch) * h * w;
            float* dp = dst + std::size_t(ch) * h * w;
            for (int y = 0; y < h; ++y) {
                const int sy = y - dy;
                for (int x = 0; x < w; ++x) {
                    const int sx0 = x - dx;
                    const int sx = mirror ? w - 1 - sx0 : sx0;
                    dp[y * w + x] = sy >= 0 && sy < h && sx0 >= 0 && sx0 < w ? sp[sy * w + sx] : fill;
                }
            }
        }
        batch.labels[i] = from.labels[rows[i]];
    }
}

}  // namespace pstrain::data
