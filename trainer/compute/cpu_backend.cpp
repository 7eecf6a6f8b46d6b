#include "trainer/compute/cpu_backend.hpp"

#include "config.h"
#include "pstrain/error.hpp"
#include "trainer/compute/conv2d.hpp"
#include "trainer/compute/elementwise.hpp"
#include "trainer/compute/precision.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/prctl.h>
#include <unistd.h>

#include <cblas.h>
#include <fmt/format.h>

// OpenBLAS extensions (declared in OpenBLAS's cblas.h, not in others').
extern "C" {
void openblas_set_num_threads(int) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
char* openblas_get_corename(void) __attribute__((weak));
}

namespace pstrain::compute {

std::string blas_description()
{
    if (!openblas_get_corename || !openblas_get_num_threads) return "CBLAS";
    // main() names the kernels when OpenBLAS fell back to Prescott's.
    const char* asked = std::getenv("PSTRAIN_OPENBLAS_CORETYPE");
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    const bool by_pstrain = asked && coretype && std::strcmp(asked, coretype) == 0;
    return fmt::format("OpenBLAS {} kernel{}, {} threads", openblas_get_corename(),
                       by_pstrain ? fmt::format(" (OPENBLAS_CORETYPE={} set by pstrain: this OpenBLAS does not know "
                                                "this CPU and took it for a Prescott)",
                                                coretype)
                                  : "",
                       openblas_get_num_threads());
}

std::string openblas_coretype_for(std::string_view chosen_kernels, const cpu_features& cpu)
{
    if (chosen_kernels != "Prescott") return {};
    if (cpu.avx512 && cpu.avx512_bf16) return "Cooperlake";
    if (cpu.avx512) return "SkylakeX";
    if (cpu.avx2_fma) return "Haswell";
    return {};
}

std::string openblas_coretype_to_set()
{
    if (!openblas_get_corename || std::getenv("OPENBLAS_CORETYPE")) return {};
    const char* chosen = openblas_get_corename();
    return chosen ? openblas_coretype_for(chosen, detect_cpu_features()) : std::string();
}

namespace {

// The kernel names a process after the file it executed, and this one is
// /proc/self/exe: the name the task had (what `pgrep -x`, `ps -C`, `top` and
// `killall` find) goes to the new image in the environment, which takes it
// back at once.  argv, argv[0] included, is passed on as it was.
constexpr const char* name_variable = "PSTRAIN_PROCESS_NAME";

void take_back_the_process_name()
{
    const char* name = std::getenv(name_variable);
    if (!name) return;
    ::prctl(PR_SET_NAME, name, 0, 0, 0);
    ::unsetenv(name_variable);
}

}  // namespace

void run_again_with_the_cpus_openblas_kernels(char** argv)
{
    take_back_the_process_name();
    const auto coretype = openblas_coretype_to_set();
    if (coretype.empty()) return;
    char name[17] = {};  // the kernel's TASK_COMM_LEN (16) and a terminator
    if (::prctl(PR_GET_NAME, name, 0, 0, 0) == 0) ::setenv(name_variable, name, 1);
    ::setenv("OPENBLAS_CORETYPE", coretype.c_str(), 1);
    ::setenv("PSTRAIN_OPENBLAS_CORETYPE", coretype.c_str(), 1);
    ::execv("/proc/self/exe", argv);
    ::unsetenv("OPENBLAS_CORETYPE");  // not executed: go on with OpenBLAS's own choice
    ::unsetenv("PSTRAIN_OPENBLAS_CORETYPE");
    ::unsetenv(name_variable);
}

cpu_backend::cpu_backend(int threads)
{
    if (threads > 0 && openblas_set_num_threads) openblas_set_num_threads(threads);
    cpu::set_conv2d_threads(threads);  // oneDNN's, when built with it
}

cpu_backend::cpu_backend(int threads, std::unique_ptr<cpu::matmul_bf16> bf16, std::string unit) : cpu_backend(threads)
{
    bf16_ = std::move(bf16);
    bf16_unit_ = std::move(unit);
}

std::string cpu_backend::name() const
{
    if (bf16_) return fmt::format("cpu ({}; bf16 matrix products on oneDNN ({}))", blas_description(), bf16_unit_);
    return fmt::format("cpu ({})", blas_description());
}

void* cpu_backend::allocate(std::size_t bytes)
{
    // 64-byte aligned for the BLAS kernels.
    std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded ? rounded : 64);
    return p;
}

void cpu_backend::release(void* p) noexcept { std::free(p); }
void cpu_backend::copy_to_device(void* dst, const void* src, std::size_t bytes)
{
    if (dst != src) std::memcpy(dst, src, bytes);
}
void cpu_backend::copy_to_host(void* dst, const void* src, std::size_t bytes)
{
    if (dst != src) std::memcpy(dst, src, bytes);
}

void cpu_backend::linear_forward(const float* x, const float* w, const float* b, float* y, int rows, int in, int out)
{
    if (bf16_) return bf16_->linear_forward(x, w, b, y, rows, in, out);
    for (int r = 0; r < rows; ++r) std::memcpy(y + std::size_t(r) * out, b, sizeof(float) * std::size_t(out));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, out, in, 1.0f, x, in, w, out, 1.0f, y, out);
}

void cpu_backend::linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                                  int rows, int in, int out)
{
    if (bf16_) bf16_->linear_backward(x, w, dy, dx, dw, rows, in, out);
    else cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, rows, 1.0f, x, in, dy, out, 0.0f, dw, out);
    for (int c = 0; c < out; ++c) db[c] = 0.0f;
    for (int r = 0; r < rows; ++r) {
        const float* row = dy + std::size_t(r) * out;
        for (int c = 0; c < out; ++c) db[c] += row[c];
    }
    if (dx && !bf16_)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, in, out, 1.0f, dy, out, w, out, 0.0f, dx, in);
}

void cpu_backend::relu_forward(const float* z, float* a, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i) a[i] = relu(z[i]);
}

void cpu_backend::relu_backward(const float* z, const float* da, float* dz, std::size_t n)
{
    for (std::size_t i = 0; i < n; ++i) dz[i] = relu_grad(z[i], da[i]);
}

backend::loss_sums cpu_backend::softmax_xent(const float* logits, const std::int32_t* labels, float* dlogits, int rows,
                                             int classes)
{
    loss_sums sums;
    const float scale = 1.0f / static_cast<float>(rows);
    for (int r = 0; r < rows; ++r) {
        const float* row = logits + std::size_t(r) * classes;
        const int label = labels[r];
        const float m = row_max(row, classes);
        const float s = row_sum_exp(row, classes, m);
        sums.loss += xent_loss(row, classes, label, m, s);
        sums.correct += row_argmax(row, classes) == label;
        if (dlogits) {
            float* g = dlogits + std::size_t(r) * classes;
            for (int c = 0; c < classes; ++c) g[c] = xent_grad(row[c], m, s, c == label, scale);
        }
    }
    return sums;
}

backend::loss_sums cpu_backend::squared_error(const float* pred, const float* target, float* dpred, int rows)
{
    loss_sums sums;
    for (int r = 0; r < rows; ++r) {
        const float d = pred[r] - target[r];
        sums.loss += double(d) * d;
        if (dpred) dpred[r] = 2.0f * d / static_cast<float>(rows);
    }
    return sums;
}

std::unique_ptr<layer_kernels> cpu_backend::make_layer_kernels()
{
    return cpu::make_layer_kernels(bf16_ ? precision::bf16 : precision::fp32);
}

#ifndef HAVE_DNNL
std::unique_ptr<cpu::matmul_bf16> cpu::make_matmul_bf16() { throw error(bf16_refusal({}, false)); }
#endif

}  // namespace pstrain::compute
