#include "trainer/app/ps_recovery.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pstrain::trainer {

using clock = std::chrono::steady_clock;

checkpoint::manifest checkpoint_to_restore(const std::string& dir, std::size_t lost, std::uint64_t step)
{
    std::optional<checkpoint::manifest> m;
    try {
        m = checkpoint::find_latest(dir);
    } catch (const error& bad) {
        throw error(fmt::format("lost ps {} at global step {}, and no checkpoint can restore its shard: {}", lost, step,
                                bad.what()));
    }
    if (!m)
        throw error(fmt::format("lost ps {} at global step {}, before the first checkpoint: a spare restores "
                                "a lost shard from the newest checkpoint in {}, and there is none yet; "
                                "checkpoint sooner (--save-checkpoint-steps)",
                                lost, step, dir));
    return *m;
}

std::uint64_t lost_updates(bool sync, std::uint64_t last_step, std::uint64_t restored)
{
    return sync ? 0 : last_step - std::min(last_step, restored);
}

std::string restored_line(const std::vector<std::size_t>& replaced, const std::string& dir, std::uint64_t restored,
                          std::uint64_t at, bool sync, std::uint64_t lost_updates, std::uint64_t last_step)
{
    if (sync)
        return fmt::format("ps {} restored by a spare from {}/{}: every shard rolled back from global step {} to {}; "
                           "the {} steps since are trained again",
                           fmt::join(replaced, ", ps "), dir, checkpoint::manifest_name(restored), at, restored,
                           at - std::min(at, restored));
    return fmt::format("ps {} restored by a spare from {}/{} (global step {}): about {} updates of its shard "
                       "were lost (its step was {} in its last reply to the chief); the other shards keep theirs",
                       fmt::join(replaced, ", ps "), dir, checkpoint::manifest_name(restored), restored, lost_updates,
                       last_step);
}

ps_recovery::ps_recovery(const train_options& o, ps::client& client, ps::chief_client* chief, progress_meter& meter,
                         loop_parts parts)
    : o_(o), client_(client), chief_(chief), meter_(meter), parts_(std::move(parts))
{}

void ps_recovery::replace(const ps::lost_ps& e, checkpoint_schedule& schedule, reporter* report)
{
    lost_at_ = clock::now();
    lost_ = e.index();
    log::warn("{}: a spare takes its place ({} spare{} left before)", e.what(), client_.spares_left(),
              client_.spares_left() == 1 ? "" : "s");
    progress_meter::busy busy(meter_, "replacing a lost ps task with a spare");
    const auto at_loss = client_.global_step();
    std::pair<std::uint64_t, std::string> restored;  // the checkpoint's step and name (the chief's)
    if (parts_.abandon) parts_.abandon();
    if (!chief_) client_.replace_lost_ps(o_.sync_replicas);
    else restored = restore(e, schedule);
    client_.wait(client_.async_pull());
    if (o_.sync_replicas && parts_.data_back_to)
        if (const auto step = client_.restored_step()) parts_.data_back_to(*step);
    // The reports go back with the global step (sync; async when ps 0,
    // which counts the steps, was the one lost: from the checkpoint's
    // step, which the other workers' pushes may have passed since).
    if (chief_ && report && client_.global_step() < at_loss)
        report->went_back(static_cast<std::int64_t>(at_loss), static_cast<std::int64_t>(restored.first),
                          restored.second);
}

std::pair<std::uint64_t, std::string> ps_recovery::restore(const ps::lost_ps& e, checkpoint_schedule& schedule)
{
    const auto m = checkpoint_to_restore(o_.checkpoint_dir, e.index(), client_.global_step());
    const auto at = client_.global_step();
    const auto replaced = chief_->replace_lost_ps(m.global_step, o_.sync_replicas);
    schedule.saved(static_cast<std::int64_t>(m.global_step));
    lost_updates_ = lost_updates(o_.sync_replicas, e.last_step(), m.global_step);
    rolled_back_from_ = o_.sync_replicas ? at : 0;
    log::info("{}", restored_line(replaced, o_.checkpoint_dir, m.global_step, at, o_.sync_replicas, lost_updates_,
                                  e.last_step()));
    return {m.global_step, o_.checkpoint_dir + "/" + checkpoint::manifest_name(m.global_step)};
}

void ps_recovery::went_on(reporter* report)
{
    if (!lost_at_) return;
    const double seconds = std::chrono::duration<double>(clock::now() - *lost_at_).count();
    lost_at_.reset();
    log::info("training went on at global step {}, {:.2f}s after this worker saw ps {} lost", client_.global_step(),
              seconds, lost_);
    if (chief_ && report)
        report->record({{"event", "ps_replaced"},
                        {"ps", lost_},
                        {"global_step", client_.global_step()},
                        {"rolled_back_from", rolled_back_from_},
                        {"lost_updates", lost_updates_},
                        {"seconds", seconds}});
}

}  // namespace pstrain::trainer
