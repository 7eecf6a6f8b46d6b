#include "trainer/app/datagen.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "trainer/app/options.hpp"
#include "trainer/data/ctr_generator.hpp"

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace pstrain::trainer {

int datagen_command(int argc, char** argv)
{
    CLI::App app{"pstrain datagen: make a synthetic data set", "pstrain datagen"};
    app.require_subcommand(1);
    data::ctr_generator_options o;
    std::string dir;
    auto* ctr =
        app.add_subcommand("ctr", "click-through data in Criteo's TSV format from a hidden factorisation machine, "
                                  "with the best reachable AUC in OUT/oracle.json");
    ctr->add_option("--samples", o.samples, "lines in all (train files and test.tsv)")
        ->check(CLI::Range(std::uint64_t(2), std::uint64_t(1) << 40))
        ->capture_default_str();
    ctr->add_option("--seed", o.seed, "the teacher and the draws")->capture_default_str();
    ctr->add_option("--test-fraction", o.test_fraction, "the last part, held out in test.tsv")
        ->check(CLI::Range(0.0001, 0.9999))
        ->capture_default_str();
    ctr->add_option("--lines-per-file", o.lines_per_file, "lines of each train-NNNNN.tsv")
        ->check(CLI::Range(std::uint64_t(1), std::uint64_t(1) << 40))
        ->capture_default_str();
    ctr->add_option("--zipf", o.zipf, "exponent of each field's id popularity")
        ->check(CLI::Range(0.0, 4.0))
        ->capture_default_str();
    ctr->add_option("out", dir, "the directory to write (made if missing)")->required();
    if (auto exit_status = parse_tool_command(app, argc, argv, "pstrain datagen")) return *exit_status;
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

}  // namespace pstrain::trainer
