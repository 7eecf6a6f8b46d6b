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
    if (!sync_) return m.bucket ? apply_bucket_now(i, m, part, shared) : apply_now(i, m, part, shared);
    // Computed on older values, or a bucket this step has applied without
    // it (a worker that joined in the middle of the step): dropped.
    if (m.step != state_.step || applied_in_this_step(part)) return drop_stale(i, m, part, shared);
    contribute(i, m, part, shared);  // request_check refused a second push to this step before an answer
}

// Sync: a stale gradient is dropped, with its batch's row updates; it
// counts once per step, however many buckets it comes in.
void dense_step::drop_stale(std::size_t i, const wire::push& m, shard_range part, bool shared)
{
    auto& p = links_[i];
    if (log::current_level() >= log::level::debug)  // the name is made only then
        log::debug("a gradient of [{}, {}) from {} computed on the values of step {} dropped as stale at step {}",
                   part.begin, part.end, links_.name(i), m.step, state_.step);
    if (p.counted_step != m.step) {
        ++state_.stale;
        ++p.counters.stale;
        p.counted_step = m.step;
    }
    p.position = m.position;
    sparse_.drop_held(i);
    reply_values(i, part, shared, values_status::stale);
}

bool dense_step::applied_in_this_step(shard_range part) const
{
    if (covered_ == 0) return false;
    return std::none_of(pending_.begin(), pending_.end(), [&](const bucket& b) { return b.part == part; }) &&
           std::find(buckets_.begin(), buckets_.end(), part) != buckets_.end();
}

// Async: the gradient applies on arrival; its reply waits while the push
// puts the worker beyond the staleness bound.
void dense_step::apply_now(std::size_t i, const wire::push& m, shard_range part, bool shared)
{
    links_[i].position = m.position;
    if (!m.skip) {
        server_clock::scope timed(profile_, updating);
        shard_.apply(gradient(i, part, shared), part,
                     [&](const float* values, shard_range read) { return links_.read_by_a_reply(values, read); });
    }
    answer_async(i, part, shared, count_async_step(i, m.step, m.skip != 0));
}

// Async, a bucket of an overlapped step: applied on arrival as the step's
// one update, and answered at once; the bucket that completes the step's
// cover of the shard counts the step, and its reply is the one the
// staleness bound may hold.  A bucket that overlaps the step's (the worker
// began another step before this PS had the whole of its last one: a lost
// PS, or a program that pushes part of the vector) counts the step before
// as it is, and begins the next; should that put the worker beyond the
// bound, the next step's last reply is held (no reply of the step before
// is left to hold), and should it end training, the bucket is not applied.
void dense_step::apply_bucket_now(std::size_t i, const wire::push& m, shard_range part, bool shared)
{
    auto& s = async_step_of(i);
    const bool overlaps = std::any_of(s.parts.begin(), s.parts.end(),
                                      [&](const shard_range& r) { return r.begin < part.end && part.begin < r.end; });
    if (overlaps) {
        const bool hold = count_async_step(i, s.step, s.skip);
        s.restart();
        s.hold = hold;
        if (state_.done) return reply_values(i, part, shared, values_status::done);
    }
    if (s.parts.empty()) s.step = m.step;
    s.parts.push_back(part);
    s.covered += part.size();
    links_[i].position = m.position;
    if (m.skip) s.skip = true;
    else {
        server_clock::scope timed(profile_, updating);
        if (s.update == 0) s.update = shard_.shard().begin_update();
        shard_.apply(
            gradient(i, part, shared), part,
            [&](const float* values, shard_range read) { return links_.read_by_a_reply(values, read); }, s.update);
    }
    if (s.covered < shard_.range().size()) {
        reply_values(i, part, shared, values_status::ok);
        return release_held();
    }
    const bool hold = count_async_step(i, s.step, s.skip) || s.hold;
    s.restart();
    answer_async(i, part, shared, hold);
}

// Worker i's overlapped step here; a new process's starts empty.
async_step& dense_step::async_step_of(std::size_t i)
{
    if (async_steps_.size() < links_.size()) async_steps_.resize(links_.size());
    auto& s = async_steps_[i];
    if (s.process != links_[i].process) {
        s.restart();
        s.process = links_[i].process;
    }
    return s;
}

// Async: one gradient of worker i's (a push, or an overlapped step's
// buckets), computed on the values of `step`, applied or skipped; true
// when it puts the worker beyond the staleness bound.
bool dense_step::count_async_step(std::size_t i, std::uint64_t step, bool skipped)
{
    auto& c = links_[i].counters;
    const std::uint64_t staleness = state_.step > step ? state_.step - step : 0;
    ++c.gradients;
    c.staleness_sum += staleness;
    c.staleness_max = std::max(c.staleness_max, staleness);
    if (skipped) {
        ++state_.skipped;
        activity_.progressed();
    } else advance();
    return bound_ && bound_->pushed(i);
}

// Async: the reply to worker i's push that ended a step, held while the
// step puts the worker beyond the staleness bound (`hold`).
void dense_step::answer_async(std::size_t i, shard_range part, bool shared, bool hold)
{
    if (hold && !state_.done) bound_->hold(i, part, shared);
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
void dense_step::contribute(std::size_t i, const wire::push& m, shard_range part, bool shared)
{
    auto b = std::find_if(pending_.begin(), pending_.end(), [&](const bucket& x) { return x.part == part; });
    if (b == pending_.end()) b = open_bucket(part);
    const auto at = std::find_if(b->from.begin(), b->from.end(), [&](const auto& c) { return c.worker > i; });
    b->from.insert(at, contribution{i, shared, m.position, m.skip != 0});
    auto& p = links_[i];
    if (p.counted_step != m.step) {
        ++p.counters.gradients;
        p.counted_step = m.step;
    }
    complete_buckets();
}

// A new bucket of the step, in storage an earlier bucket left (a step
// allocates nothing once the first steps have).
std::vector<bucket>::iterator dense_step::open_bucket(shard_range part)
{
    bucket b{part, {}};
    if (!spare_lists_.empty()) {
        b.from = std::move(spare_lists_.back());
        spare_lists_.pop_back();
        b.from.clear();
    }
    buckets_.push_back(part);
    return pending_.insert(pending_.end(), std::move(b));
}

void dense_step::set_replicas(int replicas)
{
    replicas_ = replicas;
    complete_buckets();
}

// Every pending bucket with its gradients is applied and answered.
void dense_step::complete_buckets()
{
    for (std::size_t k = 0; k < pending_.size();) {
        if (!pending_[k].from.empty() && pending_[k].from.size() >= static_cast<std::size_t>(replicas_))
            complete_bucket(k);
        else ++k;
    }
}

// A bucket's gradients are in: their mean applied and answered; the
// bucket that covers the rest of the shard ends the step.  A bucket with
// a skip (a worker that skips pushes every bucket of its step with skip:
// request_check refuses a skip once a bucket is applied) makes the step
// skipped: none of its buckets is applied.
void dense_step::complete_bucket(std::size_t k)
{
    spare_lists_.push_back(std::move(applying_.from));
    applying_ = std::move(pending_[k]);
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(k));
    const auto& step = applying_.from;
    links_.drain_sends();
    if (std::any_of(step.begin(), step.end(), [](const contribution& c) { return c.skip; })) skipping_ = true;
    covered_ += applying_.part.size();
    const bool last = covered_ == shard_.range().size();
    if (!skipping_) {
        if (last) {
            workers_.clear();
            for (const auto& c : step) workers_.push_back(c.worker);
            sparse_.apply_held(workers_);
        }
        if (update_ == 0) update_ = shard_.shard().begin_update();
        apply_bucket(applying_);
    }
    if (!last) return answer(applying_, skipping_ ? state_.step.load() : state_.step + 1);
    const bool skipped = skipping_;
    end_step();
    if (skipped) return skip_step(step);
    advance();
    answer(applying_, state_.step);
}

// The step's buckets are forgotten: the next one starts empty.
void dense_step::end_step()
{
    buckets_.clear();
    covered_ = 0;
    update_ = 0;
    skipping_ = false;
}

void dense_step::answer_waiting()
{
    for (auto& b : pending_) {
        answer(b, state_.step);
        spare_lists_.push_back(std::move(b.from));
    }
    pending_.clear();
    end_step();
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
    answer(applying_, state_.step);
}

std::size_t dense_step::contributions() const
{
    std::size_t n = 0;
    for (const auto& b : pending_) n += b.from.size();
    return n;
}

bool dense_step::step_begun() const { return covered_ > 0 || !pending_.empty(); }

bool dense_step::step_applied() const { return covered_ > 0 && !skipping_; }

bool dense_step::contributed(std::size_t i) const
{
    return std::any_of(pending_.begin(), pending_.end(), [&](const bucket& b) {
        return std::any_of(b.from.begin(), b.from.end(), [&](const auto& c) { return c.worker == i; });
    });
}

// The mean of the bucket's gradients, its new values also written into the
// mapped buffers of the contributors on this host.
void dense_step::apply_bucket(const bucket& b)
{
    server_clock::scope timed(profile_, updating);
    grads_.clear();
    copies_.clear();
    for (const auto& c : b.from) {
        auto& w = links_[c.worker];
        w.position = c.position;
        grads_.push_back(gradient(c.worker, b.part, c.shared).data());
        if (c.shared) {
            copies_.push_back(w.mapped_params);
            w.values_written = true;
        }
    }
    shard_.apply_mean(b.part, grads_, 1.0f / static_cast<float>(b.from.size()), copies_, update_);
}

// Where worker i's gradient of `part` is: in its mapped buffer (same host)
// or in its receive slot.
std::span<const float> dense_step::gradient(std::size_t i, shard_range part, bool shared) const
{
    const auto& p = links_[i];
    return {shared ? p.mapped_grads + (part.begin - shard_.range().begin) : p.slot.data(), part.size()};
}

// Every live worker whose gradient is in the bucket gets its new values.
void dense_step::answer(const bucket& b, std::uint64_t step)
{
    for (const auto& c : b.from)
        if (!links_[c.worker].lost) reply_values(c.worker, b.part, c.shared, values_status::ok, step);
}

void dense_step::reply_values(std::size_t i, shard_range part, bool shared, values_status status,
                              std::optional<std::uint64_t> step)
{
    values_reply v;
    v.part = part;
    v.shared = shared;
    v.status = state_.status(status);
    v.step = step.value_or(state_.step);
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
