// --device auto|cpu|cuda.  The CUDA backend is a module (cuda_module.hpp),
// loaded only here, only when a GPU is wanted.
#include "trainer/compute/backend.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "config.h"
#include "trainer/compute/cpu_backend.hpp"

#ifdef HAVE_CUDA
#include "trainer/compute/cuda_module.hpp"
#endif

namespace pstrain::compute {

std::unique_ptr<backend> make_backend(device_kind kind, int threads, bool chief)
{
#ifdef HAVE_CUDA
    if (kind != device_kind::cpu) {
        std::string why;
        const cuda_module* cuda = load_cuda_module(why);
        if (!cuda && kind == device_kind::cuda) throw error("--device cuda: " + why + ", or use --device cpu");
        if (cuda && cuda->device_available(why)) return cuda->make_backend();
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
    return std::make_unique<cpu_backend>(threads);
}

}  // namespace pstrain::compute
