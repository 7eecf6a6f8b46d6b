#include "library/ps/dense_step.hpp"

#include "common/log.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>

namespace pstrain::ps {

using values_status = wire::values_status;

dense_step::dense_step(worker_links& links, served_shard& shard, sparse_service& sparse, training_state& state,
                       server_clock& profile, activity_recorder& activity, const server_hooks& hooks, bool sync,
                       int replicas, staleness_bound* bound)
    : links_(links), shard_(shard), sparse_(sparse), state_(state), profile_(profile), activity_(activity),
      hooks_(hooks), sync_(sync), replicas_(replicas), bound_(bound)
{}

void dense_step::on_push(std::size_t i, const wire::push& m)
{
    const shard_range part{m.range_begin, m.range_end};
    const bool shared = m.in_shared_memory != 0;
    if (shared) links_.received_mapped(wire::dense_bytes(part));
    else wire::widen(links_[i].slot.data(), part.size(), links_.precision());  // FP32 from here on
    if (state_.done) return reply_values(i, part, shared, values_status::done);
    if (!sync_) return apply_now(i, m, part, shared);
    if (m.step != state_.step) {  // computed on older values: dropped, with its batch's row updates
        if (log::current_level() >= log::level::debug)  // the name is made only then
            log::debug("a gradient from {} computed on the values of step {} dropped as stale at step {}",
                       links_.name(i), m.step, state_.step);
        ++state_.stale;
        ++links_[i].counters.stale;
        links_[i].position = m.position;
        sparse_.drop_held(i);
        return reply_values(i, part, shared, values_status::stale);
    }
    contribute(i, m, shared);  // request_check refused a second push to this step
}

// Async: the gradient applies on arrival; its reply waits while the push
// puts the worker beyond the staleness bound.
void dense_step::apply_now(std::size_t i, const wire::push& m, shard_range part, bool shared)
{
    auto& p = links_[i];
    const std::uint64_t staleness = state_.step > m.step ? state_.step - m.step : 0;
    ++p.counters.gradients;
    p.counters.staleness_sum += staleness;
    p.counters.staleness_max = std::max(p.counters.staleness_max, staleness);
    p.position = m.position;
    if (m.skip) {
        ++state_.skipped;
        activity_.progressed();
    } else {
        {
            server_clock::scope timed(profile_, updating);
            shard_.apply(gradient(i, part, shared), part,
                         [&](const float* values) { return links_.read_by_a_reply(values); });
        }
        advance();
    }
    if (bound_ && bound_->pushed(i) && !state_.done) bound_->hold(i, part, shared);
    else reply_values(i, part, shared, values_status::ok);
    release_held();
}

void dense_step::release_held()
{
    if (!bound_) return;
    bound_->release(links_, state_.done, [this](std::size_t w, shard_range part, bool shared) {
        reply_values(w, part, shared, values_status::ok);
    });
}

// Sync: its position counts once the step is applied (a snapshot of the
// current step, which the chief's request may come in between, must not
// skip a batch whose gradient is not in it).
void dense_step::contribute(std::size_t i, const wire::push& m, bool shared)
{
    const auto at = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& c) { return c.worker > i; });
    waiting_.insert(at, contribution{i, shared, m.position, m.skip != 0});
    ++links_[i].counters.gradients;
    if (waiting_.size() < static_cast<std::size_t>(replicas_)) return;
    complete_step();
}

void dense_step::set_replicas(int replicas)
{
    replicas_ = replicas;
    if (!waiting_.empty() && waiting_.size() >= static_cast<std::size_t>(replicas_)) complete_step();
}

// The waiting gradients make the step: their mean applied, each answered.
void dense_step::complete_step()
{
    const auto& step = take_contributions();
    links_.drain_sends();
    workers_.clear();
    for (const auto& c : step) workers_.push_back(c.worker);
    if (std::any_of(step.begin(), step.end(), [](const contribution& c) { return c.skip; })) return skip_step(step);
    sparse_.apply_held(workers_);
    apply_step(step);
    advance();
    answer(step);
}

// A worker found inf or NaN in its gradient: nothing of the step is
// applied, its rows neither; the global step stays (the workers' next
// pushes make it), and every contributor gets the values as they are.
void dense_step::skip_step(const std::vector<contribution>& step)
{
    for (const auto& c : step) {
        sparse_.drop_held(c.worker);
        links_[c.worker].position = c.position;
    }
    ++state_.skipped;
    activity_.progressed();
    log::debug("step {} skipped: a worker found inf or NaN in its gradient", state_.step.load());
    answer(step);
}

// The current step's contributions, taken: the next step begins empty.
const std::vector<contribution>& dense_step::take_contributions()
{
    applying_.swap(waiting_);
    waiting_.clear();
    return applying_;
}

bool dense_step::contributed(std::size_t i) const
{
    return std::any_of(waiting_.begin(), waiting_.end(), [&](const auto& c) { return c.worker == i; });
}

// The mean of the step's gradients, its new values also written into the
// mapped buffers of the contributors on this host.
void dense_step::apply_step(const std::vector<contribution>& step)
{
    server_clock::scope timed(profile_, updating);
    grads_.clear();
    copies_.clear();
    const auto& range = shard_.range();
    for (const auto& c : step) {
        auto& w = links_[c.worker];
        w.position = c.position;
        grads_.push_back(gradient(c.worker, range, c.shared).data());
        if (c.shared) {
            copies_.push_back(w.mapped_params);
            w.values_written = true;
        }
    }
    shard_.apply_mean(grads_, 1.0f / static_cast<float>(step.size()), copies_);
}

// Where worker i's gradient of `part` is: in its mapped buffer (same host)
// or in its receive slot.
std::span<const float> dense_step::gradient(std::size_t i, shard_range part, bool shared) const
{
    const auto& p = links_[i];
    return {shared ? p.mapped_grads + (part.begin - shard_.range().begin) : p.slot.data(), part.size()};
}

// Every live worker whose gradient is in the step gets the new values.
void dense_step::answer(const std::vector<contribution>& step)
{
    for (const auto& c : step)
        if (!links_[c.worker].lost) reply_values(c.worker, shard_.range(), c.shared, values_status::ok);
}

void dense_step::reply_values(std::size_t i, shard_range part, bool shared, values_status status)
{
    values_reply v;
    v.part = part;
    v.shared = shared;
    v.status = state_.status(status);
    v.step = state_.step;
    v.restored = state_.restored;
    v.values = shard_.values(part);
    v.buffer = shard_.shard().values().data();
    v.range_begin = shard_.range().begin;
    links_.reply_values(i, v);
}

void dense_step::advance()
{
    ++state_.step;
    profile_.step_done();
    sparse_.step_done(state_.step);
    activity_.progressed();
    if (!state_.done && hooks_.step_completed && hooks_.step_completed(state_.step)) {
        state_.done = true;
        std::string dropped;
        if (sync_) dropped = fmt::format("{} stale gradients dropped", state_.stale.load());
        if (state_.skipped)
            dropped += fmt::format("{}{} {} skipped for inf or NaN", dropped.empty() ? "" : ", ", state_.skipped,
                                   sync_ ? (state_.skipped == 1 ? "step" : "steps")
                                         : (state_.skipped == 1 ? "gradient" : "gradients"));
        log::info("global step {} reached: training done{}", state_.step.load(),
                  dropped.empty() ? "" : fmt::format(" ({})", dropped));
    }
}

}  // namespace pstrain::ps
