// pstrain-run: runs a user's program (a TensorFlow parameter-server
// program) in every task of a `srun --ps=N --workers=M [--chief]` step,
// with the TF_CONFIG the SPANK plugin gave the task, and ends the step the
// way a TFJob would: when the deciding task's program (the chief, else
// worker 0) ends, every other task's program (ps and workers that
// server.join() forever) is stopped and the step's status is the chief's;
// a ps task whose program dies ends the step at once, naming it.
// torch-train.sh runs it too, for PyTorch programs whose ps tasks run
// `pstrain serve` (--ps-may-finish: a server the chief shut down exits 0).
//
// The step is ended with `scancel --signal=URG JOB.STEP`: every
// pstrain-run of the step then stops its program (SIGTERM, SIGKILL after
// --grace seconds) and exits 0, so the status of the task that ended it is
// the step's (srun reports the highest).  Slurm delivers the signal to every
// process of the step; SIGURG is ignored unless a program asks for it, so
// the programs are stopped by their pstrain-run alone, and a user's own
// --signal=USR1/USR2 means what the user meant.
//
// A SIGURG that reaches a task before its pstrain-run catches it (its node
// started the step late: slurmstepd not up yet, or pstrain-run still being
// exec'd) is lost, and that task (a ps: forever) would run on.  So
// pstrain-run blocks the signals first thing, and the task that ends a
// young step sends the end again every second until the step is
// --late-start seconds old.
#include "config.h"
#include "launcher/run_core.hpp"

#include "common/cluster_spec.hpp"
#include "common/parse.hpp"
#include "pstrain/error.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace {

using namespace pstrain;
using clock_type = std::chrono::steady_clock;

const char* usage = R"(usage: pstrain-run [OPTIONS] [--] PROGRAM [ARGS...]

Runs PROGRAM in every task of a srun --ps=N --workers=M [--chief] [--evaluator]
step with its TF_CONFIG (and PSTRAIN_*); when the chief's program (else
worker 0's) ends, the other tasks' programs are stopped and the step's
status is the chief's; a ps task whose program dies ends the step.

  srun --ps=2 --workers=2 --chief pstrain-run -- python3 my_model.py

Options:
  --classic-flags          also pass --ps_hosts --worker_hosts --job_name
                           --task_index (and --chief_hosts) to PROGRAM
  --worker-failures MODE   auto (default: tolerated with --chief, as
                           ParameterServerStrategy does; fatal without),
                           tolerate, tolerate-killed (a worker killed by
                           a signal is tolerated, one that exits with an
                           error ends the step) or fail
  --grace SECONDS          how long a stopped program gets after SIGTERM
                           before SIGKILL (default 10)
  --late-start SECONDS     how long after the step's start a task may still
                           be starting: the task that ends the step sooner
                           sends the end again every second until then
                           (default 10)
  --ps-may-finish          a ps task's program that exits 0 was told to end
                           (pstrain serve, after the chief's shutdown): the
                           step goes on until the chief ends (torch-train.sh)
  -h, --help               this text
  --version                pstrain's version

See pstrain-run(1).
)";

std::string prefix = "pstrain-run";

void say(const std::string& line) { std::fprintf(stderr, "%s: %s\n", prefix.c_str(), line.c_str()); }
void fail_line(const std::string& line) { std::fprintf(stderr, "%s: error: %s\n", prefix.c_str(), line.c_str()); }

struct arguments {
    bool classic_flags = false;
    run::worker_failures failures = run::worker_failures::automatic;
    int grace = 10;
    int late_start = 10;
    run::ps_exit ps_end = run::ps_exit::ends_step;
    std::vector<std::string> program;
};

// Options until "--" or the program's name; the rest is the program's.
std::optional<arguments> parse(int argc, char** argv, int& status)
{
    arguments a;
    int i = 1;
    const auto value = [&](const std::string& flag, const std::string& arg) -> std::string {
        const auto eq = arg.find('=');
        if (eq != std::string::npos) return arg.substr(eq + 1);
        if (i + 1 >= argc) throw error(fmt::format("{} needs a value: see pstrain-run --help", flag));
        return argv[++i];
    };
    for (; i < argc; ++i) {
        const std::string arg = argv[i];
        const std::string name = arg.substr(0, arg.find('='));
        if (arg == "--") {
            ++i;
            break;
        }
        if (arg == "-h" || arg == "--help") {
            std::fputs(usage, stdout);
            status = 0;
            return std::nullopt;
        }
        if (arg == "--version") {
            std::printf("pstrain-run %s\n", PACKAGE_VERSION);
            status = 0;
            return std::nullopt;
        }
        if (arg == "--classic-flags") {
            a.classic_flags = true;
        } else if (arg == "--ps-may-finish") {
            a.ps_end = run::ps_exit::may_finish;
        } else if (name == "--worker-failures") {
            a.failures = run::parse_worker_failures(value(name, arg));
        } else if (name == "--grace") {
            const auto text = value(name, arg);
            const auto n = parse_count(text, 0, 3600);
            if (!n) throw error(fmt::format("--grace {}: give whole seconds from 0 to 3600", text));
            a.grace = static_cast<int>(*n);
        } else if (name == "--late-start") {
            const auto text = value(name, arg);
            const auto n = parse_count(text, 0, 3600);
            if (!n) throw error(fmt::format("--late-start {}: give whole seconds from 0 to 3600", text));
            a.late_start = static_cast<int>(*n);
        } else if (!arg.empty() && arg[0] == '-') {
            throw error(
                fmt::format("unknown option '{}': see pstrain-run --help (the program's own flags go after --)", arg));
        } else {
            break;
        }
    }
    for (; i < argc; ++i) a.program.emplace_back(argv[i]);
    if (a.program.empty()) throw error("no program to run: pstrain-run [OPTIONS] -- PROGRAM [ARGS...]");
    return a;
}

std::string need_env(const char* name, const char* fix)
{
    const char* v = std::getenv(name);
    if (!v || !*v) throw error(fmt::format("{} is not set: {}", name, fix));
    return v;
}

// This task, from what the SPANK plugin set.
run::task this_task(cluster_spec& spec)
{
    const char* under = "run pstrain-run under srun --ps=N --workers=M (spank_pstrain.so in plugstack.conf)";
    const auto role_text = need_env("PSTRAIN_ROLE", under);
    // Spare PS tasks stand in for lost ones of pstrain's own trainer only.
    if (const char* k = std::getenv("PSTRAIN_PS_SPARES"); k && *k && std::string_view(k) != "0")
        throw error(fmt::format("this step has {} spare ps task(s) (--ps-spares={}), which only pstrain's own trainer "
                                "uses: run pstrain-run's programs without --ps-spares",
                                k, k));
    spec = parse_cluster_spec(need_env("PSTRAIN_CLUSTER", under));
    run::task t;
    if (role_text == "chief") t.id.role = role::chief;
    else if (role_text == "evaluator") t.id.role = role::evaluator;
    else if (role_text == "ps") t.id.role = role::ps;
    else if (role_text == "worker") t.id.role = role::worker;
    else throw error(fmt::format("PSTRAIN_ROLE={} is not chief, evaluator, ps or worker", role_text));
    const auto index = parse_count(need_env("PSTRAIN_TASK_INDEX", under), 0, 1 << 20);
    const auto& list = spec.tasks(t.id.role);
    if (!index || static_cast<std::size_t>(*index) >= list.size())
        throw error(fmt::format("PSTRAIN_TASK_INDEX is outside the {} tasks of PSTRAIN_CLUSTER", role_text));
    t.id.index = static_cast<int>(*index);
    t.host = split_host_port(list[static_cast<std::size_t>(t.id.index)]).first;
    t.has_chief = !spec.chief.empty();
    return t;
}

// Runs `argv` with no signal blocked and waits for it; its exit status,
// or -1 when it cannot run or its end cannot be known.  `quiet`: its
// standard error goes to /dev/null.
int run_and_wait(const std::vector<std::string>& argv, bool quiet = false)
{
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    if (quiet) posix_spawn_file_actions_addopen(&files, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    const int rc = posix_spawnp(&pid, args[0], &files, &attr, args.data(), environ);
    posix_spawn_file_actions_destroy(&files);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) return -1;
    int status = 0;
    pid_t done;
    while ((done = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {}
    if (done != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The signals pstrain-run handles, blocked from its first instruction on
// (sigtimedwait takes them): one sent before the program was started, a
// SIGURG above all, stays pending rather than being lost.
sigset_t handled_signals()
{
    sigset_t handled;
    sigemptyset(&handled);
    for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGURG}) sigaddset(&handled, s);
    return handled;
}

// Every pstrain-run of this step stops its program (SIGURG).  A step that
// began (this task's start stands for it) less than `late_start` ago may
// have a task that is still starting and misses the signal: it is sent
// again every second until then (quietly: scancel fails for the nodes
// whose tasks have ended), unless the step is signalled meanwhile.
void end_step(clock_type::time_point started, std::chrono::seconds late_start)
{
    const char* job = std::getenv("SLURM_JOB_ID");
    const char* step = std::getenv("SLURM_STEP_ID");
    if (!job || !step) {
        fail_line("not in a Slurm step (no SLURM_JOB_ID/SLURM_STEP_ID): the other tasks cannot be ended from here");
        return;
    }
    const auto id = fmt::format("{}.{}", job, step);
    const auto until = started + late_start;
    const int rc = run_and_wait({"scancel", "--quiet", "--signal=URG", id});
    if (rc < 0) {
        fail_line(
            fmt::format("scancel not found: the step's other tasks cannot be ended: end them with scancel {}", id));
        return;
    }
    if (rc != 0)  // "Invalid job id": a node's tasks have ended; "Job step not running": still starting
        say(fmt::format("note: scancel --signal=URG {} exited with status {} (as it does when some of the step's "
                        "tasks have ended already, or are still starting){}; if tasks of the step keep running, end "
                        "it with scancel {}",
                        id, rc,
                        clock_type::now() < until
                            ? fmt::format(": sent again every second until the step is {} s old", late_start.count())
                            : "",
                        id));
    auto handled = handled_signals();
    sigdelset(&handled, SIGURG);  // its own end, come back: nothing to do
    sigdelset(&handled, SIGCHLD);
    sigdelset(&handled, SIGUSR1);  // the user's own
    const timespec second{1, 0};
    while (clock_type::now() < until) {
        if (sigtimedwait(&handled, nullptr, &second) > 0) return;  // scancel, preemption: the step ends anyway
        run_and_wait({"scancel", "--quiet", "--signal=URG", id}, true);
    }
}

int supervise(const arguments& a, clock_type::time_point started)
{
    cluster_spec spec;
    const auto me = this_task(spec);
    // TensorFlow programs need TF_CONFIG; pstrain's own (--ps-may-finish: torch-train.sh) find PMIx or PSTRAIN_*.
    if (!a.classic_flags && a.ps_end == run::ps_exit::ends_step && !std::getenv("TF_CONFIG"))
        throw error(
            "TF_CONFIG is not set: the plugin's tf_config=no is set in plugstack.conf: pstrain-run needs TF_CONFIG "
            "(tf_config=yes), or give --classic-flags");
    prefix = fmt::format("pstrain-run[{} {}]", role_name(me.id.role), me.id.index);
    auto argv = a.program;
    if (a.classic_flags)
        for (auto& f : run::classic_flags(spec, me.id)) argv.push_back(std::move(f));

    sigset_t handled = handled_signals();
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &handled);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    std::vector<char*> args;
    for (const auto& s : argv) args.push_back(const_cast<char*>(s.c_str()));
    args.push_back(nullptr);
    pid_t child;
    const int spawn_error = posix_spawnp(&child, args[0], nullptr, &attr, args.data(), environ);
    posix_spawnattr_destroy(&attr);
    if (spawn_error != 0) {
        fail_line(fmt::format("cannot run '{}': {}: give a program on PATH or its path", argv[0],
                              std::strerror(spawn_error)));
        const auto o = run::on_program_exit(me, {false, 127}, a.failures, a.ps_end);
        if (o.end_step) end_step(started, std::chrono::seconds(a.late_start));
        return 127;
    }

    bool ending = false;  // another task ended the step (SIGURG)
    int step_signal = 0;  // the first SIGTERM/SIGINT/SIGHUP/SIGQUIT the step got
    std::optional<clock_type::time_point> kill_at;
    run::exit_info how;
    for (;;) {
        timespec tick{1, 0};
        siginfo_t info;
        const int sig = sigtimedwait(&handled, &info, &tick);
        if (sig == SIGURG && !ending) {
            ending = true;
            kill(child, SIGTERM);
            kill_at = clock_type::now() + std::chrono::seconds(a.grace);
        } else if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT || sig == SIGUSR1) {
            // Preemption, scancel, Ctrl-C: the program decides.  From
            // slurmstepd (our parent) it went to the whole step, the
            // program included: passed on only when sent to us alone.
            if (info.si_pid != getppid()) kill(child, sig);
            if (sig != SIGUSR1 && step_signal == 0) step_signal = sig;
        }
        if (kill_at && clock_type::now() >= *kill_at) {
            kill(child, SIGKILL);
            kill_at.reset();
        }
        int status = 0;
        const pid_t done = waitpid(child, &status, WNOHANG);
        if (done == child) {
            how = WIFSIGNALED(status) ? run::exit_info{true, WTERMSIG(status)}
                                      : run::exit_info{false, WEXITSTATUS(status)};
            break;
        }
    }
    // The step's end may have come with the program's (both pending).
    sigset_t pending;
    if (!ending && sigpending(&pending) == 0 && sigismember(&pending, SIGURG)) ending = true;
    const auto o = ending        ? run::on_step_ending(me, how)
                   : step_signal ? run::on_step_signalled(me, how, step_signal)
                                 : run::on_program_exit(me, how, a.failures, a.ps_end);
    if (!o.line.empty()) (o.is_error ? fail_line : say)(o.line);
    if (o.end_step) end_step(started, std::chrono::seconds(a.late_start));
    return o.exit_code;
}

}  // namespace

int main(int argc, char** argv)
{
    const auto started = clock_type::now();
    const sigset_t handled = handled_signals();
    sigprocmask(SIG_BLOCK, &handled, nullptr);
    int status = 0;
    try {
        auto a = parse(argc, argv, status);
        if (!a) return status;
        return supervise(*a, started);
    } catch (const pstrain::error& e) {
        fail_line(e.what());
        return 2;
    }
}
