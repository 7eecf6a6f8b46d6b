// --device auto|cpu|cuda.
#include "trainer/compute/backend.hpp"

#include "pstrain/error.hpp"
#include "common/log.hpp"
#include "config.h"
#include "trainer/compute/cpu_backend.hpp"

#ifdef HAVE_CUDA
#include "trainer/compute/cuda_backend.hpp"
#endif

namespace pstrain::compute {

std::unique_ptr<backend> make_backend(device_kind kind, int threads)
{
#ifdef HAVE_CUDA
    if (kind != device_kind::cpu) {
        std::string why;
        if (cuda_device_available(why)) return make_cuda_backend();
        if (kind == device_kind::cuda) throw error(why);
        log::info("--device auto: {}; training on the CPU", why);
    }
#else
    if (kind == device_kind::cuda)
        throw error("--device cuda: this pstrain was built without CUDA: rebuild with ./configure --with-cuda, or use --device cpu");
#endif
    return std::make_unique<cpu_backend>(threads);
}

}  // namespace pstrain::compute
