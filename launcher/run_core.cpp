#include "launcher/run_core.hpp"

#include "pstrain/error.hpp"

#include <cstring>

#include <fmt/format.h>

namespace pstrain::run {

worker_failures parse_worker_failures(const std::string& text)
{
    if (text == "auto") return worker_failures::automatic;
    if (text == "tolerate") return worker_failures::tolerate;
    if (text == "tolerate-killed") return worker_failures::tolerate_killed;
    if (text == "fail") return worker_failures::fail;
    throw error(fmt::format("--worker-failures {}: use auto, tolerate, tolerate-killed or fail", text));
}

std::string task::name() const
{
    const bool chief = (id.role == role::chief) || (!has_chief && id.role == role::worker && id.index == 0);
    return fmt::format("{} {} ({}{})", role_name(id.role), id.index, host.empty() ? "?" : host,
                       chief && id.role != role::chief ? ", the chief" : "");
}

bool task::decides() const { return has_chief ? id.role == role::chief : id.role == role::worker && id.index == 0; }

std::string exit_info::describe() const
{
    if (!signalled) return fmt::format("exit status {}", value);
    const char* what = strsignal(value);
    return fmt::format("signal {} ({})", value, what ? what : "?");
}

int exit_info::shell_status() const { return signalled ? 128 + value : value; }

outcome on_program_exit(const task& me, exit_info how, worker_failures policy, ps_exit ps)
{
    outcome o;
    const bool clean = !how.signalled && how.value == 0;
    if (me.decides()) {
        // Its end is the step's end, whatever the status.
        o.end_step = true;
        o.exit_code = how.shell_status();
        o.line = fmt::format("{} ended with {}: ending the step's other tasks", me.name(), how.describe());
        o.is_error = !clean;
        return o;
    }
    const auto r = me.id.role;
    if (clean && r != role::ps) return o;  // a between-graph worker that finished: nothing to do
    if (clean && ps == ps_exit::may_finish) {
        o.line = fmt::format("{} ended with {}: its server was shut down; the step ends when the chief does", me.name(),
                             how.describe());
        return o;
    }
    // With a separate chief, ParameterServerStrategy's coordinator goes on
    // without a lost (killed) worker; one that exits with an error (a port
    // in use, a bad script) failed at start and leaves it waiting forever.
    const bool killed_only = policy == worker_failures::tolerate_killed;
    const bool coordinated = policy == worker_failures::automatic && me.has_chief;
    const bool tolerated =
        r == role::evaluator ||
        (r == role::worker && (policy == worker_failures::tolerate || ((killed_only || coordinated) && how.signalled)));
    if (tolerated) {
        const char* why = r != role::worker ? ""
                          : killed_only     ? " (pstrain's servers go on with the workers left)"
                                            : " (ParameterServerStrategy's coordinator tolerates a lost worker)";
        o.line = fmt::format("{} ended with {}; the job goes on without it{}", me.name(), how.describe(), why);
        return o;  // exit 0: the step must not be ended for it
    }
    o.end_step = true;
    o.exit_code = how.shell_status() == 0 ? 1 : how.shell_status();
    o.is_error = true;
    // A ps serves until the step ends: even a clean exit leaves the chief waiting.
    o.line =
        r == role::ps
            ? fmt::format("{} ended with {}{}: the job cannot go on without its ps tasks{}: ending the step", me.name(),
                          how.describe(), clean ? " before the chief (does the program join() its server?)" : "",
                          ps == ps_exit::ends_step ? " (TensorFlow would wait for it forever)" : "")
        : killed_only
            ? fmt::format("{} ended with {}: a worker that fails (rather than being killed) would fail again: see "
                          "its error above: ending the step",
                          me.name(), how.describe())
        : coordinated
            ? fmt::format("{} ended with {}: the coordinator would wait for it forever (it goes on only without "
                          "a worker killed by a signal): see its error above: ending the step",
                          me.name(), how.describe())
            : fmt::format("{} ended with {}: without a separate chief its loss ends the job (give --worker-failures "
                          "tolerate to go on without it): ending the step",
                          me.name(), how.describe());
    return o;
}

outcome on_step_ending(const task& me, exit_info how)
{
    outcome o;
    o.line = fmt::format("{}: the step is ending: its program stopped ({})", me.name(), how.describe());
    return o;
}

outcome on_step_signalled(const task& me, exit_info how, int signal)
{
    outcome o;
    // The decider's status is the step's (143: tf-train.sh requeues); the
    // others exit 0, so that srun --kill-on-bad-exit leaves the chief time
    // to finish.
    o.exit_code = me.decides() ? how.shell_status() : 0;
    const char* name = strsignal(signal);
    o.line = fmt::format("{} ended with {} after the step was sent signal {} ({})", me.name(), how.describe(), signal,
                         name ? name : "?");
    return o;
}

std::vector<std::string> classic_flags(const cluster_spec& spec, task_id me)
{
    const auto joined = [](const std::vector<std::string>& v) {
        std::string out;
        for (const auto& a : v) out += (out.empty() ? "" : ",") + a;
        return out;
    };
    std::vector<std::string> flags{"--ps_hosts=" + joined(spec.ps), "--worker_hosts=" + joined(spec.worker)};
    if (!spec.chief.empty()) flags.push_back("--chief_hosts=" + joined(spec.chief));
    flags.push_back(fmt::format("--job_name={}", role_name(me.role)));
    flags.push_back(fmt::format("--task_index={}", me.index));
    return flags;
}

}  // namespace pstrain::run
