#include "trainer/app/status.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "trainer/app/options.hpp"
#include "trainer/app/report.hpp"
#include "trainer/checkpoint/store.hpp"

#include <chrono>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace pstrain::trainer {
namespace {

// Seconds since an ISO 8601 UTC time ("2026-11-23T12:00:00Z"), or -1.
double seconds_since(const std::string& iso)
{
    std::tm tm{};
    if (!strptime(iso.c_str(), "%Y-%m-%dT%H:%M:%S", &tm)) return -1;
    const std::time_t then = timegm(&tm);
    return std::difftime(std::time(nullptr), then);
}

}  // namespace

nlohmann::json run_status(const std::string& dir, const std::string& metrics_file, std::size_t tail)
{
    nlohmann::json s;
    s["dir"] = dir;
    const auto entries = checkpoint::list(dir, false);
    s["checkpoint"] = nullptr;
    std::size_t complete = 0;
    for (const auto& e : entries) {
        if (!e.problem.empty() || !e.m) continue;
        if (complete++ == 0) {
            const auto& m = *e.m;
            s["checkpoint"] = {
                {"global_step", m.global_step}, {"created", m.created},       {"mode", m.mode},
                {"ps", m.shards.size()},        {"model", m.model},           {"num_params", m.num_params},
                {"optimizer", m.optimizer},     {"manifest", e.manifest_file}};
        }
    }
    s["complete_checkpoints"] = complete;

    // The metrics: every event, the tail kept, and the last evaluation at or
    // before the checkpoint.
    const std::string path = metrics_file.empty() ? dir + "/metrics.jsonl" : metrics_file;
    s["metrics_file"] = nullptr;
    s["accuracy"] = nullptr;
    s["workers"] = nullptr;
    s["metrics_tail"] = nlohmann::json::array();
    std::ifstream in(path);
    if (!in) {
        if (!metrics_file.empty())
            throw error(
                fmt::format("--metrics {}: cannot be read: give the --metrics-file the job wrote", metrics_file));
        return s;
    }
    s["metrics_file"] = path;
    const std::uint64_t ckpt_step =
        s["checkpoint"].is_null() ? UINT64_MAX : s["checkpoint"]["global_step"].get<std::uint64_t>();
    std::deque<nlohmann::json> last;
    std::string line;
    std::size_t bad = 0;
    while (std::getline(in, line)) {
        auto e = nlohmann::json::parse(line, nullptr, false);
        if (e.is_discarded() || !e.is_object()) {  // a line cut by a crash: counted, skipped
            ++bad;
            continue;
        }
        if (e.value("event", "") == "eval" && e.contains("test_accuracy") && e["test_accuracy"].is_number() &&
            e.value("global_step", std::uint64_t{0}) <= ckpt_step)
            s["accuracy"] = {{"test_accuracy", e["test_accuracy"]}, {"global_step", e["global_step"]}};
        if (e.value("event", "") == "workers" && e.contains("alive") && e["alive"].is_number_unsigned() &&
            e.contains("workers") && e["workers"].is_number_unsigned())
            s["workers"] = {{"alive", e["alive"]},
                            {"workers", e["workers"]},
                            {"global_step", e.value("global_step", std::uint64_t{0})},
                            {"elastic", e.contains("elastic") && e["elastic"].is_boolean() && e["elastic"].get<bool>()},
                            {"room", e.contains("room") && e["room"].is_number_unsigned() ? e["room"] : e["workers"]}};
        last.push_back(std::move(e));
        if (last.size() > tail) last.pop_front();
    }
    for (auto& e : last) s["metrics_tail"].push_back(std::move(e));
    s["unreadable_metrics_lines"] = bad;
    return s;
}

std::string format_status(const nlohmann::json& s)
{
    std::string out = fmt::format("checkpoint directory {}\n", s["dir"].get<std::string>());
    const auto& c = s["checkpoint"];
    if (c.is_null()) {
        out += "no complete checkpoint yet\n";
    } else {
        const double age = seconds_since(c["created"].get<std::string>());
        const auto kept = s["complete_checkpoints"].get<std::size_t>();
        out += fmt::format("last checkpoint: global step {}, written {}{} ({} complete checkpoint{} kept)\n",
                           c["global_step"].get<std::uint64_t>(), c["created"].get<std::string>(),
                           age >= 0 ? fmt::format(", {} ago", format_duration(age)) : "", kept, kept == 1 ? "" : "s");
        const auto ps = c["ps"].get<std::size_t>();
        const auto mode = c["mode"].get<std::string>();
        out += fmt::format("run: {}, model {} ({} parameters), optimizer {}\n",
                           mode == "standalone" ? std::string("standalone (one process)")
                                                : fmt::format("{} mode, {} PS task{}", mode, ps, ps == 1 ? "" : "s"),
                           c["model"].get<std::string>(), c["num_params"].get<std::uint64_t>(),
                           c["optimizer"].get<std::string>());
    }
    const auto& a = s["accuracy"];
    if (a.is_null())
        out += "accuracy: not measured yet (the chief evaluates every --eval-every steps and at the end)\n";
    else
        out += fmt::format("accuracy: {:.4f} on the test set at global step {}\n", a["test_accuracy"].get<double>(),
                           a["global_step"].get<std::uint64_t>());
    if (s.contains("workers") && !s["workers"].is_null()) {
        const auto& w = s["workers"];
        const auto alive = w["alive"].get<std::uint64_t>(), all = w["workers"].get<std::uint64_t>();
        const char* lost = w["elastic"].get<bool>()
                               ? " (--elastic: the others were lost; the data is split among the live ones)"
                               : " (the others were lost, and their data shards are not trained on)";
        const auto room = w["room"].get<std::uint64_t>();
        if (room > all)  // --max-workers: the job keeps room for workers that join later
            out += fmt::format("workers: {} alive from global step {} ({} started with the job, room for {}{})\n",
                               alive, w["global_step"].get<std::uint64_t>(), all, room,
                               alive < room ? ": pstrain --join adds one" : ", all taken");
        else
            out += fmt::format("workers: {} of {} alive from global step {}{}\n", alive, all,
                               w["global_step"].get<std::uint64_t>(), alive < all ? lost : "");
    }
    if (s["metrics_file"].is_null()) {
        out += "metrics: no metrics.jsonl in this directory (pass the job's --metrics-file with --metrics)\n";
        return out;
    }
    out += fmt::format("metrics ({}), last {}:\n", s["metrics_file"].get<std::string>(), s["metrics_tail"].size());
    for (const auto& e : s["metrics_tail"]) {
        const auto kind = e.value("event", "?");
        const auto step = e.value("global_step", std::int64_t{0});
        if (kind == "progress")
            out += fmt::format("  step {:>8}  loss {:.4f}{}  {} samples/s  ETA {}\n", step, e.value("loss", 0.0),
                               e.contains("train_accuracy") && e["train_accuracy"].is_number()
                                   ? fmt::format("  train accuracy {:.4f}", e["train_accuracy"].get<double>())
                                   : "",
                               short_count(e.value("samples_per_sec", 0.0)),
                               format_duration(e.value("eta_seconds", -1.0)));
        else if (kind == "cluster") out += fmt::format("  step {:>8}  {}\n", step, describe_cluster(e));
        else if (kind == "eval" && e.contains("test_accuracy") && e["test_accuracy"].is_number())
            out += fmt::format("  step {:>8}  test accuracy {:.4f}\n", step, e["test_accuracy"].get<double>());
        else if (kind == "workers" && e.contains("alive") && e["alive"].is_number_unsigned() && e.contains("workers") &&
                 e["workers"].is_number_unsigned())
            out += fmt::format("  step {:>8}  {} of {} workers alive\n", step, e["alive"].get<std::uint64_t>(),
                               e["workers"].get<std::uint64_t>());
        else if (kind == "done")
            out += fmt::format("  step {:>8}  training done{}\n", step,
                               e.contains("test_accuracy") && e["test_accuracy"].is_number()
                                   ? fmt::format(", test accuracy {:.4f}", e["test_accuracy"].get<double>())
                                   : "");
        else if (kind == "checkpoint")
            out += fmt::format("  step {:>8}  checkpoint {}\n", step, e.value("manifest", ""));
        else out += fmt::format("  step {:>8}  {}\n", step, e.dump());
    }
    return out;
}

int status_command(int argc, char** argv)
{
    CLI::App app{"pstrain status: where a run stands, from its --checkpoint-dir", "pstrain status"};
    std::string dir, metrics;
    bool json = false;
    std::size_t tail = 5;
    app.add_option("dir", dir, "the job's --checkpoint-dir")->required();
    app.add_flag("--json", json, "one JSON object instead of lines");
    app.add_option("--metrics", metrics, "the job's --metrics-file, if it was not DIR/metrics.jsonl");
    app.add_option("--tail", tail, "how many of the last metrics events to show")
        ->check(CLI::Range(0, 10000))
        ->capture_default_str();
    if (auto exit_status = parse_tool_command(app, argc, argv, "pstrain status")) return *exit_status;
    log::set_prefix("pstrain status");
    try {
        if (!std::filesystem::is_directory(dir))
            throw error(fmt::format("{} is not a directory: give the --checkpoint-dir of a job", dir));
        const auto s = run_status(dir, metrics, tail);
        if (s["checkpoint"].is_null() && s["metrics_file"].is_null())
            throw error(
                fmt::format("{} holds no complete checkpoint and no metrics.jsonl: give the --checkpoint-dir of a job "
                            "that has saved one (or its --metrics-file with --metrics)",
                            dir));
        fmt::print("{}", json ? s.dump() + "\n" : format_status(s));
        return 0;
    } catch (const error& e) {
        log::error("{}", e.what());
        return 1;
    }
}

}  // namespace pstrain::trainer
