// --precision bf16's checks of the CPU: the refusal line for a CPU without
// AMX or AVX512-BF16 and for a build without oneDNN (from a feature set, so
// it is tested on any machine), the refusal for a GPU without bf16 tensor
// cores, and the unit the device line names.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE precision
#include <boost/test/unit_test.hpp>

#include "config.h"
#include "pstrain/error.hpp"
#include "trainer/compute/backend.hpp"
#include "trainer/compute/precision.hpp"

#include <cstdlib>
#include <string>

using namespace pstrain::compute;

BOOST_AUTO_TEST_CASE(a_cpu_without_amx_or_avx512_bf16_is_refused_in_one_line)
{
    BOOST_TEST(bf16_refusal(cpu_features{false, false}, true) ==
               "--precision bf16: this CPU has neither AMX (amx_bf16) nor AVX512-BF16 (avx512_bf16): use --precision "
               "fp32");
}

BOOST_AUTO_TEST_CASE(either_unit_is_enough)
{
    BOOST_TEST(bf16_refusal(cpu_features{true, false}, true).empty());
    BOOST_TEST(bf16_refusal(cpu_features{false, true}, true).empty());
    BOOST_TEST(bf16_refusal(cpu_features{true, true}, true).empty());
    BOOST_TEST(bf16_unit(cpu_features{true, false}) == "AVX512-BF16");
    BOOST_TEST(bf16_unit(cpu_features{true, true}) == "AMX", "AMX first: it multiplies tiles");
}

BOOST_AUTO_TEST_CASE(a_build_without_onednn_is_refused_whatever_the_cpu)
{
    const std::string line = bf16_refusal(cpu_features{true, true}, false);
    BOOST_TEST(line ==
               "--precision bf16: this pstrain was built without oneDNN, which multiplies in bf16: install libdnnl-dev "
               "and configure again, or use --precision fp32");
}

BOOST_AUTO_TEST_CASE(a_gpu_without_bf16_tensor_cores_is_refused_naming_it_and_the_fix)
{
    BOOST_TEST(cuda_bf16_refusal("Tesla V100-SXM2-32GB", 7, 0) ==
               "--precision bf16 on Tesla V100-SXM2-32GB (compute capability 7.0): cuBLAS and cuDNN multiply bf16 on "
               "the tensor cores of compute capability 8.0 and later (A100, H100): use --precision fp32 on this GPU, "
               "or --device cpu on a CPU with AMX or AVX512-BF16");
    BOOST_TEST(cuda_bf16_refusal("Tesla T4", 7, 5).find("(compute capability 7.5)") != std::string::npos);
    BOOST_TEST(cuda_bf16_refusal("NVIDIA A100-SXM4-80GB", 8, 0).empty());
    BOOST_TEST(cuda_bf16_refusal("NVIDIA H100 80GB HBM3", 9, 0).empty());
}

BOOST_AUTO_TEST_CASE(the_option_words)
{
    BOOST_TEST(precision_name(precision::fp32) == std::string("fp32"));
    BOOST_TEST(precision_name(precision::bf16) == std::string("bf16"));
}

// On this machine: bf16 either runs, naming its unit in the backend's
// name (the device line), or is refused with the line above.
BOOST_AUTO_TEST_CASE(this_machine_gets_the_line_its_features_call_for)
{
    const auto cpu = detect_cpu_features();
    BOOST_TEST_MESSAGE("avx512_bf16 " << cpu.avx512_bf16 << ", amx_bf16 " << cpu.amx_bf16);
#ifdef HAVE_DNNL
    const bool onednn = true;
#else
    const bool onednn = false;
#endif
    const auto refusal = bf16_refusal(cpu, onednn);
    if (refusal.empty()) {
        const auto be = make_backend(device_kind::cpu, precision::bf16, 1);
        BOOST_TEST(be->name().find("; bf16 matrix products on oneDNN (" + std::string(bf16_unit(cpu)) + "))") !=
                       std::string::npos,
                   be->name());
    } else {
        BOOST_CHECK_EXCEPTION(make_backend(device_kind::cpu, precision::bf16, 1), pstrain::error,
                              [&](const pstrain::error& e) { return e.what() == refusal; });
    }
    BOOST_TEST(make_backend(device_kind::cpu, precision::fp32, 1)->name().find("bf16") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(openblas_fallen_back_to_prescott_is_given_the_kernels_the_cpu_runs)
{
    const cpu_features sapphire{.avx512_bf16 = true, .amx_bf16 = true, .avx512 = true, .avx2_fma = true};
    const cpu_features skylake{.avx512 = true, .avx2_fma = true}, haswell{.avx2_fma = true};
    BOOST_TEST(openblas_coretype_for("Prescott", sapphire) == "Cooperlake");
    BOOST_TEST(openblas_coretype_for("Prescott", skylake) == "SkylakeX");
    BOOST_TEST(openblas_coretype_for("Prescott", haswell) == "Haswell");
    BOOST_TEST(openblas_coretype_for("Prescott", cpu_features{}).empty(), "an SSE3 CPU keeps Prescott's kernels");
    BOOST_TEST(openblas_coretype_for("SkylakeX", sapphire).empty(), "kernels OpenBLAS chose itself are kept");
    BOOST_TEST(openblas_coretype_for("Zen", haswell).empty());
}

BOOST_AUTO_TEST_CASE(a_set_openblas_coretype_is_left_as_it_is)
{
    const char* before = std::getenv("OPENBLAS_CORETYPE");
    const std::string saved = before ? before : "";
    ::setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    BOOST_TEST(openblas_coretype_to_set().empty());
    if (before) ::setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
    else ::unsetenv("OPENBLAS_CORETYPE");
}
