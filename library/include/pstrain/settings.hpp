// How the PS tasks train, as the chief says it: the optimizer of the dense
// parameters, sync or async updates (async: how far a worker may run
// ahead of the slowest), and the embedding tables.
//
// The chief's client sends them in its hello (client_config::settings).  A
// server started without settings of its own (server_config::
// settings_from_chief: a PS task of a program written in another language,
// `pstrain serve`) adopts them; a server started with its own checks that
// the chief's agree and refuses to start, naming the first difference,
// when they do not.
#pragma once

#include <pstrain/embedding.hpp>
#include <pstrain/optimizer.hpp>

#include <optional>
#include <string>
#include <vector>

namespace pstrain::ps {

// training_settings::max_staleness without a bound (any negative number means it).
inline constexpr int unbounded_staleness = -1;

struct training_settings {
    optimizer_config optimizer;
    bool sync = false;
    // Sync: gradients per step (0: every worker; fewer leaves backup workers).
    int replicas_to_aggregate = 0;
    // Async: the most pushes a worker may have applied beyond the slowest
    // live worker's before its reply is held (stale synchronous parallel;
    // 0: lock-step).  unbounded_staleness: never held.
    int max_staleness = unbounded_staleness;
    // Workers leave and come back: sync, a lost worker other than the chief
    // lowers the gradients per step to the workers left, instead of ending
    // the job when fewer than replicas_to_aggregate are left; sync and
    // async, a restarted worker takes a lost one's place.
    bool elastic = false;
    std::vector<embedding_config> tables;
};

// The first difference between two settings in words ("the optimizer is
// adam here and sgd there"), or nothing when they agree.  `here` and
// `there` name the two sides.
std::optional<std::string> settings_difference(const training_settings& a, const training_settings& b,
                                               const std::string& here, const std::string& there);

}  // namespace pstrain::ps
