#include "library/ps/membership.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "library/ps/dense_step.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace pstrain::ps {

membership::membership(transport& net, worker_links& links, staleness_bound& bound, const server_config& cfg,
                       const training_state& state)
    : net_(net), links_(links), bound_(bound), cfg_(cfg), state_(state)
{
    if (cfg_.started_workers == 0) return;
    // The slots of workers that join later: lost until one does.
    for (std::size_t i = cfg_.started_workers; i < links_.size(); ++i) {
        links_[i].lost = true;
        bound_.lost(i);
    }
}

void membership::configure()
{
    const auto& t = cfg_.training;
    bound_.set_bound(t.sync ? unbounded_staleness : t.max_staleness);
    // Elastic: no more than the live workers (the room for workers that
    // join later has none yet).
    replicas_ = t.elastic ? std::min(replicas_wanted(), live()) : replicas_wanted();
}

int membership::replicas_wanted() const
{
    const int asked = cfg_.training.replicas_to_aggregate;
    return asked > 0 ? asked : static_cast<int>(links_.size());
}

std::string membership::pace_words() const
{
    if (!cfg_.training.sync) return bound_words();
    const bool elastic = cfg_.training.elastic;
    return fmt::format(
        " aggregating {} of {} workers{}{}", replicas_, live(),
        elastic ? " (elastic: fewer when workers are lost)" : "",
        live() < static_cast<int>(links_.size()) && elastic ? fmt::format(", room for {} workers", links_.size()) : "");
}

// Worker i is the first process in a slot that had none at the start
// (server_config::started_workers).
bool membership::new_worker(std::size_t i) const
{
    return cfg_.started_workers > 0 && i >= cfg_.started_workers && net_.reconnections(i) == 1;
}

void membership::back(std::size_t i)
{
    links_.renew(i);
    links_[i].rejoining = true;
    if (new_worker(i))
        log::info("{} is connected: a new worker in room the job kept for one, at global step {}", net_.peer_name(i),
                  state_.step);
    else log::info("{} is back: a new process took its place at global step {}", net_.peer_name(i), state_.step);
}

bool membership::admit(std::size_t i)
{
    auto& p = links_[i];
    if (!p.rejoining || cfg_.training.elastic) return true;
    p.rejoining = false;
    links_.refuse(i, wire::refusal_of(wire::refusal_code::not_elastic),
                  fmt::format("refused the hello of {}, a new process in place of the lost one: this job is "
                              "not elastic (start it with --elastic to take workers back)",
                              net_.peer_name(i)));
    p.lost = true;  // as it was: this PS goes on without it
    return false;
}

void membership::welcomed(std::size_t i)
{
    if (!std::exchange(links_[i].rejoining, false)) return;
    bound_.back(i);
    const char* joined = new_worker(i) ? "joined" : "joined again";
    if (!cfg_.training.sync) return log::info("{} {} at global step {}", net_.peer_name(i), joined, state_.step);
    const auto [was, from] = aggregate_the_live_workers();
    log::info("{} {}: elastic sync training aggregates {} gradients per step from global step {} (was {})",
              net_.peer_name(i), joined, replicas_, from, was);
}

// Elastic sync: a step aggregates what the settings ask for, or the live
// workers' gradients when fewer are alive; a step that has that many
// already is applied now.  Returns the count it replaces and the global
// step from which the new one counts (before that step's update).
std::pair<int, std::uint64_t> membership::aggregate_the_live_workers()
{
    const std::uint64_t from = state_.step;
    const int was = std::exchange(replicas_, std::min(replicas_wanted(), live()));
    if (dense_) dense_->set_replicas(replicas_);
    return {was, from};
}

void membership::went(std::size_t i)
{
    links_[i].lost = true;
    links_[i].rejoining = false;
    bound_.lost(i);
}

// It goes as a lost worker of an elastic job does, whatever the settings,
// for it ended its part of the training: a sync step from now on
// aggregates the live workers' gradients when fewer are left than it asks
// for.  Its connection's end is not a loss.
void membership::left(std::size_t i)
{
    went(i);
    const auto who = net_.peer_name(i);
    if (state_.done) return;
    if (cfg_.training.sync && live() < replicas_) {
        const auto [was, from] = aggregate_the_live_workers();
        log::info("{} left (its program ended): sync training aggregates {} gradients per step from global step "
                  "{} (was {})",
                  who, replicas_, from, was);
    } else {
        log::info("{} left (its program ended): going on with {} workers", who, live());
    }
    if (dense_) dense_->release_held();
}

void membership::lost(std::size_t i)
{
    auto& p = links_[i];
    went(i);
    const auto why = net_.failed(i) ? net_.failure(i) : p.recv.failure();
    const auto who = net_.peer_name(i);
    const auto& t = cfg_.training;
    if (state_.done) {
        if (i == 0 && !state_.shutdown)
            throw peer_error(who, fmt::format("lost {} before it ended the job ({})", who, why));
        // Workers leave once a reply told them training is done; one
        // that went before its reply is named, however late it is found.
        if (!p.told_done)
            log::warn("lost {} ({}) after training ended at global step {}, before its last reply", who, why,
                      state_.step);
        return;
    }
    const int alive = live();
    if (t.sync && t.elastic && i != 0 && alive < replicas_) {
        const auto [was, from] = aggregate_the_live_workers();
        return log::warn("lost {} ({}): elastic sync training goes on, aggregating {} gradients per step from "
                         "global step {} (was {}); {} workers alive",
                         who, why, replicas_, from, was, live());
    }
    std::string fatal;
    if (i == 0)
        fatal = fmt::format("lost {} ({}): the chief initialises, evaluates and ends the job, training cannot go on",
                            who, why);
    else if (t.sync && alive < replicas_)
        fatal =
            fmt::format("lost {} ({}): sync training aggregates {} gradients per step and only {} workers are left; "
                        "use --replicas-to-aggregate {} to run with backup workers",
                        who, why, replicas_, alive, std::max<std::size_t>(1, links_.size() - 1));
    else if (alive == 0) fatal = fmt::format("lost {} ({}): no worker is left", who, why);
    if (fatal.empty()) {
        // In sync mode a gradient it gave to this step still counts; in
        // async mode it is no longer the slowest that others wait for.
        log::warn("lost {} ({}): going on with {} workers", who, why, alive);
        if (dense_) dense_->release_held();
        return;
    }
    links_.abort_all(i);
    throw peer_error(who, fatal);
}

}  // namespace pstrain::ps
