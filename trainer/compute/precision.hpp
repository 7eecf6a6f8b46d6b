// --precision fp32|bf16: the operand type of the matrix products and
// convolutions of the forward and backward passes.  bf16 multiplies bf16
// operands and accumulates in float32 (oneDNN's matmul and convolution on
// AMX or AVX512-BF16); the outputs, the loss, softmax, normalization
// statistics, activations, the master weights and everything on the PS
// tasks stay float32.  Whether this
// CPU (and build) can run bf16 is decided from a feature set, so the
// refusal is testable on any machine.
#pragma once

#include <string>
#include <string_view>

namespace pstrain::compute {

enum class precision { fp32, bf16 };

// The option's words: "fp32", "bf16".
const char* precision_name(precision p);

// What the CPU offers for matrix products, as CPUID and the OS's enabled
// register state say (AMX counts only when the OS enables its tiles).
struct cpu_features {
    bool avx512_bf16 = false;  // vdpbf16ps on 512-bit registers
    bool amx_bf16 = false;     // tdpbf16ps on AMX tiles
    bool avx512 = false;       // AVX-512 F, BW, DQ and VL (SkylakeX and later)
    bool avx2_fma = false;     // AVX2 and FMA3 (Haswell and later)
};

// This machine's, read once.
cpu_features detect_cpu_features();

// The one line that refuses --precision bf16 on `cpu` in a build with or
// without oneDNN, naming what is missing and the fix; empty when bf16 can
// run.
std::string bf16_refusal(const cpu_features& cpu, bool built_with_onednn);

// The unit that multiplies: "AMX" or "AVX512-BF16" (when bf16_refusal is
// empty).
std::string_view bf16_unit(const cpu_features& cpu);

// The one line that refuses --precision bf16 on the GPU named `gpu`, of
// compute capability major.minor; empty where its tensor cores multiply
// bf16 (8.0 and later).  Inline: the CUDA module (cuda_backend.hpp) decides
// with it, and the tests check it on machines without a GPU.
inline std::string cuda_bf16_refusal(const std::string& gpu, int major, int minor)
{
    if (major >= 8) return {};
    return "--precision bf16 on " + gpu + " (compute capability " + std::to_string(major) + "." +
           std::to_string(minor) +
           "): cuBLAS and cuDNN multiply bf16 on the tensor cores of compute capability 8.0 and later (A100, H100): "
           "use --precision fp32 on this GPU, or --device cpu on a CPU with AMX or AVX512-BF16";
}

}  // namespace pstrain::compute
