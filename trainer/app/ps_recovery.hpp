// --ps-spares: a worker's recovery from a lost PS.  When a call to the PS
// tasks throws lost_ps, a spare takes the lost PS's place: the chief
// chooses the newest checkpoint and asks the spare to restore the lost
// shard from it (sync: every other shard goes back to it too, so the
// model is one step's; async: only the lost shard's updates since are
// lost); every other worker waits for the spare's word.  Then everyone
// pulls and goes on; in sync training the data goes back with the model.
// The first step after it logs how long the job stood.
//
// Used by the training loop (training_loop.cpp) on its thread only:
// replace() where a step threw lost_ps, went_on() after every step.  The
// rules it applies are the pure functions below.
#pragma once

#include "pstrain/client.hpp"
#include "trainer/app/checkpoint_schedule.hpp"
#include "trainer/app/options.hpp"
#include "trainer/app/report.hpp"
#include "trainer/app/watchdog.hpp"
#include "trainer/checkpoint/checkpoint.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace pstrain::trainer {

// The chief's checkpoint to restore lost ps `lost` from, at global step
// `step`: the newest complete one in `dir`; throws pstrain::error naming
// the loss when there is none yet or it cannot be read.
checkpoint::manifest checkpoint_to_restore(const std::string& dir, std::size_t lost, std::uint64_t step);

// Async: the lost shard's updates since the checkpoint of step
// `restored`, at least (the lost PS's step in its last reply was
// `last_step`).  Sync: none (the steps since are trained again).
std::uint64_t lost_updates(bool sync, std::uint64_t last_step, std::uint64_t restored);

// The chief's line once the spares stand in for `replaced`, restored from
// `dir`'s checkpoint of step `restored`; `at`: the global step then.
std::string restored_line(const std::vector<std::size_t>& replaced, const std::string& dir, std::uint64_t restored,
                          std::uint64_t at, bool sync, std::uint64_t lost_updates, std::uint64_t last_step);

class ps_recovery {
public:
    // What the recovery asks of the rest of the loop.
    struct loop_parts {
        std::function<void()> abandon;  // the click-through rows' updates in flight (the calls are abandoned)
        // Sync: the data goes back with the model to the restored step's
        // (as a requeued job's would, so the steps trained again see the
        // batches they saw).
        std::function<void(std::uint64_t step)> data_back_to;
    };

    // `chief`: the chief's client (client's own), null on other workers.
    ps_recovery(const train_options& o, ps::client& client, ps::chief_client* chief, progress_meter& meter,
                loop_parts parts);

    // A spare takes the place of the PS that `e` names; the client pulls
    // the values after it.  The chief's `schedule` learns the restored
    // checkpoint and its `report` goes back with the global step.  Throws
    // pstrain::error (or peer_error) when the job cannot go on.
    void replace(const ps::lost_ps& e, checkpoint_schedule& schedule, reporter* report);
    // After a step: the first one after a replacement logs how long the job
    // stood (the chief also records a "ps_replaced" event in `report`).
    void went_on(reporter* report);

private:
    // The chief: restores the newest checkpoint; returns it and its name.
    std::pair<std::uint64_t, std::string> restore(const ps::lost_ps& e, checkpoint_schedule& schedule);

    const train_options& o_;
    ps::client& client_;
    ps::chief_client* chief_;
    progress_meter& meter_;
    loop_parts parts_;
    std::optional<std::chrono::steady_clock::time_point> lost_at_;  // when the PS being replaced was lost
    std::size_t lost_ = 0;                                          // and which
    std::uint64_t rolled_back_from_ = 0, lost_updates_ = 0;         // the chief's: the step then, async's lost updates
};

}  // namespace pstrain::trainer
