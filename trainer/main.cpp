// pstrain: the trainer.  One binary for the parameter server and the worker.
#include "pstrain/error.hpp"
#include "common/denormals.hpp"
#include "common/log.hpp"
#include "library/bootstrap/job.hpp"
#include "trainer/app/build_info.hpp"
#include "trainer/app/join_file.hpp"
#include "trainer/app/checkpoint_command.hpp"
#include "trainer/app/datagen.hpp"
#include "trainer/app/options.hpp"
#include "trainer/app/plot.hpp"
#include "trainer/app/selftest.hpp"
#include "trainer/app/serve.hpp"
#include "trainer/app/session.hpp"
#include "trainer/app/status.hpp"
#include "trainer/app/tasks.hpp"

#include "trainer/compute/backend.hpp"

#include <cstdlib>
#include <cstring>
#include <exception>

int main(int argc, char** argv)
{
    using namespace pstrain;
    // Before anything else: no thread, file or peer exists yet.
    compute::run_again_with_the_cpus_openblas_kernels(argv);
    try {
        log::format_from_environment();
    } catch (const error& e) {
        log::error("{}", e.what());
        return 2;
    }
    // early_init.cpp flushed denormals before the libraries started their
    // threads, unless told to keep them; here a wrong value is reported.
    if (const char* asked = std::getenv("PSTRAIN_DENORMALS"); asked && !parse_denormal_mode(asked)) {
        log::error("PSTRAIN_DENORMALS={}: use flush (the default: floats below 1.2e-38 computed as 0, as in "
                   "TensorFlow) or keep (IEEE 754 arithmetic, slower once values are that small)",
                   asked);
        return 2;
    }
    trainer::warn_if_the_plugin_differs();
    if (argc >= 2 && std::strcmp(argv[1], "plot") == 0) return trainer::plot_command(argc, argv);
    if (argc >= 2 && std::strcmp(argv[1], "status") == 0) return trainer::status_command(argc, argv);
    if (argc >= 2 && std::strcmp(argv[1], "checkpoint") == 0) return trainer::checkpoint_command(argc, argv);
    if (argc >= 2 && std::strcmp(argv[1], "datagen") == 0) return trainer::datagen_command(argc, argv);
    if (argc >= 2 && std::strcmp(argv[1], "serve") == 0) return trainer::serve_command(argc, argv);
    if (argc >= 2 && std::strcmp(argv[1], "selftest") == 0) return trainer::selftest_command(argc, argv);
    int exit_code = 0;
    auto options = trainer::parse_command_line(argc, argv, exit_code);
    if (!options) return exit_code;
    try {
        log::set_level(log::parse_level(options->log_level));
        if (options->summary) return trainer::print_summary(*options);
        if (options->standalone) return trainer::run_standalone(*options);
        if (!options->join.empty()) trainer::apply_join_file(*options);
        if (auto job = bootstrap::detect_job(
                {options->ps_hosts, options->worker_hosts, options->job_name, options->task_index}))
            return trainer::run_distributed(*options, std::move(*job));
        log::error("no role given: run under srun --mpi=pmix with --ps=N --workers=M, set TF_CONFIG, give "
                   "--ps-hosts/--worker-hosts/--job-name/--task-index, or use --standalone");
        return 2;
    } catch (const bootstrap::stopped_by_peer& e) {
        // Another task reported the error: one line pointing at it.
        log::write(log::level::info, e.what());
    } catch (const error& e) {
        log::error("{}", e.what());
    } catch (const std::bad_alloc&) {
        log::error("out of memory: lower --batch-size or the model's size, or ask Slurm for more memory (--mem)");
    } catch (const std::exception& e) {
        log::error("internal error: {}", e.what());
    }
    return 1;
}
