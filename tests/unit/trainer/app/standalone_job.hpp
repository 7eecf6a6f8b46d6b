// Helpers of the training loop's tests: a --standalone job of the linear
// model (its PS in a thread with the trainer's own checkpoint hooks, the
// loop over the loopback) in a fresh checkpoint directory, what it wrote
// to stderr, and a store that cannot put a given step's shard in place.
#pragma once

#include "pstrain/loopback.hpp"
#include "pstrain/server.hpp"
#include "trainer/app/tasks.hpp"
#include "trainer/app/training_loop.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "tests/unit/stderr_capture.hpp"

#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

namespace pstrain::testing {

// A checkpoint directory of its own, removed with everything in it.
struct scratch_directory {
    std::string path;
    scratch_directory()
    {
        char name[] = "/tmp/pstrain-test-loop-XXXXXX";
        BOOST_TEST_REQUIRE(::mkdtemp(name) != nullptr);
        path = name;
    }
    ~scratch_directory()
    {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
};

// The options of a short --standalone run of the linear model on the CPU,
// checkpointing into `dir`.
inline trainer::train_options linear_run(const std::string& dir, std::int64_t train_steps)
{
    trainer::train_options o;
    o.standalone = true;
    o.model = "linear";
    o.family = trainer::model_family::linear;
    o.device = compute::device_kind::cpu;
    o.threads = 1;
    o.batch_size = 10;
    o.train_steps = train_steps;
    o.checkpoint_dir = dir;
    o.save_checkpoint_secs = 0;
    o.job_comment = false;
    return o;
}

// How a standalone run ended: the loop's exit status, the PS's outcome.
struct run_result {
    int status = -1;
    ps::server_outcome ps = ps::server_outcome::done;
    std::string stderr_text;
};

// As run_standalone runs it, without its signal handler: the PS with the
// trainer's hooks (shards written by checkpoint::write_shard) in a thread,
// the chief's loop here.
inline run_result run_linear(const trainer::train_options& o)
{
    run_result r;
    r.stderr_text = stderr_of([&] {
        checkpoint::prepare_directory(o.checkpoint_dir);
        ps::loopback_network net(1, 1);
        ps::server server(net.ps(0), trainer::server_config_for(o, 0, 1), trainer::server_hooks_for(o));
        std::exception_ptr server_error;
        std::thread ps_thread([&] {
            try {
                r.ps = server.run();
            } catch (...) {
                server_error = std::current_exception();
            }
        });
        trainer::loop_role who;
        who.name = "the standalone worker";
        who.standalone = true;
        who.after_shutdown = [&] { ps_thread.join(); };
        try {
            r.status = trainer::run_training_loop(o, who, net.worker(0));
        } catch (...) {
            net.kill_worker(0);
            if (ps_thread.joinable()) ps_thread.join();
            throw;
        }
        if (ps_thread.joinable()) ps_thread.join();
        if (server_error) std::rethrow_exception(server_error);
    });
    BOOST_TEST_MESSAGE(r.stderr_text);
    return r;
}

// The store cannot put step `step`'s shard in place: a directory holds its
// name, so write_shard's rename fails (EISDIR) after the data were written
// under the temporary name, as a full disk or a lost mount fails a write.
inline void block_shard_of_step(const std::string& dir, std::uint64_t step)
{
    std::filesystem::create_directory(std::filesystem::path(dir) / checkpoint::shard_name(step, 0, 1));
}

inline void unblock(const std::string& dir)
{
    for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.is_directory()) std::filesystem::remove(e.path());
}

// The steps of the complete checkpoints in `dir` (checksums verified),
// newest first, and every file name there.
inline std::vector<std::uint64_t> complete_steps(const std::string& dir)
{
    std::vector<std::uint64_t> steps;
    for (const auto& c : checkpoint::list(dir, true))
        if (!c.manifest_file.empty() && c.problem.empty()) steps.push_back(c.step);
    return steps;
}

inline std::vector<std::string> files_in(const std::string& dir)
{
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
    return names;
}

inline bool any_temporary_file(const std::string& dir)
{
    for (const auto& name : files_in(dir))
        if (name.find(".tmp.") != std::string::npos) return true;
    return false;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace pstrain::testing
