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
    const bool avx_state = (state & 0x6) == 0x6;
    const bool avx512_state = (state & 0xe6) == 0xe6;
    const bool amx_state = (state & (3ull << 17)) == (3ull << 17);
    const bool avx512f = ebx & (1u << 16);
    // Leaf 7 EBX: AVX2 (5), AVX512F (16), AVX512DQ (17), AVX512BW (30), AVX512VL (31).
    const unsigned avx512_bits = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
    f.avx512 = avx512_state && (ebx & avx512_bits) == avx512_bits;
    const bool avx2 = ebx & (1u << 5);
    unsigned eax1 = 0, ebx1 = 0, ecx1 = 0, edx1 = 0;
    const bool fma = __get_cpuid(1, &eax1, &ebx1, &ecx1, &edx1) && (ecx1 & (1u << 12));
    f.avx2_fma = avx_state && avx2 && fma;
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
