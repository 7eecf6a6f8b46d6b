// pstrain: the trainer.  One binary for the parameter server and the worker.
#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "library/bootstrap/job.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/data/ctr.hpp"
#include "trainer/app/options.hpp"
#include "trainer/app/plot.hpp"
#include "trainer/app/session.hpp"
#include "trainer/app/status.hpp"
#include "trainer/app/tasks.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstring>
#include <exception>

namespace {

// `pstrain checkpoint inspect DIR`
int checkpoint_command(int argc, char** argv)
{
    using namespace pstrain;
    CLI::App app{"pstrain checkpoint: look at the checkpoints of a --checkpoint-dir", "pstrain checkpoint"};
    app.require_subcommand(1);
    std::string dir;
    auto* inspect = app.add_subcommand("inspect", "list the checkpoints: global step, shards, completeness, checksums");
    inspect->add_option("dir", dir, "the --checkpoint-dir of a job")->required();
    if (auto exit_status = trainer::parse_tool_command(app, argc, argv, "pstrain checkpoint")) return *exit_status;
    log::set_prefix("pstrain checkpoint");
    return checkpoint::inspect(dir);
}

// `pstrain datagen ctr [options] OUT`
int datagen_command(int argc, char** argv)
{
    using namespace pstrain;
    CLI::App app{"pstrain datagen: make a synthetic data set", "pstrain datagen"};
    app.require_subcommand(1);
    data::ctr_generator_options o;
    std::string dir;
    auto* ctr = app.add_subcommand("ctr", "click-through data in Criteo's TSV format from a hidden factorisation machine, "
                                          "with the best reachable AUC in OUT/oracle.json");
    ctr->add_option("--samples", o.samples, "lines in all (train files and test.tsv)")
        ->check(CLI::Range(std::uint64_t(2), std::uint64_t(1) << 40))->capture_default_str();
    ctr->add_option("--seed", o.seed, "the teacher and the draws")->capture_default_str();
    ctr->add_option("--test-fraction", o.test_fraction, "the last part, held out in test.tsv")
        ->check(CLI::Range(0.0001, 0.9999))->capture_default_str();
    ctr->add_option("--lines-per-file", o.lines_per_file, "lines of each train-NNNNN.tsv")
        ->check(CLI::Range(std::uint64_t(1), std::uint64_t(1) << 40))->capture_default_str();
    ctr->add_option("--zipf", o.zipf, "exponent of each field's id popularity")->check(CLI::Range(0.0, 4.0))->capture_default_str();
    ctr->add_option("out", dir, "the directory to write (made if missing)")->required();
    if (auto exit_status = trainer::parse_tool_command(app, argc, argv, "pstrain datagen")) return *exit_status;
    log::set_prefix("pstrain datagen");
    try {
        const auto g = data::generate_ctr(dir, o);
        fmt::print("{{\"event\":\"datagen\",\"dir\":\"{}\",\"train_samples\":{},\"test_samples\":{},\"files\":{},"
                   "\"click_rate\":{:.4f},\"oracle_auc\":{:.4f},\"oracle_logloss\":{:.4f}}}\n",
                   dir, g.train_samples, g.test_samples, g.files.size(), g.click_rate, g.oracle_auc, g.oracle_logloss);
        return 0;
    } catch (const error& e) {
        log::error("{}", e.what());
        return 1;
    }
}

}  // namespace

int main(int argc, char** argv)
{
    using namespace pstrain;
    try {
        log::format_from_environment();
    } catch (const error& e) {
        log::error("{}", e.what());
        return 2;
    }
    if (argc >= 2 && std::strcmp(argv[1], "plot") == 0) return trainer::plot_command(argc, argv);
    if (argc >= 2 && std::strcmp(argv[1], "status") == 0) return trainer::status_command(argc, argv);
    if (argc >= 2 && std::strcmp(argv[1], "checkpoint") == 0) return checkpoint_command(argc, argv);
    if (argc >= 2 && std::strcmp(argv[1], "datagen") == 0) return datagen_command(argc, argv);
    int exit_code = 0;
    auto options = trainer::parse_command_line(argc, argv, exit_code);
    if (!options) return exit_code;
    try {
        log::set_level(log::parse_level(options->log_level));
        if (options->summary) return trainer::print_summary(*options);
        if (options->standalone) return trainer::run_standalone(*options);
        if (auto job = bootstrap::detect_job({options->ps_hosts, options->worker_hosts, options->job_name, options->task_index})) return trainer::run_distributed(*options, std::move(*job));
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
