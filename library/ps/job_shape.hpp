// The rules of a job's shape, held once: what a job's training settings
// and its tasks (the ps tasks and their spares, the workers and their
// room) must be together for the job to start.  Each rule is a small pure
// function; check_job applies them in order and returns the first
// refusal, in two voices: pstrain's command-line flags (the trainer's
// error line) and the library's settings (a server's error).
//
// Callers: the trainer, once its command line is parsed (the counts not
// yet known: the rules of the settings and flags alone) and before it
// connects (with the job's counts); the server, with its
// training_settings and the job's counts: num_ps, num_workers the workers
// it starts with (server_config::started_workers, else its transport's),
// max_workers its transport's room when that is more (else 0).  Its error
// is the refusal's `settings` text, the remedy its own.
//
// Threads: pure functions, any thread.
#pragma once

#include <pstrain/settings.hpp>

#include <optional>
#include <string>

namespace pstrain::ps {

struct job_shape {
    int num_ps = 0;       // the job's ps tasks, spares included (0: not known yet)
    int num_workers = 0;  // the workers it starts with (0: not known yet)
    // Room for workers that join later (--max-workers, the server's
    // transport beyond the workers it starts with); 0: none asked.
    int max_workers = 0;
    int ps_spares = 0;         // the last ps tasks wait as spares for a lost one
    bool checkpoints = false;  // a checkpoint directory, which a spare restores from
    bool standalone = false;   // one process: one worker, its PS in a thread
    bool serving = false;      // ps tasks for a program's workers (pstrain serve)
    // Room for workers: the most that may train at once.
    int room() const { return max_workers > num_workers ? max_workers : num_workers; }
};

struct job_refusal {
    std::string flags;     // in pstrain's flags: "--max-workers 8: room for workers that join later is for ..."
    std::string settings;  // in training_settings' and server_config's words (a server's error, before its remedy)
    std::string remedy;    // what a chief that asked for it should do instead, in the server's voice; may be empty
};

// nullopt when the job may start.
std::optional<job_refusal> check_job(const training_settings& s, const job_shape& shape);

}  // namespace pstrain::ps
