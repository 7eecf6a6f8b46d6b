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

BOOST_AUTO_TEST_CASE(the_transposing_conversion_puts_each_element_at_its_transposed_place)
{
    // 37 x 21: neither a multiple of the 16 x 16 tiles.
    const std::size_t rows = 37, cols = 21;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> any(-100, 100);
    std::vector<float> src(rows * cols);
    for (auto& f : src) f = any(rng);
    std::vector<bf16> dst(rows * cols + 1, 0xabcd);
    pstrain::compute::to_bf16_transposed(src.data(), dst.data(), rows, cols);
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c)
            BOOST_TEST_REQUIRE(dst[c * rows + r] == to_bf16(src[r * cols + c]), "row " << r << " column " << c);
    BOOST_TEST(dst.back() == 0xabcd, "nothing past rows x cols is written");
}
