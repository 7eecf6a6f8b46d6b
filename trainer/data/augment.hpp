// Random augmentation of training batches: each image shifted by up to
// `shift` pixels in each direction (padded with the background value) and,
// with `flip`, mirrored left to right with probability 1/2.  Seeded: the
// same seed and batches give the same images.
#pragma once

#include "trainer/data/dataset.hpp"

#include <cstdint>
#include <span>

namespace pstrain::data {

struct augment_options {
    int shift = 0;      // pixels, 0: none
    bool flip = false;  // random horizontal flips
    bool enabled() const { return shift > 0 || flip; }
};

class augmenter {
public:
    // Throws pstrain::error when `d` holds no images to shift or flip.
    augmenter(augment_options o, const dataset& d, std::uint64_t seed);

    // Writes the examples `rows` of `from`, augmented, into `batch` as its
    // rows 0..n-1 (its labels, shape and background from `from`).
    void make_batch(const dataset& from, std::span<const std::uint32_t> rows, dataset& batch);

    // The next batch is the (batches + 1)-th of this seed's, as for a run
    // that goes on from a checkpoint after `batches` batches (a resumed
    // job, a rollback): each batch's shifts and flips depend only on the
    // seed and its number.
    void resume_after(std::uint64_t batches) { batches_ = batches; }

private:
    augment_options o_;
    std::uint64_t seed_;
    std::uint64_t batches_ = 0;
};

}  // namespace pstrain::data
