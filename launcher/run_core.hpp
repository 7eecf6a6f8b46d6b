// pstrain-run's decisions, free of processes and Slurm: which task decides
// when the step ends, what a program's exit means for the step, and the
// classic TensorFlow flags of a task.  launcher/pstrain_run.cpp carries
// them out; tests/unit/launcher drives them directly.
#pragma once

#include "common/cluster_spec.hpp"

#include <optional>
#include <string>
#include <vector>

namespace pstrain::run {

enum class worker_failures {
    automatic,  // tolerated with a separate chief (ParameterServerStrategy), fatal without
    tolerate,
    tolerate_killed,  // a worker killed by a signal is lost and tolerated; one that exits with an error ends the step
    fail,
};
worker_failures parse_worker_failures(const std::string& text);  // throws pstrain::error naming the flag

// What a ps task's program that exits 0 means.
enum class ps_exit {
    ends_step,   // a ps serves until the step ends (TensorFlow's server.join()): ending early is an error
    may_finish,  // the ps was told to end (pstrain serve, after the chief's shutdown): the step goes on
};

struct task {
    task_id id{role::worker, 0};
    std::string host;          // for messages
    bool has_chief = false;    // the step has a separate chief task (--chief)
    std::string name() const;  // "ps 0 (n2)", "worker 0 (n1, the chief)"
    // The chief, else worker 0: its program's end is the step's end.
    bool decides() const;
};

// How a program ended.
struct exit_info {
    bool signalled = false;
    int value = 0;                 // exit status, or signal number
    std::string describe() const;  // "exit status 3", "signal 9 (Killed)"
    int shell_status() const;      // as a shell reports it: status, or 128 + signal
};

struct outcome {
    bool end_step = false;  // end the step's other tasks (they stop their programs and exit 0)
    int exit_code = 0;      // pstrain-run's own exit status
    std::string line;       // one line for the log ("" for none)
    bool is_error = false;
};

// What to do when this task's program ended on its own (not because the
// step was being ended).
outcome on_program_exit(const task& me, exit_info how, worker_failures policy, ps_exit ps = ps_exit::ends_step);

// The step is ending because another task decided: the program was stopped
// (or ended meanwhile).  pstrain-run exits 0: the deciding task's status is
// the step's.
outcome on_step_ending(const task& me, exit_info how);

// The step was signalled (SIGTERM from preemption, scancel, srun ending it)
// and the program ended after it: every task got the signal, so nothing
// is ended from here; the deciding task's status is the program's (143
// after SIGTERM, on which tf-train.sh requeues), the others exit 0.
outcome on_step_signalled(const task& me, exit_info how, int signal);

// --ps_hosts=H:P,... --worker_hosts=H:P,... --job_name=ROLE --task_index=I
// (and --chief_hosts when the step has a chief).
std::vector<std::string> classic_flags(const cluster_spec& spec, task_id me);

}  // namespace pstrain::run
