#include "trainer/app/data_split.hpp"

#include "common/log.hpp"
#include "trainer/app/ctr_work.hpp"

#include <utility>

namespace pstrain::trainer {

data_split::data_split(const train_options& o, std::size_t rows, int num_workers, int index, int slots)
    : o_(o), rows_(rows), num_workers_(num_workers), index_(index),
      slots_(slots), live_{static_cast<std::uint32_t>(num_workers), static_cast<std::uint32_t>(index)}
{}

void data_split::from_the_start()
{
    sampler_.emplace(rows_, num_workers_, index_, o_.seed, o_.sample_with_replacement);
    live_ = {static_cast<std::uint32_t>(num_workers_), static_cast<std::uint32_t>(index_)};
}

bool data_split::follow(ps::client::membership live, std::uint64_t global_step, ctr_work* ctr)
{
    if (live.live == 0 || live == live_) return false;
    const auto was = std::exchange(live_, live).live;
    if (o_.elastic) {
        if (sampler_) sampler_->reshard(static_cast<int>(live.live), static_cast<int>(live.rank));
        if (ctr) ctr->reshard(static_cast<int>(live.live), static_cast<int>(live.rank));
        log::info("data: re-split among the {} live workers of {} at global step {} (was {}): this worker "
                  "trains on shard {} of {}",
                  live.live, slots_, global_step, was, live.rank, live.live);
    }
    return true;
}

}  // namespace pstrain::trainer
