// spank_pstrain.so: the C-ABI shell.  Each callback turns spank_t into a
// spank_host and hands over to pstrain::plugin::spank_plugin (pstrain_core.cpp).
// No exception crosses this boundary.
#include "plugin/pstrain_core.hpp"

#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

// spank.h declares the callbacks without C linkage when read as C++.
extern "C" {
#include <slurm/spank.h>
#include <slurm/slurm_version.h>
}

#define PSTRAIN_EXPORT extern "C" __attribute__((visibility("default")))

// What SPANK_PLUGIN(pstrain, 1) declares, spelled out: in C++ a namespace
// scope const has internal linkage, so the macro would export nothing.
extern "C" {
__attribute__((visibility("default"))) extern const char plugin_name[] = "pstrain";
__attribute__((visibility("default"))) extern const char plugin_type[] = "spank";
__attribute__((visibility("default"))) extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
__attribute__((visibility("default"))) extern const unsigned int spank_plugin_version = 1;
}

namespace {

using namespace pstrain::plugin;

spank_plugin the_plugin;

class slurm_host final : public spank_host {
public:
    explicit slurm_host(spank_t sp) : sp_(sp) {}

    context where() const override
    {
        switch (spank_context()) {
        case S_CTX_LOCAL: return context::local;
        case S_CTX_REMOTE: return context::remote;
        case S_CTX_ALLOCATOR: return context::allocator;
        case S_CTX_JOB_SCRIPT: return context::job_script;
        default: return context::other;
        }
    }

    std::optional<std::string> getenv(const std::string& name) const override
    {
        if (where() != context::remote) {
            const char* v = std::getenv(name.c_str());
            return v ? std::optional<std::string>(v) : std::nullopt;
        }
        std::vector<char> buf(4096);
        for (;;) {
            spank_err_t rc = spank_getenv(sp_, name.c_str(), buf.data(), static_cast<int>(buf.size()));
            if (rc == ESPANK_SUCCESS) return std::string(buf.data());
            if (rc != ESPANK_NOSPACE || buf.size() > (1u << 24)) return std::nullopt;
            buf.resize(buf.size() * 4);
        }
    }

    bool setenv(const std::string& name, const std::string& value) override
    {
        if (where() != context::remote) return ::setenv(name.c_str(), value.c_str(), 1) == 0;
        spank_err_t rc = spank_setenv(sp_, name.c_str(), value.c_str(), 1);
        if (rc != ESPANK_SUCCESS) slurm_error("pstrain: spank_setenv(%s): %s", name.c_str(), spank_strerror(rc));
        return rc == ESPANK_SUCCESS;
    }

    std::optional<std::uint32_t> get(item what) const override
    {
        spank_item_t key = S_JOB_ID;
        switch (what) {
        case item::job_id: key = S_JOB_ID; break;
        case item::step_id: key = S_JOB_STEPID; break;
        case item::total_tasks: key = S_JOB_TOTAL_TASK_COUNT; break;
        case item::task_global_id: key = S_TASK_GLOBAL_ID; break;
        }
        std::uint32_t value = 0;
        if (spank_get_item(sp_, key, &value) != ESPANK_SUCCESS) return std::nullopt;
        return value;
    }

    void error(const std::string& line) override { slurm_error("%s", line.c_str()); }
    void verbose(const std::string& line) override { slurm_verbose("%s", line.c_str()); }
    void info(const std::string& line) override { slurm_info("%s", line.c_str()); }

    std::optional<std::string> ephemeral_ports() const override
    {
        std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
        std::string line;
        if (!std::getline(in, line)) return std::nullopt;
        return line;
    }

private:
    spank_t sp_;
};

template <typename F>
int guarded(F&& f)
{
    try {
        return f();
    } catch (const std::exception& e) {
        slurm_error("pstrain: internal error: %s", e.what());
    } catch (...) {
        slurm_error("pstrain: internal error");
    }
    return -1;
}

int option_ps(int, const char* optarg, int)
{
    return guarded([&] { return the_plugin.set_option(option::ps, optarg); });
}
int option_workers(int, const char* optarg, int)
{
    return guarded([&] { return the_plugin.set_option(option::workers, optarg); });
}
int option_chief(int, const char* optarg, int)
{
    return guarded([&] { return the_plugin.set_option(option::chief, optarg); });
}
int option_evaluator(int, const char* optarg, int)
{
    return guarded([&] { return the_plugin.set_option(option::evaluator, optarg); });
}

int option_ps_spares(int, const char* optarg, int)
{
    return guarded([&] { return the_plugin.set_option(option::ps_spares, optarg); });
}

struct spank_option ps_option = {
    const_cast<char*>("ps"),
    const_cast<char*>("N"),
    const_cast<char*>("pstrain: run N parameter-server tasks (after --chief and --evaluator); needs --workers"),
    1,
    0,
    option_ps};
struct spank_option workers_option = {
    const_cast<char*>("workers"),
    const_cast<char*>("M"),
    const_cast<char*>(
        "pstrain: run M worker tasks after the PS tasks; worker 0 is the chief unless --chief; needs --ps"),
    1,
    0,
    option_workers};
struct spank_option chief_option = {
    const_cast<char*>("chief"),
    nullptr,
    const_cast<char*>(
        "pstrain: one more task, rank 0, of type chief (TensorFlow ParameterServerStrategy's coordinator)"),
    0,
    0,
    option_chief};
struct spank_option evaluator_option = {
    const_cast<char*>("evaluator"),
    nullptr,
    const_cast<char*>("pstrain: one more task of type evaluator, outside the training cluster in TF_CONFIG"),
    0,
    0,
    option_evaluator};

struct spank_option ps_spares_option = {
    const_cast<char*>("ps-spares"),
    const_cast<char*>("K"),
    const_cast<char*>("pstrain: K more parameter-server tasks after the N, waiting to take a lost one's place "
                      "(pstrain --ps-spares); needs --ps"),
    1,
    0,
    option_ps_spares};

}  // namespace

PSTRAIN_EXPORT int slurm_spank_init(spank_t sp, int ac, char** av)
{
    return guarded([&] {
        slurm_host host(sp);
        for (auto* opt : {&ps_option, &workers_option, &chief_option, &evaluator_option, &ps_spares_option}) {
            spank_err_t rc = spank_option_register(sp, opt);
            if (rc != ESPANK_SUCCESS) {
                slurm_error("pstrain: spank_option_register(--%s): %s", opt->name, spank_strerror(rc));
                return host.where() == context::remote ? 0 : -1;
            }
        }
        return the_plugin.init(std::vector<std::string>(av, av + ac), host);
    });
}

PSTRAIN_EXPORT int slurm_spank_init_post_opt(spank_t sp, int, char**)
{
    return guarded([&] {
        slurm_host host(sp);
        return the_plugin.init_post_opt(host);
    });
}

PSTRAIN_EXPORT int slurm_spank_local_user_init(spank_t sp, int, char**)
{
    return guarded([&] {
        slurm_host host(sp);
        return the_plugin.local_user_init(host);
    });
}

PSTRAIN_EXPORT int slurm_spank_task_init(spank_t sp, int, char**)
{
    return guarded([&] {
        slurm_host host(sp);
        return the_plugin.task_init(host);
    });
}
