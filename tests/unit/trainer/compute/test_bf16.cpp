// The array conversion of --precision bf16's operands equals the scalar
// rounding (tests/unit/common/test_bf16.cpp) on every value it meets.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE bf16
#include <boost/test/unit_test.hpp>

#include "trainer/compute/bf16.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using pstrain::compute::bf16;
using pstrain::compute::to_bf16;

namespace {

float bits(std::uint32_t u) { return std::bit_cast<float>(u); }

}  // namespace

BOOST_AUTO_TEST_CASE(the_array_conversion_equals_the_scalar_one)
{
    std::mt19937 rng(3);
    std::uniform_int_distribution<std::uint32_t> any;
    std::vector<float> src(4099);  // not a multiple of any vector width
    for (auto& f : src) f = bits(any(rng));
    src[5] = std::numeric_limits<float>::quiet_NaN();
    src[6] = -std::numeric_limits<float>::infinity();
    std::vector<bf16> dst(src.size() + 1, 0xabcd);
    to_bf16(src.data(), dst.data(), src.size());
    for (std::size_t i = 0; i < src.size(); ++i) BOOST_TEST_REQUIRE(dst[i] == to_bf16(src[i]), "element " << i);
    BOOST_TEST(dst.back() == 0xabcd, "nothing past count is written");
}
