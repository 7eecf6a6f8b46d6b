#include "plugin/pstrain_core.hpp"

#include "config.h"
#include "pstrain/error.hpp"
#include "common/hostlist.hpp"
#include "common/layout.hpp"
#include "common/parse.hpp"

#include <algorithm>
#include <ctime>
#include <numeric>
#include <random>
#include <sstream>

#include <sys/random.h>

#include <fmt/format.h>

namespace pstrain::plugin {
namespace {

constexpr const char* known_keys = "tf_config, gpu_bind, ps_placement, port_range, port_scope, max_tasks";

bool parse_bool(const std::string& key, const std::string& value)
{
    if (value == "yes" || value == "1" || value == "true") return true;
    if (value == "no" || value == "0" || value == "false") return false;
    throw error(fmt::format("plugstack.conf argument {}={}: use yes or no", key, value));
}

int parse_one(const std::string& key, const std::string& value, std::int64_t lo, std::int64_t hi)
{
    auto v = parse_count(value, lo, hi);
    if (!v)
        throw error(
            fmt::format("plugstack.conf argument {}={}: give a whole number from {} to {}", key, value, lo, hi));
    return static_cast<int>(*v);
}

int parse_task_option(const char* flag, const std::optional<std::string>& text, const config& cfg)
{
    const char* what = std::string_view(flag) == "--ps" ? "parameter-server" : "worker";
    const char* example = std::string_view(flag) == "--ps" ? "--ps=1" : "--workers=2";
    if (text->empty())
        throw error(fmt::format("{}= is empty: give the number of {} tasks, e.g. {}", flag, what, example));
    auto v = parse_count(*text, 1, cfg.max_tasks);
    if (!v) {
        bool digits = std::all_of(text->begin(), text->end(), [](char c) { return c >= '0' && c <= '9'; });
        if (digits && text->find_first_not_of('0') != std::string::npos)
            throw error(fmt::format("{}={} is too large: at most {} {} tasks (plugstack.conf max_tasks)", flag, *text,
                                    cfg.max_tasks, what));
        throw error(fmt::format("{}={} is not a valid number of {} tasks: give a whole number from 1 to {}, e.g. {}",
                                flag, *text, what, cfg.max_tasks, example));
    }
    return static_cast<int>(*v);
}

std::vector<int> parse_port_list(const std::string& text)
{
    std::vector<int> ports;
    for (std::string_view item : split(text, ',')) {
        std::size_t dash = item.find('-');
        auto lo = parse_count(item.substr(0, dash), 1, 65535);
        auto hi = dash == std::string_view::npos ? lo : parse_count(item.substr(dash + 1), 1, 65535);
        if (!lo || !hi || *hi < *lo) throw error(fmt::format("SLURM_STEP_RESV_PORTS={} is not a port list", text));
        for (auto p = *lo; p <= *hi; ++p) ports.push_back(static_cast<int>(p));
    }
    return ports;
}

// The same slot for every task of a step: the ports of the whole step form
// one block of max_tasks_per_node consecutive ports.
std::vector<int> step_ports(const config& cfg, const step_info& step, const task_layout& layout,
                            std::vector<std::string>& warnings)
{
    const int per_node = cfg.unique_ports ? static_cast<int>(layout.node_of_rank.size()) : layout.max_tasks_per_node();
    if (step.resv_ports) {
        auto reserved = parse_port_list(*step.resv_ports);
        if (static_cast<int>(reserved.size()) >= per_node) return reserved;
        warnings.push_back(
            fmt::format("SLURM_STEP_RESV_PORTS has {} ports for {} tasks on a node: using port_range instead",
                        reserved.size(), per_node));
    }
    const int slots = (cfg.port_max - cfg.port_min + 1) / per_node;
    if (slots < 1)
        throw error(
            fmt::format("port_range {}-{} is smaller than the {} tasks of one node: widen port_range in plugstack.conf",
                        cfg.port_min, cfg.port_max, per_node));
    // Steps of one job take consecutive slots; jobs are spread by a
    // multiplicative hash of the job id.
    std::uint64_t key = static_cast<std::uint64_t>(step.job_id) * 2654435761u + step.step_id;
    int slot = static_cast<int>(key % static_cast<std::uint64_t>(slots));
    std::vector<int> ports(static_cast<std::size_t>(per_node));
    for (int i = 0; i < per_node; ++i) ports[static_cast<std::size_t>(i)] = cfg.port_min + slot * per_node + i;
    // An outgoing connection may already hold a port of the kernel's
    // ephemeral range, and the task's server then cannot listen on it.
    if (step.rank == 0 && step.ephemeral_ports) {
        std::istringstream in(*step.ephemeral_ports);
        int low = 0, high = 0;
        if (in >> low >> high && ports.front() <= high && ports.back() >= low)
            warnings.push_back(fmt::format("ports {}-{} of port_range {}-{} lie in the kernel's ephemeral ports {}-{} "
                                           "(net.ipv4.ip_local_port_range), where an outgoing connection may hold "
                                           "one: set port_range in plugstack.conf outside them, e.g. 20000-29999",
                                           ports.front(), ports.back(), cfg.port_min, cfg.port_max, low, high));
    }
    return ports;
}

std::vector<std::string> split_devices(const std::string& list)
{
    std::vector<std::string> out;
    for (std::string_view item : split(list, ','))
        if (!item.empty()) out.emplace_back(item);
    return out;
}

std::string join(const std::vector<std::string>& items, std::size_t from, std::size_t to)
{
    std::string out;
    for (std::size_t i = from; i < to; ++i) out += (i == from ? "" : ",") + items[i];
    return out;
}

}  // namespace

config parse_plugstack_args(const std::vector<std::string>& args)
{
    config cfg;
    for (const auto& arg : args) {
        auto eq = arg.find('=');
        if (eq == std::string::npos || eq == 0)
            throw error(
                fmt::format("plugstack.conf argument '{}' is not key=value: known keys are {} (see spank-pstrain(8))",
                            arg, known_keys));
        std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
        if (key == "tf_config") {
            cfg.tf_config = parse_bool(key, value);
        } else if (key == "gpu_bind") {
            if (value == "split") cfg.gpu_bind = gpu_policy::split;
            else if (value == "share") cfg.gpu_bind = gpu_policy::share;
            else if (value == "none") cfg.gpu_bind = gpu_policy::none;
            else throw error(fmt::format("plugstack.conf argument gpu_bind={}: use split, share or none", value));
        } else if (key == "ps_placement") {
            if (value == "rank") cfg.placement = ps_placement::rank;
            else if (value == "spread") cfg.placement = ps_placement::spread;
            else throw error(fmt::format("plugstack.conf argument ps_placement={}: use rank or spread", value));
        } else if (key == "port_range") {
            auto dash = value.find('-');
            if (dash == std::string::npos)
                throw error(fmt::format("plugstack.conf argument port_range={}: use MIN-MAX, e.g. 20000-29999", value));
            cfg.port_min = parse_one(key, value.substr(0, dash), 1024, 65535);
            cfg.port_max = parse_one(key, value.substr(dash + 1), cfg.port_min, 65535);
        } else if (key == "port_scope") {
            if (value == "node") cfg.unique_ports = false;
            else if (value == "step") cfg.unique_ports = true;
            else throw error(fmt::format("plugstack.conf argument port_scope={}: use node or step", value));
        } else if (key == "max_tasks") {
            cfg.max_tasks = parse_one(key, value, 2, 1 << 20);
        } else {
            throw error(fmt::format(
                "unknown plugstack.conf argument '{}' for spank_pstrain.so: known keys are {} (see spank-pstrain(8))",
                key, known_keys));
        }
    }
    return cfg;
}

std::string job_shape::flags() const
{
    return fmt::format("--ps={} --workers={}{}{}{}", num_ps, num_workers, chief ? " --chief" : "",
                       evaluator ? " --evaluator" : "", ps_spares > 0 ? fmt::format(" --ps-spares={}", ps_spares) : "");
}

std::optional<job_shape> validate_options(const option_values& given, const config& cfg)
{
    if (!given.ps && !given.workers) {
        if (given.ps_spares)
            throw error(fmt::format("--ps-spares={} was given without --ps and --workers: give them too, e.g. --ps=2 "
                                    "--workers=2 --ps-spares={}",
                                    *given.ps_spares, *given.ps_spares));
        if (given.chief || given.evaluator)
            throw error(
                fmt::format("{} was given without --ps and --workers: give them too, e.g. --ps=2 --workers=2 {}",
                            given.chief ? "--chief" : "--evaluator", given.chief ? "--chief" : "--evaluator"));
        return std::nullopt;
    }
    // --ps=0 --workers=0: a step of a pstrain job that is not its training
    // step (a worker joining it with pstrain --join, a shell) inside a batch
    // script whose --ps and --workers every srun would otherwise inherit.
    const auto zero = [](const std::optional<std::string>& v) {
        return v && !v->empty() && v->find_first_not_of('0') == std::string::npos;
    };
    if (zero(given.ps) && zero(given.workers)) {
        if (given.ps_spares || given.chief || given.evaluator)
            throw error("--ps=0 --workers=0 makes a step without pstrain's roles: leave out --ps-spares, --chief and "
                        "--evaluator");
        return std::nullopt;
    }
    if (!given.workers)
        throw error(fmt::format("--ps={} was given without --workers: give both, e.g. --ps=1 --workers=2", *given.ps));
    if (!given.ps)
        throw error(fmt::format("--workers={} was given without --ps: give both, e.g. --ps=1 --workers={}",
                                *given.workers, given.workers->empty() ? "2" : *given.workers));
    job_shape shape{parse_task_option("--ps", given.ps, cfg), parse_task_option("--workers", given.workers, cfg),
                    given.chief, given.evaluator};
    if (given.ps_spares) {
        auto k = given.ps_spares->empty() ? std::nullopt : parse_count(*given.ps_spares, 0, cfg.max_tasks);
        if (!k)
            throw error(fmt::format("--ps-spares={} is not a valid number of spare parameter-server tasks: give a "
                                    "whole number from 0 to {}, e.g. --ps-spares=1",
                                    *given.ps_spares, cfg.max_tasks));
        shape.ps_spares = static_cast<int>(*k);
    }
    if (shape.total() > cfg.max_tasks)
        throw error(fmt::format("{} makes {} tasks, more than {} (plugstack.conf max_tasks)", shape.flags(),
                                shape.total(), cfg.max_tasks));
    return shape;
}

std::string task_count_error(const job_shape& shape, std::uint32_t step_tasks)
{
    return fmt::format("{} needs {} tasks, the step has {}: use -n {} (or leave -n out)", shape.flags(), shape.total(),
                       step_tasks, shape.total());
}

std::vector<task_id> assign_roles(const job_shape& shape, const task_layout& layout, ps_placement placement)
{
    const int total = static_cast<int>(layout.node_of_rank.size());
    const int first = shape.chief + shape.evaluator;      // ranks before the ps tasks
    const int ps_tasks = shape.num_ps + shape.ps_spares;  // the spares are the last ps tasks
    // 0: not a ps task; 1: a serving one; 2: a spare.
    std::vector<int> kind(static_cast<std::size_t>(total), 0);
    if (placement == ps_placement::rank) {
        // The serving ps tasks right after the chief and the evaluator; the
        // spares take the step's last ranks, so that with Slurm's block
        // distribution they land on the last node, not beside the tasks they
        // stand in for (a node lost with its PS would take its spare along).
        for (int r = first; r < first + shape.num_ps; ++r) kind[static_cast<std::size_t>(r)] = 1;
        for (int r = total - shape.ps_spares; r < total; ++r) kind[static_cast<std::size_t>(r)] = 2;
    } else {
        // Round-robin over nodes, taking each node's lowest unassigned rank:
        // the serving ps tasks first, then the spares, so that a spare goes
        // where the round-robin would put the next ps task.
        std::vector<std::size_t> next(layout.ranks_of_node.size(), 0);
        int chosen = 0;
        while (chosen < ps_tasks) {
            for (std::size_t n = 0; n < layout.ranks_of_node.size() && chosen < ps_tasks; ++n) {
                while (next[n] < layout.ranks_of_node[n].size() && layout.ranks_of_node[n][next[n]] < first) ++next[n];
                if (next[n] < layout.ranks_of_node[n].size()) {
                    kind[static_cast<std::size_t>(layout.ranks_of_node[n][next[n]++])] = chosen < shape.num_ps ? 1 : 2;
                    ++chosen;
                }
            }
        }
    }
    // Each kind numbered in rank order: ps 0..N-1 serve, ps N.. are the spares.
    std::vector<task_id> roles;
    if (shape.chief) roles.push_back({role::chief, 0});
    if (shape.evaluator) roles.push_back({role::evaluator, 0});
    int ps = 0, spare = shape.num_ps, worker = 0;
    for (int r = first; r < total; ++r) {
        const int k = kind[static_cast<std::size_t>(r)];
        roles.push_back(k == 1   ? task_id{role::ps, ps++}
                        : k == 2 ? task_id{role::ps, spare++}
                                 : task_id{role::worker, worker++});
    }
    return roles;
}

environment task_environment(const job_shape& shape, const config& cfg, const step_info& step,
                             std::vector<std::string>& warnings)
{
    if (step.total_tasks != shape.total())
        throw error(task_count_error(shape, static_cast<std::uint32_t>(step.total_tasks)));
    // The counts decide the layout's size: they must add up to the step's
    // tasks before a layout of that many is made.
    const auto counts = expand_task_counts(step.tasks_per_node);
    const auto counted = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
    if (counted != step.total_tasks)
        throw error(fmt::format("SLURM_STEP_TASKS_PER_NODE={} counts {} tasks but the step has {}", step.tasks_per_node,
                                counted, step.total_tasks));
    task_layout layout =
        make_layout(expand_hostlist(step.nodelist), counts, parse_distribution(step.distribution), step.plane_size);
    if (step.rank < 0 || step.rank >= step.total_tasks)
        throw error(fmt::format("task rank {} is outside the step's {} tasks", step.rank, step.total_tasks));

    auto roles = assign_roles(shape, layout, cfg.placement);
    auto ports = step_ports(cfg, step, layout, warnings);
    // Each role's list in index order (a spare's rank may come before a
    // serving ps task's).
    cluster_spec spec;
    spec.tasks(role::ps).resize(static_cast<std::size_t>(shape.num_ps + shape.ps_spares));
    for (int r = 0; r < step.total_tasks; ++r) {
        const auto& host = layout.nodes[static_cast<std::size_t>(layout.node_of_rank[static_cast<std::size_t>(r)])];
        const int slot = cfg.unique_ports ? r : layout.local_index(r);
        auto address = fmt::format("{}:{}", host, ports[static_cast<std::size_t>(slot)]);
        const auto& id = roles[static_cast<std::size_t>(r)];
        if (id.role == role::ps) spec.tasks(role::ps).at(static_cast<std::size_t>(id.index)) = std::move(address);
        else spec.tasks(id.role).push_back(std::move(address));
    }

    const task_id me = roles[static_cast<std::size_t>(step.rank)];
    environment env{
        {"PSTRAIN_ROLE", std::string(role_name(me.role))},
        {"PSTRAIN_TASK_INDEX", std::to_string(me.index)},
        {"PSTRAIN_NUM_PS", std::to_string(shape.num_ps + shape.ps_spares)},
        {"PSTRAIN_NUM_WORKERS", std::to_string(shape.num_workers)},
        {"PSTRAIN_CLUSTER", to_json(spec)},
    };
    // Who decides when the step ends (pstrain-run): the chief, else worker 0.
    if (shape.chief) env.emplace_back("PSTRAIN_CHIEF", "1");
    if (shape.evaluator) env.emplace_back("PSTRAIN_EVALUATOR", "1");
    // The spares: PSTRAIN_NUM_PS and PSTRAIN_CLUSTER count them (pstrain's
    // bootstrap connects them), TensorFlow's TF_CONFIG does not, and a
    // spare gets none: it is no task of TensorFlow's cluster.
    if (shape.ps_spares > 0) env.emplace_back("PSTRAIN_PS_SPARES", std::to_string(shape.ps_spares));
    const bool spare = me.role == role::ps && me.index >= shape.num_ps;
    if (cfg.tf_config && !spare) {
        auto tf_spec = spec;
        tf_spec.tasks(role::ps).resize(static_cast<std::size_t>(shape.num_ps));
        env.emplace_back("TF_CONFIG", tf_config_json(tf_spec, me));
    }

    if (cfg.gpu_bind == gpu_policy::none) return env;
    // The ps tasks and the chief (a coordinator) compute nothing on a GPU;
    // the workers and the evaluator share the node's GPUs.
    if (me.role == role::ps || me.role == role::chief) {
        env.emplace_back("CUDA_VISIBLE_DEVICES", "");
        return env;
    }
    if (!step.cuda_visible_devices) return env;  // no GPUs allocated: CPU workers
    auto devices = split_devices(*step.cuda_visible_devices);
    // This worker's index among the workers on its node.
    const auto& on_node =
        layout.ranks_of_node[static_cast<std::size_t>(layout.node_of_rank[static_cast<std::size_t>(step.rank)])];
    int local_workers = 0, k = 0;
    for (int r : on_node) {
        const auto rr = roles[static_cast<std::size_t>(r)].role;
        if (rr != role::worker && rr != role::evaluator) continue;
        if (r == step.rank) k = local_workers;
        ++local_workers;
    }
    const auto g = devices.size();
    const auto w = static_cast<std::size_t>(local_workers), kk = static_cast<std::size_t>(k);
    std::string mine;
    if (g == 0) {
        warnings.push_back(fmt::format(
            "{} {} has no GPU: Slurm allocated none on {}; it runs on the CPU (ask for --gres=gpu:N)",
            role_name(me.role), me.index,
            layout.nodes[static_cast<std::size_t>(layout.node_of_rank[static_cast<std::size_t>(step.rank)])]));
    } else if (g >= w) {
        mine = join(devices, kk * g / w, (kk + 1) * g / w);  // an even split, the remainder to the last workers
    } else if (cfg.gpu_bind == gpu_policy::share) {
        mine = devices[kk % g];
    } else if (kk < g) {
        mine = devices[kk];
    } else {
        warnings.push_back(
            fmt::format("{} {} has no GPU left: {} tasks share the {} GPU(s) on this node; it runs on the CPU "
                        "(ask for --gres=gpu:{} or set gpu_bind=share)",
                        role_name(me.role), me.index, w, g, w));
    }
    env.emplace_back("CUDA_VISIBLE_DEVICES", mine);
    return env;
}

// ----------------------------------------------------------------- plugin

void spank_plugin::report(spank_host& host, const std::string& line) { host.error("pstrain: " + line); }

void spank_plugin::export_sizes(spank_host& host) const
{
    host.setenv("PSTRAIN_NUM_PS", std::to_string(shape_->num_ps + shape_->ps_spares));
    if (shape_->ps_spares > 0) host.setenv("PSTRAIN_PS_SPARES", std::to_string(shape_->ps_spares));
    host.setenv("PSTRAIN_NUM_WORKERS", std::to_string(shape_->num_workers));
    if (shape_->chief) host.setenv("PSTRAIN_CHIEF", "1");
    if (shape_->evaluator) host.setenv("PSTRAIN_EVALUATOR", "1");
}

std::string version_line(const job_shape& shape, std::uint32_t job_id)
{
    return fmt::format("pstrain: spank_pstrain.so of pstrain {} (built against Slurm {}), job {}: {}", PACKAGE_VERSION,
                       PSTRAIN_BUILT_WITH_SLURM, job_id, shape.flags());
}

bool logs_version(std::uint32_t step_id, int rank, bool in_batch_job)
{
    if (step_id == batch_step_id) return true;
    return step_id == 0 && rank == 0 && !in_batch_job;
}

void spank_plugin::announce_version(spank_host& host, std::uint32_t job_id, std::uint32_t step_id, int rank) const
{
    host.setenv("PSTRAIN_PLUGIN_VERSION", PACKAGE_VERSION);
    if (logs_version(step_id, rank, host.getenv("ENVIRONMENT") == "BATCH")) host.info(version_line(*shape_, job_id));
}

std::string submission_id(std::int64_t when, std::uint32_t random)
{
    const auto t = static_cast<std::time_t>(when);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%S", &tm);
    return fmt::format("{}-{:08x}", buf, random);
}

std::uint32_t random_bits()
{
    std::uint32_t r = 0;
    if (::getrandom(&r, sizeof r, 0) == static_cast<ssize_t>(sizeof r)) return r;
    return std::random_device{}();  // getrandom missing or interrupted
}

void spank_plugin::export_submission(spank_host& host)
{
    // An srun inside the job (and a job started again by Slurm) keeps the
    // job's own: only a new submission makes one.
    if (auto given = host.getenv("PSTRAIN_SUBMISSION"); given && !given->empty()) return;
    host.setenv("PSTRAIN_SUBMISSION", submission_id(static_cast<std::int64_t>(std::time(nullptr)), random_bits()));
}

int spank_plugin::init(const std::vector<std::string>& args, spank_host& host)
{
    try {
        cfg_ = parse_plugstack_args(args);
    } catch (const error& e) {
        // On a compute node an error here would fail every step, with or
        // without --ps: keep it for task_init, where it fails only ours.
        if (host.where() == context::remote) {
            deferred_error_ = e.what();
            return 0;
        }
        report(host, e.what());
        return -1;
    }
    return 0;
}

int spank_plugin::set_option(option which, const char* optarg)
{
    switch (which) {
    case option::ps: given_.ps = std::string(optarg ? optarg : ""); break;
    case option::workers: given_.workers = std::string(optarg ? optarg : ""); break;
    case option::chief: given_.chief = true; break;
    case option::evaluator: given_.evaluator = true; break;
    case option::ps_spares: given_.ps_spares = std::string(optarg ? optarg : ""); break;
    }
    return 0;
}

int spank_plugin::init_post_opt(spank_host& host)
{
    try {
        shape_ = validate_options(given_, cfg_);
    } catch (const error& e) {
        if (host.where() == context::remote) {
            deferred_error_ = e.what();
            return 0;  // an error returned here would drain the node
        }
        report(host, e.what());
        return -1;
    }
    if (!shape_ || host.where() == context::remote) return 0;
    // The batch script and an srun inside it see the sizes.
    if (host.where() == context::allocator || host.where() == context::local) {
        export_sizes(host);
        export_submission(host);
    }
    return 0;
}

int spank_plugin::local_user_init(spank_host& host)
{
    if (!shape_) return 0;
    auto tasks = host.get(item::total_tasks);
    if (tasks && *tasks != static_cast<std::uint32_t>(shape_->total())) {
        report(host, task_count_error(*shape_, *tasks));
        return -1;
    }
    return 0;
}

int spank_plugin::task_init(spank_host& host)
{
    if (!deferred_error_.empty() &&
        (shape_ || given_.ps || given_.workers || given_.chief || given_.evaluator || given_.ps_spares)) {
        report(host, deferred_error_);
        return -1;
    }
    if (!shape_) return 0;
    auto step_id = host.get(item::step_id);
    if (!step_id || *step_id == extern_step_id) return 0;
    if (*step_id == batch_step_id || *step_id == interactive_step_id) {
        export_sizes(host);
        announce_version(host, host.get(item::job_id).value_or(0), *step_id, 0);
        return 0;
    }
    try {
        step_info step;
        auto rank = host.get(item::task_global_id);
        auto total = host.get(item::total_tasks);
        if (!rank || !total) throw error("slurmstepd did not give the task's rank or the step's task count");
        step.rank = static_cast<int>(*rank);
        step.total_tasks = static_cast<int>(*total);
        auto need = [&](const char* name) {
            auto v = host.getenv(name);
            if (!v) throw error(fmt::format("{} is not set in the task's environment", name));
            return *v;
        };
        step.nodelist = need("SLURM_STEP_NODELIST");
        step.tasks_per_node = need("SLURM_STEP_TASKS_PER_NODE");
        step.distribution = host.getenv("SLURM_DISTRIBUTION").value_or("");
        if (auto plane = host.getenv("SLURM_DIST_PLANESIZE"))
            step.plane_size = static_cast<int>(parse_count(*plane, 1, 1 << 20).value_or(1));
        step.job_id = host.get(item::job_id).value_or(0);
        step.step_id = *step_id;
        step.resv_ports = host.getenv("SLURM_STEP_RESV_PORTS");
        step.cuda_visible_devices = host.getenv("CUDA_VISIBLE_DEVICES");
        step.ephemeral_ports = host.ephemeral_ports();

        std::vector<std::string> warnings;
        auto env = task_environment(*shape_, cfg_, step, warnings);
        for (const auto& w : warnings) host.error("pstrain: warning: " + w);
        for (const auto& [name, value] : env) {
            if (!host.setenv(name, value)) throw error(fmt::format("cannot set {} in the task's environment", name));
        }
        announce_version(host, step.job_id, step.step_id, step.rank);
        host.verbose(fmt::format("pstrain: rank {} is {} {}", step.rank, env[0].second, env[1].second));
    } catch (const error& e) {
        report(host, e.what());
        return -1;
    }
    return 0;
}

}  // namespace pstrain::plugin
