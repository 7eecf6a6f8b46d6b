// --device auto|cpu|cuda and --precision fp32|bf16.  The CUDA backend is a
// module (cuda_module.hpp), loaded only here, only when a GPU is wanted.
#include "trainer/compute/backend.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "config.h"
#include "trainer/compute/conv2d.hpp"
#include "trainer/compute/cpu_backend.hpp"

#include <cstdlib>

#ifdef HAVE_CUDA
#include "trainer/compute/cuda_module.hpp"
#endif

namespace pstrain::compute {

namespace {

// tdpbf16ps or vdpbf16ps, through oneDNN; refused in one line where neither runs.
std::unique_ptr<backend> make_cpu_backend(precision p, int threads)
{
    if (p == precision::fp32) return std::make_unique<cpu_backend>(threads);
    const auto cpu = detect_cpu_features();
    if (const auto refusal = bf16_refusal(cpu, cpu::have_onednn()); !refusal.empty()) throw error(refusal);
    return std::make_unique<cpu_backend>(threads, cpu::make_matmul_bf16(), std::string(bf16_unit(cpu)));
}

}  // namespace

std::unique_ptr<backend> make_backend(device_kind kind, precision p, int threads, bool chief)
{
#ifdef HAVE_CUDA
    std::string why;
    // --device auto on a node with no GPU to see: the CPU, without mapping
    // the CUDA libraries in every task to learn it.
    if (kind == device_kind::automatic && !gpu_may_be_visible(std::getenv("CUDA_VISIBLE_DEVICES"), "/dev", why)) {
        if (chief) log::info("training on the CPU (--device auto: no GPU visible)");
        log::debug("--device auto: {}", why);
    } else if (kind != device_kind::cpu) {
        const cuda_module* cuda = load_cuda_module(why);
        if (!cuda && kind == device_kind::cuda) throw error("--device cuda: " + why + ", or use --device cpu");
        if (cuda && cuda->device_available(why)) return cuda->make_backend(p);
        if (kind == device_kind::cuda) throw error(why);  // names the device problem and the fix
        // No GPU here is the normal case on CPU nodes and for PS tasks: one
        // calm line from the chief, the reason only for those who ask.
        if (chief) log::info("training on the CPU (--device auto: no GPU visible)");
        log::debug("--device auto: {}", why);
    }
#else
    if (kind == device_kind::cuda)
        throw error("--device cuda: this pstrain was built without CUDA: rebuild with ./configure --with-cuda, or use "
                    "--device cpu");
#endif
    return make_cpu_backend(p, threads);
}

}  // namespace pstrain::compute
