#include "trainer/compute/precision.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace pstrain::compute {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// The register state the OS saves and restores (XCR0).
unsigned long long enabled_state()
{
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return 0;  // no OSXSAVE
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<unsigned long long>(hi) << 32) | lo;
}
#endif

}  // namespace

const char* precision_name(precision p) { return p == precision::bf16 ? "bf16" : "fp32"; }

cpu_features detect_cpu_features()
{
    cpu_features f;
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
    const unsigned max_subleaf = eax, leaf7_edx = edx;
    const auto state = enabled_state();
    // SSE, AVX, opmask, upper ZMM halves, ZMM16-31; AMX: XTILECFG and XTILEDATA.
    const bool avx512_state = (state & 0xe6) == 0xe6;
    const bool amx_state = (state & (3ull << 17)) == (3ull << 17);
    const bool avx512f = ebx & (1u << 16);
    if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx))
        f.avx512_bf16 = avx512f && avx512_state && (eax & (1u << 5));
    f.amx_bf16 = amx_state && (leaf7_edx & (1u << 24)) && (leaf7_edx & (1u << 22));  // AMX-TILE, AMX-BF16
#endif
    return f;
}

std::string bf16_refusal(const cpu_features& cpu, bool built_with_onednn)
{
    if (!built_with_onednn)
        return "--precision bf16: this pstrain was built without oneDNN, which multiplies in bf16: install libdnnl-dev "
               "and configure again, or use --precision fp32";
    if (!cpu.amx_bf16 && !cpu.avx512_bf16)
        return "--precision bf16: this CPU has neither AMX (amx_bf16) nor AVX512-BF16 (avx512_bf16): use --precision "
               "fp32";
    return "";
}

std::string_view bf16_unit(const cpu_features& cpu) { return cpu.amx_bf16 ? "AMX" : "AVX512-BF16"; }

}  // namespace pstrain::compute
