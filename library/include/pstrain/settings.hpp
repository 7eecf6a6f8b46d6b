// How the PS tasks train, as the chief says it: the optimizer of the dense
// parameters, sync or async updates, and the embedding tables.
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

struct training_settings {
    optimizer_config optimizer;
    bool sync = false;
    // Sync: gradients per step (0: every worker; fewer leaves backup workers).
    int replicas_to_aggregate = 0;
    std::vector<embedding_config> tables;
};

// The first difference between two settings in words ("the optimizer is
// adam here and sgd there"), or nothing when they agree.  `here` and
// `there` name the two sides.
std::optional<std::string> settings_difference(const training_settings& a, const training_settings& b,
                                               const std::string& here, const std::string& there);

}  // namespace pstrain::ps
