// `pstrain datagen ctr [options] OUT`: synthetic click-through data in
// Criteo's TSV format (data::generate_ctr), and one JSON line saying what
// was written and the best AUC a model can reach on it.
#pragma once

namespace pstrain::trainer {

// `pstrain datagen ctr [options] OUT` (argv[1] is "datagen"): the exit status.
int datagen_command(int argc, char** argv);

}  // namespace pstrain::trainer
