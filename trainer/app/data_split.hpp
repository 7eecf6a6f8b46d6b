// The split of the training set among the workers.  At the start (and
// when a sync job's data goes back with the model after a lost PS) every
// worker takes its shard of the job's own split from the first batch of
// the seed's order.  With --elastic the workers that ps 0 has not lost
// share it: when their number changes (ps 0's replies say how many, and
// this worker's rank among them), each takes its shard of the new split
// from its next batch on (every live worker reads the same figures), so a
// lost one's examples are trained on again, and a worker taken back gets a
// shard of its own.  Without --elastic the split stays; the change is
// still seen, for the chief's record of the live workers.
//
// Used by the training loop (training_loop.cpp) on its thread only: the
// dense models' batches come from sampler(); a click-through model's
// reader (ctr_work) is re-split with it.
#pragma once

#include "pstrain/client.hpp"
#include "trainer/app/options.hpp"
#include "trainer/data/sampler.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace pstrain::trainer {

class ctr_work;

class data_split {
public:
    // Worker `index` of the `num_workers` the job starts with, of room for
    // `slots`; `rows` examples in the training set (a dense model's).
    data_split(const train_options& o, std::size_t rows, int num_workers, int index, int slots);

    // The job's own split, from the first batch of the seed's order (a
    // dense model's sampler; the live workers: the job's).
    void from_the_start();
    // A dense model's batches (from_the_start made it).
    bool dense() const { return sampler_.has_value(); }
    data::sampler& sampler() { return *sampler_; }

    // ps 0's live workers, as its last reply says ({0, 0}: none said yet).
    // True when they changed; with --elastic every worker then re-splits
    // (the sampler, and `ctr` when not null) and logs its new shard.
    bool follow(ps::client::membership live, std::uint64_t global_step, ctr_work* ctr);
    // The live workers as last seen (at the start: the job's workers).
    ps::client::membership live() const { return live_; }

private:
    const train_options& o_;
    std::size_t rows_;
    int num_workers_, index_, slots_;
    std::optional<data::sampler> sampler_;
    ps::client::membership live_;
};

}  // namespace pstrain::trainer
