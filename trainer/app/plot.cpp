#include "trainer/app/plot.hpp"

#include "common/log.hpp"
#include "pstrain/error.hpp"
#include "trainer/app/options.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace pstrain::trainer {
namespace {

namespace fs = std::filesystem;

// gnuplot's string quoting: single quotes, a quote doubled.
std::string quoted(const std::string& s)
{
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
    return q + "'";
}

struct run_series {
    std::string name;
    std::string loss_file, metric_file, test_loss_file;  // "step seconds value" rows, a blank line between segments
    run_points points;
};

void write_points(const std::string& file, const std::vector<plot_point>& points)
{
    std::ofstream out(file);
    int segment = points.empty() ? 0 : points.front().segment;
    for (const auto& p : points) {
        if (p.segment != segment) out << '\n';  // gnuplot breaks the line here
        segment = p.segment;
        out << p.step << ' ' << p.seconds << ' ' << p.value << '\n';
    }
}

// Reads one metrics file into data files in `dir`.
run_series read_run(const std::string& path, const fs::path& dir, std::size_t index)
{
    std::ifstream in(path);
    if (!in)
        throw error(fmt::format("{}: cannot read: {}: give a --metrics-file a run wrote", path, std::strerror(errno)));
    run_series r;
    r.name = fs::path(path).parent_path().filename().string();
    if (r.name.empty() || r.name == ".") r.name = fs::path(path).filename().string();
    else r.name += "/" + fs::path(path).filename().string();
    r.points = read_points(in);
    if (r.points.loss.empty() && r.points.metric.empty())
        throw error(fmt::format("{}: no progress or evaluation events: is it a pstrain --metrics-file?", path));
    if (r.points.segments > 1) r.name += fmt::format(" ({} segments)", r.points.segments);
    r.loss_file = (dir / fmt::format("loss-{}.dat", index)).string();
    r.metric_file = (dir / fmt::format("metric-{}.dat", index)).string();
    r.test_loss_file = (dir / fmt::format("test-loss-{}.dat", index)).string();
    write_points(r.loss_file, r.points.loss);
    write_points(r.metric_file, r.points.metric);
    write_points(r.test_loss_file, r.points.test_loss);
    return r;
}

// What the metric panels show: test AUC when every run with evaluations is
// a click-through run, test accuracy when none is, both (each run its own)
// when they are mixed.
std::string metric_label(const std::vector<run_series>& runs)
{
    bool auc = false, accuracy = false;
    for (const auto& r : runs)
        if (!r.points.metric.empty()) (r.points.auc ? auc : accuracy) = true;
    if (auc && accuracy) return "test AUC (click-through) or accuracy";
    return auc ? "test AUC" : "test accuracy";
}

// One panel: `column` (1 step, 2 seconds) against the value, a line per
// run (and, in the loss panel, a dashed one per click-through run for its
// test log loss).
std::string panel(const std::vector<run_series>& runs, bool metric, int column, const std::string& xlabel)
{
    const auto what = metric ? metric_label(runs) : std::string("loss");
    const bool test_losses = !metric && std::any_of(runs.begin(), runs.end(),
                                                    [](const run_series& r) { return !r.points.test_loss.empty(); });
    std::string s = fmt::format("set key {} right\nset xlabel {}\nset ylabel {}\nset title {}\n",
                                metric ? "bottom" : "top", quoted(xlabel),
                                quoted(metric        ? what
                                       : test_losses ? "loss (train: mean over the logged steps; test: dashed)"
                                                     : "loss (mean over the logged steps)"),
                                quoted(fmt::format("{} against {}", what, xlabel)));
    std::vector<std::string> lines;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const auto& r = runs[i];
        const auto& points = metric ? r.points.metric : r.points.loss;
        if (!points.empty())
            lines.push_back(fmt::format(
                "{} using {}:3 with linespoints linestyle {} title {}", quoted(metric ? r.metric_file : r.loss_file),
                column, i + 1, quoted(metric && r.points.auc && what != "test AUC" ? r.name + " (AUC)" : r.name)));
        if (!metric && !r.points.test_loss.empty())
            lines.push_back(fmt::format("{} using {}:3 with linespoints linestyle {} dashtype 2 title {}",
                                        quoted(r.test_loss_file), column, i + 1, quoted(r.name + " test log loss")));
    }
    // An empty panel (a run shorter than --log-every or --eval-every): a
    // fixed range, or gnuplot stops at "all points y value undefined".
    if (lines.empty())
        return s + fmt::format("set xrange [0:1]\nset yrange [0:1]\nset label 1 {} at graph 0.5, 0.5 center\n"
                               "plot NaN notitle\nunset label 1\nset autoscale\n",
                               quoted(metric ? "no evaluations in these runs"
                                             : "no progress lines in these runs (shorter than --log-every)"));
    s += "plot ";
    for (std::size_t i = 0; i < lines.size(); ++i) s += (i ? ", \\\n     " : "") + lines[i];
    return s + "\n";
}

}  // namespace

run_points read_points(std::istream& in)
{
    run_points r;
    double last_seconds = -1, offset = 0;
    std::int64_t last_step = -1;
    int segment = -1;
    std::string line;
    while (std::getline(in, line)) {
        auto e = nlohmann::json::parse(line, nullptr, false);
        if (e.is_discarded() || !e.is_object() || !e.contains("global_step") || !e["global_step"].is_number_integer())
            continue;
        const auto step = e["global_step"].get<std::int64_t>();
        const double elapsed = e.contains("elapsed_seconds") && e["elapsed_seconds"].is_number()
                                   ? e["elapsed_seconds"].get<double>()
                                   : 0.0;
        // A start of the job: its clock starts at 0 again, its steps at its checkpoint's.
        if (segment < 0 || elapsed < last_seconds || step < last_step) {
            if (segment >= 0) offset += last_seconds;
            ++segment;
        }
        last_seconds = elapsed;
        last_step = step;
        const plot_point at{step, offset + elapsed, 0, segment};
        const auto number = [&](const char* field, std::vector<plot_point>& into) {
            if (!e.contains(field) || !e[field].is_number()) return false;
            auto p = at;
            p.value = e[field].get<double>();
            into.push_back(p);
            return true;
        };
        const auto kind = e.value("event", "");
        if (kind == "progress") {
            number("loss", r.loss);
        } else if (kind == "eval") {
            if (number("test_auc", r.metric)) r.auc = true;
            else number("test_accuracy", r.metric);
            number("test_logloss", r.test_loss);
        }
    }
    r.segments = segment + 1;
    return r;
}

void plot(const plot_request& r)
{
    if (r.metrics.empty()) throw error("pstrain plot: give at least one metrics file");
    char templ[] = "/tmp/pstrain-plot-XXXXXX";
    if (!::mkdtemp(templ)) throw error(fmt::format("cannot make a temporary directory: {}", std::strerror(errno)));
    const fs::path dir = templ;
    struct cleanup {
        fs::path d;
        ~cleanup()
        {
            std::error_code ec;
            fs::remove_all(d, ec);
        }
    } gone{dir};

    std::vector<run_series> runs;
    for (std::size_t i = 0; i < r.metrics.size(); ++i) runs.push_back(read_run(r.metrics[i], dir, i));

    const fs::path out = fs::absolute(r.output);
    const auto tmp_png = out.string() + ".tmp";
    std::string script = fmt::format("set terminal pngcairo size {},{} enhanced font 'DejaVu Sans,10'\nset output {}\n",
                                     r.width, r.height, quoted(tmp_png));
    script += "set grid\nset datafile missing NaN\n";
    script += fmt::format("set multiplot layout 2,2 title {} font ',14'\n", quoted(r.title));
    script += panel(runs, false, 1, "global step") + panel(runs, true, 1, "global step");
    script += panel(runs, false, 2, "seconds") + panel(runs, true, 2, "seconds");
    script += "unset multiplot\nset output\n";
    const auto script_file = (dir / "curves.gp").string();
    std::ofstream(script_file) << script;

    const auto log_file = (dir / "gnuplot.log").string();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    std::vector<char*> argv{const_cast<char*>("gnuplot"), const_cast<char*>(script_file.c_str()), nullptr};
    pid_t pid = -1;
    const int err = ::posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (err != 0)
        throw error(fmt::format("cannot run gnuplot: {}: pstrain plot draws with it (apt-get install gnuplot-nox)",
                                std::strerror(err)));
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    std::error_code ec;
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) || !fs::exists(tmp_png, ec) ||
        fs::file_size(tmp_png, ec) == 0) {
        std::ifstream l(log_file);
        std::string first, line;
        while (std::getline(l, line))
            if (!line.empty()) first = line;
        fs::remove(tmp_png, ec);
        throw error(fmt::format("gnuplot failed{}{}", first.empty() ? "" : ": ", first));
    }
    fs::rename(tmp_png, out, ec);
    if (ec) {
        fs::remove(tmp_png, ec);
        throw error(fmt::format("-o {}: cannot write: {}: give a writable path", r.output, ec.message()));
    }
}

int plot_command(int argc, char** argv)
{
    CLI::App app{"pstrain plot: loss and test accuracy (click-through runs: AUC and log loss) of one or more runs "
                 "against step and time, as a PNG",
                 "pstrain plot"};
    plot_request r;
    std::string size = "1200x800";
    app.add_option("metrics", r.metrics, "metrics files (--metrics-file, or DIR/metrics.jsonl), one run each")
        ->required();
    app.add_option("-o,--output", r.output, "the PNG to write")->required();
    int width = 0, height = 0;
    app.add_option("--size", size, "WIDTHxHEIGHT in pixels")
        ->check(CLI::Validator(
            [&](std::string& text) -> std::string {
                char x = 0, extra = 0;
                if (std::sscanf(text.c_str(), "%d%c%d%c", &width, &x, &height, &extra) != 3 || x != 'x' ||
                    width < 200 || height < 150 || width > 10000 || height > 10000)
                    return fmt::format("'{}' is not WIDTHxHEIGHT from 200x150 to 10000x10000, e.g. 1200x800", text);
                return "";
            },
            "WIDTHxHEIGHT"))
        ->capture_default_str();
    app.add_option("--title", r.title, "the figure's title")->capture_default_str();
    if (auto exit_status = parse_tool_command(app, argc, argv, "pstrain plot")) return *exit_status;
    if (width > 0) {  // --size was given (and checked)
        r.width = width;
        r.height = height;
    }
    log::set_prefix("pstrain plot");
    try {
        plot(r);
        log::info("wrote {} ({}x{}, {} run{})", r.output, r.width, r.height, r.metrics.size(),
                  r.metrics.size() == 1 ? "" : "s");
        return 0;
    } catch (const error& e) {
        log::error("{}", e.what());
        return 1;
    }
}

}  // namespace pstrain::trainer
