// pstrain --version names the build, and a task described by a plugin of
// another release says so in one line.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE build_info
#include <boost/test/unit_test.hpp>

#include "config.h"
#include "trainer/app/build_info.hpp"

#include <string>
#include <vector>

using namespace pstrain::trainer;

namespace {

// The text's lines, without their newlines.
std::vector<std::string> lines_of(const std::string& text)
{
    std::vector<std::string> out;
    std::string::size_type at = 0;
    while (at < text.size()) {
        auto end = text.find('\n', at);
        BOOST_REQUIRE(end != std::string::npos);  // every line ends in a newline
        out.push_back(text.substr(at, end - at));
        at = end + 1;
    }
    return out;
}

const std::string have_cuda = PSTRAIN_BUILT_WITH_CUDA;

}  // namespace

BOOST_AUTO_TEST_CASE(the_first_line_is_the_release_and_each_part_has_a_line)
{
    auto lines = lines_of(version_text("", "/opt/x/pstrain-cuda.so"));
    BOOST_REQUIRE_EQUAL(lines.size(), 6u);
    BOOST_TEST(lines[0] == "pstrain " PACKAGE_VERSION);
    BOOST_TEST(lines[1].rfind("  CUDA module: ", 0) == 0u);
    BOOST_TEST(lines[2] ==
               std::string("  oneDNN:      ") +
                   (std::string(PSTRAIN_BUILT_WITH_DNNL).empty() ? "not in this build" : PSTRAIN_BUILT_WITH_DNNL));
    BOOST_TEST(lines[3] == "  UCX:         " PSTRAIN_BUILT_WITH_UCX);
    BOOST_TEST(lines[4] == "  PMIx:        " PSTRAIN_BUILT_WITH_PMIX);
    BOOST_TEST(lines[5] == "  Slurm:       " PSTRAIN_BUILT_WITH_SLURM
                           " (its SPANK plugin, spank_pstrain.so, is built against it)");
}

BOOST_AUTO_TEST_CASE(the_cuda_line_says_what_the_module_was_built_with_and_where_it_is)
{
    auto installed = lines_of(version_text("/usr/lib/pstrain/pstrain-cuda.so", "/usr/lib/pstrain/pstrain-cuda.so"))[1];
    auto missing = lines_of(version_text("", "/a/pstrain-cuda.so, /b/pstrain-cuda.so"))[1];
    if (have_cuda.empty()) {
        BOOST_TEST(installed == "  CUDA module: not in this build (configured without CUDA): --device cpu only");
        BOOST_TEST(missing == installed);
        return;
    }
    const std::string cudnn = PSTRAIN_BUILT_WITH_CUDNN;
    const std::string built = "CUDA " + have_cuda + ", " + (cudnn.empty() ? "no cuDNN" : "cuDNN " + cudnn);
    BOOST_TEST(installed == "  CUDA module: " + built + "; /usr/lib/pstrain/pstrain-cuda.so");
    BOOST_TEST(missing == "  CUDA module: " + built +
                              "; not installed on this node (looked in /a/pstrain-cuda.so, /b/pstrain-cuda.so): "
                              "install pstrain-cuda, or this build's make install");
}

BOOST_AUTO_TEST_CASE(a_plugin_of_another_release_is_named_in_one_line)
{
    auto line = plugin_version_mismatch("0.1.0", "n2", "0.2.0");
    BOOST_REQUIRE(line.has_value());
    BOOST_TEST(*line == "the SPANK plugin on n2 is pstrain 0.1.0, this program is pstrain 0.2.0: the job goes on, but "
                        "install one release of both on every node (pstrain-admin(8), UPGRADING)");
    BOOST_TEST(line->find('\n') == std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_same_release_or_no_plugin_says_nothing)
{
    BOOST_TEST(!plugin_version_mismatch("0.2.0", "n2", "0.2.0"));
    BOOST_TEST(!plugin_version_mismatch(nullptr, "n2", "0.2.0"));
    BOOST_TEST(!plugin_version_mismatch("", "n2", "0.2.0"));
    BOOST_TEST(*plugin_version_mismatch("0.1.0", nullptr, "0.2.0") ==
               "the SPANK plugin on this node is pstrain 0.1.0, this program is pstrain 0.2.0: the job goes on, but "
               "install one release of both on every node (pstrain-admin(8), UPGRADING)");
}
