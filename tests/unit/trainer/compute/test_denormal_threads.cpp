// Denormals on the threads that compute (issue 45).  pstrain's executable
// flushes them from its .preinit_array (trainer/early_init.cpp, linked into
// this program too), before OpenBLAS starts its threads as it is loaded, so
// those threads and oneDNN's OpenMP threads compute with them flushed.
// Seen from inside them: a product of a denormal (1e-39) operand with ones,
// spread over the library's threads, is exactly 0 everywhere when every
// thread flushes, and in * 1e-39 (a normal number) wherever one kept them.
// Each case also runs in a child process with PSTRAIN_DENORMALS=keep, which
// must fail it: the check sees the mode.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE denormal_threads
#include <boost/test/unit_test.hpp>

#include "common/denormals.hpp"
#include "trainer/compute/backend.hpp"
#include "trainer/compute/conv2d.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

using namespace pstrain;
using namespace pstrain::compute;

namespace {

constexpr float denormal = 1e-39f;

bool kept_by_the_environment()
{
    const char* asked = std::getenv("PSTRAIN_DENORMALS");
    return asked && std::string(asked) == "keep";
}

std::size_t nonzero(const std::vector<float>& v)
{
    return static_cast<std::size_t>(std::count_if(v.begin(), v.end(), [](float x) { return x != 0.0f; }));
}

// This program's case `name` again, in a child with PSTRAIN_DENORMALS=keep:
// its exit status.
int run_case_keeping_denormals(const std::string& name)
{
    std::vector<std::string> env_text{"PSTRAIN_DENORMALS=keep"};
    for (char** e = environ; *e; ++e)
        if (std::string(*e).rfind("PSTRAIN_DENORMALS=", 0) != 0) env_text.emplace_back(*e);
    std::vector<char*> env;
    for (auto& s : env_text) env.push_back(s.data());
    env.push_back(nullptr);
    std::string self = "/proc/self/exe", run = "--run_test=" + name, quiet = "--log_level=nothing",
                report = "--report_level=no";
    char* argv[] = {self.data(), run.data(), quiet.data(), report.data(), nullptr};
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&files, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, self.c_str(), &files, nullptr, argv, env.data());
    posix_spawn_file_actions_destroy(&files);
    if (rc != 0) return -1;
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The case fails where denormals are kept: the check can fail.
void fails_when_denormals_are_kept(const std::string& name)
{
    if (kept_by_the_environment() || !can_flush_denormals()) return;
    BOOST_TEST(run_case_keeping_denormals(name) != 0, name << " passed with PSTRAIN_DENORMALS=keep");
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_main_thread_flushes_from_the_start)
{
    if (!can_flush_denormals()) return;
    BOOST_TEST((current_denormal_mode() == denormal_mode::flush));
    fails_when_denormals_are_kept("the_main_thread_flushes_from_the_start");
}

// OpenBLAS's threads were started as it was loaded, before main().
BOOST_AUTO_TEST_CASE(openblas_threads_compute_a_denormal_operand_as_zero)
{
    if (!can_flush_denormals()) return;
    const int rows = 512, in = 512, out = 512;
    auto be = make_backend(device_kind::cpu, precision::fp32, std::max(2u, std::thread::hardware_concurrency()));
    std::vector<float> x(std::size_t(rows) * in, denormal), w(std::size_t(in) * out, 1.0f), b(out, 0.0f),
        y(std::size_t(rows) * out, -1.0f);
    be->linear_forward(x.data(), w.data(), b.data(), y.data(), rows, in, out);
    BOOST_TEST(nonzero(y) == 0u, be->name());
    fails_when_denormals_are_kept("openblas_threads_compute_a_denormal_operand_as_zero");
}

// oneDNN's convolutions run on OpenMP threads, made at their first use.
BOOST_AUTO_TEST_CASE(onednn_threads_compute_a_denormal_operand_as_zero)
{
    if (!can_flush_denormals() || !cpu::have_onednn()) return;
    window2d win;
    win.channels = 8;
    win.height = win.width = 28;
    win.kh = win.kw = 5;
    win.pad_top = win.pad_left = 2;
    win.out_h = win.out_w = 28;
    const int filters = 16, n = 32;
    cpu::set_conv2d_threads(std::max(2u, std::thread::hardware_concurrency()));
    auto conv = cpu::make_conv2d(win, filters, n, cpu::conv2d_impl::onednn);
    std::vector<float> x(std::size_t(n) * win.channels * win.height * win.width, denormal),
        k(std::size_t(filters) * win.channels * win.kh * win.kw, 1.0f), bias(filters, 0.0f),
        y(std::size_t(n) * filters * win.out_h * win.out_w, -1.0f);
    conv->forward(x.data(), k.data(), bias.data(), y.data(), n);
    BOOST_TEST(nonzero(y) == 0u);
    fails_when_denormals_are_kept("onednn_threads_compute_a_denormal_operand_as_zero");
}
