// pstrain-cuda.so: found beside the program or where it is installed, and
// dlopen()ed once (cuda_module.hpp).
#include "trainer/compute/cuda_module.hpp"

#include "config.h"

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <system_error>

#include <dlfcn.h>

#ifndef PSTRAIN_PKGLIBDIR  // Makefile.am gives both
#define PSTRAIN_PKGLIBDIR "/usr/local/lib/pstrain"
#endif
#ifndef PSTRAIN_BINDIR
#define PSTRAIN_BINDIR "/usr/local/bin"
#endif

namespace pstrain::compute {
namespace {

constexpr const char* module_file = "pstrain-cuda.so";

std::string program_path()
{
    std::error_code ec;
    auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string() : p.string();
}

struct loaded {
    const cuda_module* module = nullptr;
    std::string why;
};

loaded load_once()
{
    const char* env = std::getenv("PSTRAIN_CUDA_MODULE");
    const auto [path, looked] = find_cuda_module();
    loaded r;
    if (path.empty()) {
        if (env && *env)
            r.why = "the CUDA module PSTRAIN_CUDA_MODULE=" + std::string(env) +
                    " does not exist: point PSTRAIN_CUDA_MODULE at pstrain-cuda.so, or unset it";
        else
            r.why = "the CUDA module pstrain-cuda.so is not installed (looked in " + looked +
                    "): install pstrain-cuda on this node (or a CUDA build's make install), or set "
                    "PSTRAIN_CUDA_MODULE=PATH";
        return r;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char* e = dlerror();
        r.why = "cannot load the CUDA module " + path + ": " + (e ? e : "unknown dlopen error") +
                ": install the CUDA runtime, cuBLAS and cuDNN on this node (or add their directory to LD_LIBRARY_PATH)";
        return r;
    }
    // Never dlclose()d: backends made by it live until the process ends.
    using entry_fn = const cuda_module* (*)();
    auto entry = reinterpret_cast<entry_fn>(dlsym(handle, PSTRAIN_CUDA_MODULE_ENTRY));
    if (!entry) {
        r.why = path + " is not pstrain's CUDA module (no " PSTRAIN_CUDA_MODULE_ENTRY
                       "): reinstall pstrain, or point PSTRAIN_CUDA_MODULE at its pstrain-cuda.so";
        return r;
    }
    const cuda_module* m = entry();
    if (!m || std::string(m->version) != PACKAGE_VERSION) {
        r.why = path + " is the CUDA module of pstrain " + (m ? m->version : "?") +
                ", this is pstrain " PACKAGE_VERSION ": install both from one build";
        return r;
    }
    r.module = m;
    return r;
}

}  // namespace

cuda_module_search find_cuda_module()
{
    cuda_module_search r;
    for (const auto& c : cuda_module_candidates(std::getenv("PSTRAIN_CUDA_MODULE"), program_path(), PSTRAIN_BINDIR,
                                                PSTRAIN_PKGLIBDIR)) {
        r.looked_in += (r.looked_in.empty() ? "" : ", ") + c;
        std::error_code ec;
        if (r.found.empty() && std::filesystem::exists(c, ec)) r.found = c;
    }
    return r;
}

std::vector<std::string> cuda_module_candidates(const char* env_override, const std::string& program,
                                                const std::string& bindir, const std::string& pkglibdir)
{
    namespace fs = std::filesystem;
    if (env_override && *env_override) return {env_override};
    std::vector<std::string> out;
    if (!program.empty()) {
        const fs::path dir = fs::path(program).parent_path();
        out.push_back((dir / ".libs" / module_file).string());
        const fs::path rel = fs::path(pkglibdir).lexically_relative(bindir);
        if (!rel.empty()) out.push_back((dir / rel / module_file).lexically_normal().string());
    }
    const std::string installed = (fs::path(pkglibdir) / module_file).string();
    if (out.empty() || out.back() != installed) out.push_back(installed);
    return out;
}

bool gpu_may_be_visible(const char* cuda_visible_devices, const std::string& dev_dir, std::string& why)
{
    namespace fs = std::filesystem;
    if (cuda_visible_devices) {
        const std::string v = cuda_visible_devices;
        if (v.empty() || v.starts_with("-1") || v == "NoDevFiles") {
            why = "CUDA_VISIBLE_DEVICES='" + v + "' hides every GPU";
            return false;
        }
    }
    std::error_code ec;
    for (const char* file : {"nvidiactl", "dxg"})
        if (fs::exists(fs::path(dev_dir) / file, ec)) return true;
    why = "no GPU device file (" + dev_dir + "/nvidiactl or " + dev_dir + "/dxg): no GPU driver on this node";
    return false;
}

const cuda_module* load_cuda_module(std::string& why)
{
    static std::once_flag once;
    static loaded result;
    std::call_once(once, [] { result = load_once(); });
    why = result.why;
    return result.module;
}

}  // namespace pstrain::compute
