// libFuzzer target: the SPANK plugin's parsing, through the same calls
// spank_pstrain.cpp makes, on a fake host: the plugstack.conf arguments
// (init), --ps/--workers/--chief/--evaluator (set_option, init_post_opt)
// in srun, then a task's step on the compute node (task_init: the Slurm
// variables, the layout, the ports, the GPUs).  Input lines:
//   0 plugstack.conf arguments, separated by spaces
//   1 --ps value ("-" for not given)     2 --workers value ("-": not given)
//   3 "chief" and/or "evaluator"          4 rank    5 tasks in the step
//   6 SLURM_STEP_NODELIST                 7 SLURM_STEP_TASKS_PER_NODE
//   8 SLURM_DISTRIBUTION                  9 SLURM_DIST_PLANESIZE
//  10 SLURM_STEP_RESV_PORTS              11 CUDA_VISIBLE_DEVICES
// (a variable's line "-" leaves it unset).  No exception may escape the
// plugin's calls: they return an error code with one line.
#include "common/parse.hpp"
#include "plugin/pstrain_core.hpp"
#include "tests/fuzz/lines.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace pstrain::plugin;

class fake_host final : public spank_host {
public:
    explicit fake_host(context c) : ctx(c) {}
    context where() const override { return ctx; }
    std::optional<std::string> getenv(const std::string& name) const override
    {
        auto it = env.find(name);
        return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
    }
    bool setenv(const std::string& name, const std::string& value) override
    {
        env[name] = value;
        return true;
    }
    std::optional<std::uint32_t> get(item what) const override
    {
        auto it = items.find(what);
        return it == items.end() ? std::nullopt : std::optional<std::uint32_t>(it->second);
    }
    void error(const std::string& line) override { errors.push_back(line); }
    void verbose(const std::string&) override {}

    context ctx;
    std::map<std::string, std::string> env;
    std::map<item, std::uint32_t> items;
    std::vector<std::string> errors;
};

std::vector<std::string> words(const std::string& s)
{
    std::vector<std::string> out;
    for (auto w : pstrain::split(s, ' '))
        if (!w.empty()) out.emplace_back(w);
    return out;
}

void set_options(spank_plugin& p, const std::vector<std::string>& in)
{
    if (in[1] != "-") p.set_option(option::ps, in[1].c_str());
    if (in[2] != "-") p.set_option(option::workers, in[2].c_str());
    if (in[3].find("chief") != std::string::npos) p.set_option(option::chief, nullptr);
    if (in[3].find("evaluator") != std::string::npos) p.set_option(option::evaluator, nullptr);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const auto in = pstrain::fuzz::lines(data, size, 12);
    const auto args = words(in[0]);

    // srun: parse and validate; a failure must say why in one line.
    fake_host local(context::local);
    local.items[item::total_tasks] = 3;
    spank_plugin srun;
    if (srun.init(args, local) == 0) {
        set_options(srun, in);
        if (srun.init_post_opt(local) == 0) srun.local_user_init(local);
    }
    for (const auto& e : local.errors)
        if (e.empty() || e.find('\n') != std::string::npos) __builtin_trap();

    // slurmstepd: the same options, then a task of the step.
    fake_host remote(context::remote);
    remote.items[item::job_id] = 42;
    remote.items[item::step_id] = 0;
    remote.items[item::task_global_id] =
        static_cast<std::uint32_t>(pstrain::parse_count(in[4], 0, 1 << 22).value_or(0));
    remote.items[item::total_tasks] = static_cast<std::uint32_t>(pstrain::parse_count(in[5], 0, 1 << 22).value_or(3));
    const char* vars[] = {"SLURM_STEP_NODELIST",  "SLURM_STEP_TASKS_PER_NODE", "SLURM_DISTRIBUTION",
                          "SLURM_DIST_PLANESIZE", "SLURM_STEP_RESV_PORTS",     "CUDA_VISIBLE_DEVICES"};
    for (std::size_t v = 0; v < 6; ++v)
        if (in[6 + v] != "-") remote.env[vars[v]] = in[6 + v];
    spank_plugin step;
    if (step.init(args, remote) != 0 || (set_options(step, in), step.init_post_opt(remote)) != 0) __builtin_trap();
    step.task_init(remote);
    return 0;
}
