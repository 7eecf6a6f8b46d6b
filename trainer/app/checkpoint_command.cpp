#include "trainer/app/checkpoint_command.hpp"

#include "common/log.hpp"
#include "trainer/app/options.hpp"
#include "trainer/checkpoint/inspect.hpp"

#include <string>

#include <CLI/CLI.hpp>

namespace pstrain::trainer {

int checkpoint_command(int argc, char** argv)
{
    CLI::App app{"pstrain checkpoint: look at the checkpoints of a --checkpoint-dir", "pstrain checkpoint"};
    app.require_subcommand(1);
    std::string dir;
    auto* inspect = app.add_subcommand("inspect", "list the checkpoints: global step, shards, completeness, checksums");
    inspect->add_option("dir", dir, "the --checkpoint-dir of a job")->required();
    if (auto exit_status = parse_tool_command(app, argc, argv, "pstrain checkpoint")) return *exit_status;
    log::set_prefix("pstrain checkpoint");
    return checkpoint::inspect(dir);
}

}  // namespace pstrain::trainer
