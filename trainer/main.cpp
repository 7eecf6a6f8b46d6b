// pstrain: the trainer.  One binary for the parameter server and the worker.
#include "common/error.hpp"
#include "common/log.hpp"
#include "trainer/bootstrap/job.hpp"
#include "trainer/distributed.hpp"
#include "trainer/options.hpp"
#include "trainer/standalone.hpp"

#include <exception>

int main(int argc, char** argv)
{
    using namespace pstrain;
    int exit_code = 0;
    auto options = trainer::parse_command_line(argc, argv, exit_code);
    if (!options) return exit_code;
    try {
        log::set_level(log::parse_level(options->log_level));
        if (options->standalone) return trainer::run_standalone(*options);
        if (auto job = bootstrap::detect_job(*options)) return trainer::run_distributed(*options, std::move(*job));
        log::error("no role given: run under srun --mpi=pmix with --ps=N --workers=M, set TF_CONFIG, give "
                   "--ps-hosts/--worker-hosts/--job-name/--task-index, or use --standalone");
        return 2;
    } catch (const error& e) {
        log::error("{}", e.what());
    } catch (const std::bad_alloc&) {
        log::error("out of memory: lower --batch-size or --hidden-units, or ask Slurm for more memory (--mem)");
    } catch (const std::exception& e) {
        log::error("internal error: {}", e.what());
    }
    return 1;
}
