#include "trainer/app/checkpoint_command.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "trainer/app/options.hpp"
#include "trainer/app/resume.hpp"
#include "trainer/checkpoint/inspect.hpp"
#include "trainer/checkpoint/store.hpp"

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pstrain::trainer {

namespace {

// What `pstrain checkpoint seal` is told of the checkpoint.
struct seal_options {
    std::string dir;
    std::uint64_t step = 0;
    std::string receipts;  // JSON: [{"bytes", "checksum", "step"}] per PS, in PS order
    std::string model = "a program's own model";
    std::string tensors = "[]";  // JSON: [{"name", "shape"}]
    std::string mode = "async";
    bool tables = false;
    int keep = 5;
    double trained_seconds = 0;
    std::uint64_t trained_samples = 0;
};

std::vector<checkpoint::shard_receipt> parse_receipts(const std::string& text)
{
    const auto fix = "give --receipts the snapshot's results, one {\"bytes\", \"checksum\", \"step\"} per PS";
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw error(fmt::format("--receipts is not JSON ({}): {}", e.what(), fix));
    }
    if (!j.is_array() || j.empty()) throw error(fmt::format("--receipts is not a list of receipts: {}", fix));
    std::vector<checkpoint::shard_receipt> out;
    for (const auto& r : j) {
        if (!r.is_object() || !r.contains("bytes") || !r.contains("checksum") || !r["bytes"].is_number_unsigned() ||
            !r["checksum"].is_number_unsigned() || r["checksum"].get<std::uint64_t>() > 0xffffffffu)
            throw error(fmt::format("--receipts has an entry without bytes and a 32-bit checksum: {}", fix));
        out.push_back({r["bytes"].get<std::uint64_t>(), static_cast<std::uint32_t>(r["checksum"].get<std::uint64_t>()),
                       r.value("step", std::uint64_t{0})});
    }
    return out;
}

// The manifest of the snapshot every PS took at o.step, from their files
// and receipts; then older checkpoints pruned to --keep.
int seal(const seal_options& o)
{
    checkpoint::manifest m;
    m.global_step = o.step;
    m.mode = o.mode;
    m.model = o.model;
    try {
        m.tensors = nlohmann::json::parse(o.tensors);
    } catch (const nlohmann::json::exception&) {
        throw error("--tensors is not JSON: give a list of {\"name\", \"shape\"}");
    }
    if (!m.tensors.is_array()) throw error("--tensors is not a list: give a list of {\"name\", \"shape\"}");
    m.job = current_job([](const char* name) { return std::getenv(name); });
    m.trained_seconds = o.trained_seconds;
    m.trained_samples = o.trained_samples;
    const auto receipts = parse_receipts(o.receipts);
    const auto bytes = checkpoint::enter_snapshot_files(o.dir, m, receipts, o.tables, std::chrono::seconds(10));
    // The model's size and optimizer, as the PS tasks wrote them.
    const auto first = checkpoint::read_new_shard(o.dir, m.shards.front().file, std::chrono::seconds(10));
    m.num_params = first.meta.total_params;
    m.optimizer = first.meta.optimizer;
    m.state_slots = first.meta.state_slots;
    checkpoint::write_manifest(o.dir, m);
    checkpoint::prune(o.dir, o.keep);
    fmt::print("{}\n", nlohmann::json{{"event", "checkpoint"},
                                      {"global_step", o.step},
                                      {"manifest", checkpoint::manifest_name(o.step)},
                                      {"bytes", bytes}}
                           .dump());
    return 0;
}

// The newest complete checkpoint of `dir` as one JSON line (global_step
// null when there is none).
int latest(const std::string& dir)
{
    nlohmann::json out = {{"global_step", nullptr}};
    for (const auto& e : checkpoint::list(dir, false)) {
        if (!e.problem.empty() || !e.m) continue;
        out = {{"global_step", e.step},
               {"manifest", e.manifest_file},
               {"num_ps", e.m->shards.size()},
               {"num_params", e.m->num_params},
               {"optimizer", e.m->optimizer},
               {"tensors", e.m->tensors},
               {"job", e.m->job ? e.m->job->describe() : ""}};
        break;
    }
    fmt::print("{}\n", out.dump());
    return 0;
}

}  // namespace

int checkpoint_command(int argc, char** argv)
{
    CLI::App app{"pstrain checkpoint: look at the checkpoints of a --checkpoint-dir, or seal one a program's chief "
                 "took through the PS tasks",
                 "pstrain checkpoint"};
    app.require_subcommand(1);
    std::string dir;
    auto* inspect = app.add_subcommand("inspect", "list the checkpoints: global step, shards, completeness, checksums");
    inspect->add_option("dir", dir, "the --checkpoint-dir of a job")->required();
    auto* newest = app.add_subcommand("latest", "the newest complete checkpoint as one JSON line");
    newest->add_option("dir", dir, "the --checkpoint-dir of a job")->required();
    seal_options so;
    auto* sealing = app.add_subcommand(
        "seal", "write the manifest of the snapshot every PS task took at STEP (chief_client::snapshot), which makes "
                "the checkpoint exist, then keep the newest --keep");
    sealing->add_option("dir", so.dir, "the PS tasks' --checkpoint-dir (a shared path)")->required();
    sealing->add_option("step", so.step, "the snapshot's global step")->required();
    sealing
        ->add_option("--receipts", so.receipts,
                     "the snapshot's results as JSON, one {\"bytes\", \"checksum\", \"step\"} per PS in PS order")
        ->required();
    sealing->add_option("--model", so.model, "the model's description")->capture_default_str();
    sealing->add_option("--tensors", so.tensors, "JSON: the tensors' [{\"name\", \"shape\"}]")->capture_default_str();
    sealing->add_option("--mode", so.mode, "sync or async")
        ->check(CLI::IsMember({"sync", "async"}))
        ->capture_default_str();
    sealing->add_flag("--tables", so.tables, "the PS tasks hold embedding tables: enter their table files");
    sealing->add_option("--keep", so.keep, "complete checkpoints to keep")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    sealing->add_option("--trained-seconds", so.trained_seconds, "training time up to this step")
        ->check(CLI::NonNegativeNumber);
    sealing->add_option("--trained-samples", so.trained_samples, "examples trained on up to this step");
    if (auto exit_status = parse_tool_command(app, argc, argv, "pstrain checkpoint")) return *exit_status;
    log::set_prefix("pstrain checkpoint");
    if (inspect->parsed()) return checkpoint::inspect(dir);
    try {
        if (newest->parsed()) return latest(dir);
        return seal(so);
    } catch (const error& e) {
        log::error("{}", e.what());
        return 1;
    }
}

}  // namespace pstrain::trainer
