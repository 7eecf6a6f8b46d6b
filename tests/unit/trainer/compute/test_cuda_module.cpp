// Finding the CUDA module, and --device auto's look for a GPU before it
// loads any CUDA library (cuda_module.hpp).
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE cuda_module
#include <boost/test/unit_test.hpp>

#include "trainer/compute/cuda_module.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

using namespace pstrain::compute;
namespace fs = std::filesystem;

namespace {

// A /dev of our own with the given device files in it.
struct dev_dir {
    fs::path path;
    explicit dev_dir(std::initializer_list<const char*> files)
    {
        path = fs::temp_directory_path() /
               ("pstrain-dev-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
        fs::create_directories(path);
        for (const char* f : files) std::ofstream(path / f).put('\n');
    }
    ~dev_dir() { fs::remove_all(path); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_node_without_a_gpu_device_file_has_no_gpu_and_says_why)
{
    dev_dir dev({"null", "zero"});
    std::string why;
    BOOST_TEST(!gpu_may_be_visible(nullptr, dev.path.string(), why));
    BOOST_TEST(why == "no GPU device file (" + dev.path.string() + "/nvidiactl or " + dev.path.string() +
                          "/dxg): no GPU driver on this node");
}

BOOST_AUTO_TEST_CASE(nvidias_control_file_or_wsls_dxg_may_mean_a_gpu)
{
    std::string why;
    dev_dir nvidia({"nvidiactl", "nvidia0"});
    BOOST_TEST(gpu_may_be_visible(nullptr, nvidia.path.string(), why));
    dev_dir wsl({"dxg"});
    BOOST_TEST(gpu_may_be_visible(nullptr, wsl.path.string(), why));
    BOOST_TEST(gpu_may_be_visible("0,1", nvidia.path.string(), why));
    BOOST_TEST(gpu_may_be_visible("GPU-8f6c1a2e-0b1d-4c55-9a77-1f2e3d4c5b6a", nvidia.path.string(), why));
}

BOOST_AUTO_TEST_CASE(cuda_visible_devices_that_hides_every_gpu_means_none_whatever_the_node_has)
{
    dev_dir nvidia({"nvidiactl", "nvidia0"});
    for (const char* hidden : {"", "-1", "-1,0", "NoDevFiles"}) {
        std::string why;
        BOOST_TEST(!gpu_may_be_visible(hidden, nvidia.path.string(), why), "CUDA_VISIBLE_DEVICES=" << hidden);
        BOOST_TEST(why == "CUDA_VISIBLE_DEVICES='" + std::string(hidden) + "' hides every GPU");
    }
}

BOOST_AUTO_TEST_CASE(the_module_is_looked_for_beside_the_program_then_where_it_is_installed)
{
    const auto c =
        cuda_module_candidates(nullptr, "/opt/pstrain/bin/pstrain", "/opt/pstrain/bin", "/opt/pstrain/lib/pstrain");
    const std::vector<std::string> want{"/opt/pstrain/bin/.libs/pstrain-cuda.so",
                                        "/opt/pstrain/lib/pstrain/pstrain-cuda.so"};
    BOOST_TEST(c == want, boost::test_tools::per_element());
    // A staged or relocated install finds its own module first.
    const auto staged = cuda_module_candidates(nullptr, "/stage/usr/bin/pstrain", "/usr/bin", "/usr/lib/pstrain");
    BOOST_REQUIRE(staged.size() == 3u);
    BOOST_TEST(staged[1] == "/stage/usr/lib/pstrain/pstrain-cuda.so");
    BOOST_TEST(staged[2] == "/usr/lib/pstrain/pstrain-cuda.so");
    // PSTRAIN_CUDA_MODULE alone when set.
    const auto given = cuda_module_candidates("/x/pstrain-cuda.so", "/opt/pstrain/bin/pstrain", "/opt/pstrain/bin",
                                              "/opt/pstrain/lib/pstrain");
    BOOST_TEST(given == std::vector<std::string>{"/x/pstrain-cuda.so"}, boost::test_tools::per_element());
}
