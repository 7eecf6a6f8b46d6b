// What every training process sets up from the options: the compute
// backend, the data and the model (and --summary's description of the
// model, and the PS optimizer the options name).
#pragma once

#include "trainer/compute/backend.hpp"
#include "trainer/data/dataset.hpp"
#include "trainer/model/ctr_model.hpp"
#include "trainer/model/model.hpp"
#include "trainer/app/options.hpp"
#include "pstrain/optimizer.hpp"
#include "pstrain/settings.hpp"

#include <memory>

namespace pstrain::trainer {

struct session {
    std::unique_ptr<compute::backend> backend;
    data::train_test data;                  // dense models: the examples in memory
    std::unique_ptr<model::model> net;      // a dense model, or
    std::unique_ptr<model::ctr_model> ctr;  // a click-through model (its data are streamed: ctr_work.hpp)

    // Whichever it is: its tensors, name and initial values.
    const model::tensor_model& shape() const;
};

// Loads the data and builds the model on the chosen device; `worker`
// (the worker's index) gives each worker its own dropout masks.  Throws
// pstrain::error with one clear line.
session open_session(const train_options& o, int worker = 0);

// --summary: the model's layers, output shapes and parameter counts on
// stdout (reads the data for its shape).  Returns the exit status.
int print_summary(const train_options& o);

ps::optimizer_config optimizer_from(const train_options& o);

// How the job trains, from its flags: the one value the chief's client
// sends and a PS task started with its own flags checks it against.
ps::training_settings training_settings_for(const train_options& o);

}  // namespace pstrain::trainer
