// The SPANK plugin's logic, free of Slurm types: spank_pstrain.cpp is a thin
// C-ABI shell that hands each callback to `spank_plugin` through a `spank_host`,
// and the unit tests drive the same code with a fake host.
#pragma once

#include "common/cluster_spec.hpp"
#include "common/layout.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pstrain::plugin {

enum class context { local, remote, allocator, job_script, other };

enum class item { job_id, step_id, total_tasks, task_global_id };

// What the plugin needs from Slurm; one implementation over spank_t, one fake.
class spank_host {
public:
    virtual ~spank_host() = default;
    virtual context where() const = 0;
    virtual std::optional<std::string> getenv(const std::string& name) const = 0;
    virtual bool setenv(const std::string& name, const std::string& value) = 0;
    virtual std::optional<std::uint32_t> get(item what) const = 0;
    virtual void error(const std::string& line) = 0;
    virtual void verbose(const std::string& line) = 0;
    // A line for the log at Slurm's default level (slurm_info: slurmd's log
    // on a compute node).
    virtual void info(const std::string& line) { verbose(line); }
    // The kernel's ephemeral ports, as /proc/sys/net/ipv4/ip_local_port_range
    // reads ("32768\t60999"); none where it cannot be read.
    virtual std::optional<std::string> ephemeral_ports() const { return std::nullopt; }
};

// Slurm's special step ids (slurm.h).
inline constexpr std::uint32_t batch_step_id = 0xfffffffb;
inline constexpr std::uint32_t extern_step_id = 0xfffffffc;
inline constexpr std::uint32_t interactive_step_id = 0xfffffffa;

enum class gpu_policy { split, share, none };
enum class ps_placement { rank, spread };

// plugstack.conf arguments (key=value).
struct config {
    bool tf_config = true;
    gpu_policy gpu_bind = gpu_policy::split;
    ps_placement placement = ps_placement::rank;
    // Below Linux's default ephemeral ports (32768-60999), which outgoing
    // connections take and a listening task would then find in use.
    int port_min = 20000;
    int port_max = 29999;
    // node: tasks on different nodes may share a port number (the usual
    // cluster); step: every task of a step gets its own (nodes that share
    // one address, like pstrain-cluster's virtual nodes on one machine).
    bool unique_ports = false;
    int max_tasks = 4096;
};
config parse_plugstack_args(const std::vector<std::string>& args);

struct job_shape {
    int num_ps;
    int num_workers;
    bool chief = false;      // --chief: one separate chief task (TensorFlow's coordinator)
    bool evaluator = false;  // --evaluator: one task outside the training cluster
    // --ps-spares: K more ps tasks after the num_ps (indices num_ps and
    // up) that wait to take a lost PS's place (pstrain --ps-spares).
    int ps_spares = 0;
    int total() const { return num_ps + ps_spares + num_workers + chief + evaluator; }
    std::string flags() const;  // "--ps=2 --workers=2 --chief --ps-spares=1"
};

// The raw values of --ps and --workers, and whether --chief and
// --evaluator were given, as the option callbacks saw them.
struct option_values {
    std::optional<std::string> ps;
    std::optional<std::string> workers;
    bool chief = false;
    bool evaluator = false;
    std::optional<std::string> ps_spares;
};

enum class option { ps, workers, chief, evaluator, ps_spares };

// std::nullopt when neither option is given (the plugin is then inert).
std::optional<job_shape> validate_options(const option_values& given, const config& cfg);

std::string task_count_error(const job_shape& shape, std::uint32_t step_tasks);

// What one task knows of its step.
struct step_info {
    int rank = 0;
    int total_tasks = 0;
    std::string nodelist;        // SLURM_STEP_NODELIST
    std::string tasks_per_node;  // SLURM_STEP_TASKS_PER_NODE
    std::string distribution;    // SLURM_DISTRIBUTION ("" = block)
    int plane_size = 1;          // SLURM_DIST_PLANESIZE
    std::uint32_t job_id = 0;
    std::uint32_t step_id = 0;
    std::optional<std::string> resv_ports;            // SLURM_STEP_RESV_PORTS
    std::optional<std::string> cuda_visible_devices;  // as Slurm's gres/gpu set it
    std::optional<std::string> ephemeral_ports;       // net.ipv4.ip_local_port_range: "LOW HIGH"
};

// Which role each rank gets, in rank order: the chief, the evaluator, the
// ps tasks, the workers (TensorFlow's SlurmClusterResolver's order; with
// ps_placement=spread the ps tasks are spread over the nodes instead).
std::vector<task_id> assign_roles(const job_shape& shape, const task_layout& layout, ps_placement placement);

using environment = std::vector<std::pair<std::string, std::string>>;

// PSTRAIN_SUBMISSION: one submission of a job, made when sbatch, salloc or
// srun submits it: the UTC time `when` and 8 hex digits of `random`,
// "20261124T193000-a1b2c3d4".  Slurm keeps it with the job's environment,
// so a requeued job has it still, while a job submitted anew under a job id
// seen before (a controller started afresh) has another.
std::string submission_id(std::int64_t when, std::uint32_t random);
// 32 bits from the kernel's random source (getrandom).
std::uint32_t random_bits();

// The PSTRAIN_*/TF_CONFIG/CUDA_VISIBLE_DEVICES variables of one task.
// Throws pstrain::error; appends non-fatal findings to `warnings`.
environment task_environment(const job_shape& shape, const config& cfg, const step_info& step,
                             std::vector<std::string>& warnings);

// The line the plugin logs once per job: its release (the pstrain release
// it belongs to, PSTRAIN_PLUGIN_VERSION in every task), the Slurm it was
// built against, the job and its shape.
std::string version_line(const job_shape& shape, std::uint32_t job_id);
// Whether this task logs it: the batch step of a batch job, else the first
// task of step 0 (srun or salloc made the job; `in_batch_job`: ENVIRONMENT
// is BATCH, as sbatch sets it for the script and every srun in it).
bool logs_version(std::uint32_t step_id, int rank, bool in_batch_job);

// State across the callbacks of one process (srun, sbatch or slurmstepd).
class spank_plugin {
public:
    int init(const std::vector<std::string>& args, spank_host& host);
    int set_option(option which, const char* optarg);
    int init_post_opt(spank_host& host);
    int local_user_init(spank_host& host);
    int task_init(spank_host& host);

    const config& settings() const { return cfg_; }

private:
    static void report(spank_host& host, const std::string& line);  // one "pstrain: " error line
    void export_sizes(spank_host& host) const;        // PSTRAIN_NUM_PS, _NUM_WORKERS, _CHIEF, _EVALUATOR, _PS_SPARES
    static void export_submission(spank_host& host);  // PSTRAIN_SUBMISSION, unless already set
    // PSTRAIN_PLUGIN_VERSION, and the version line when logs_version says so.
    void announce_version(spank_host& host, std::uint32_t job_id, std::uint32_t step_id, int rank) const;

    config cfg_;
    option_values given_;
    std::optional<job_shape> shape_;
    std::string deferred_error_;  // found on a compute node, reported from task_init
};

}  // namespace pstrain::plugin
