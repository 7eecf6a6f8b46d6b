// bfloat16 conversion: exact round trips of the values bf16 holds, round to
// nearest with ties to even, infinities and NaNs kept (NaNs quiet, with
// their sign), overflow to infinity, and the array conversion equal to the
// scalar one on every value it meets.
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
using pstrain::compute::from_bf16;
using pstrain::compute::to_bf16;

namespace {

float bits(std::uint32_t u) { return std::bit_cast<float>(u); }

}  // namespace

BOOST_AUTO_TEST_CASE(every_bf16_value_but_nan_survives_the_round_trip_bit_for_bit)
{
    for (std::uint32_t h = 0; h <= 0xffff; ++h) {
        const float f = from_bf16(static_cast<bf16>(h));
        if (std::isnan(f)) continue;
        BOOST_TEST_REQUIRE(to_bf16(f) == h, "bf16 bits " << std::hex << h);
    }
}

BOOST_AUTO_TEST_CASE(small_integers_and_powers_of_two_are_exact)
{
    for (int i = -256; i <= 256; ++i) BOOST_TEST(from_bf16(to_bf16(static_cast<float>(i))) == static_cast<float>(i));
    for (int e = -126; e <= 127; ++e) BOOST_TEST(from_bf16(to_bf16(std::ldexp(1.0f, e))) == std::ldexp(1.0f, e));
    BOOST_TEST(from_bf16(to_bf16(257.0f)) == 256.0f, "257 needs 9 significant bits: a tie, to the even 256");
}

BOOST_AUTO_TEST_CASE(rounding_is_to_nearest_with_ties_to_even)
{
    // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to the even, 1.
    BOOST_TEST(from_bf16(to_bf16(1.0f + 0x1p-8f)) == 1.0f);
    // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: to the even, 1 + 2^-6.
    BOOST_TEST(from_bf16(to_bf16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
    // Just above a tie rounds up, just below rounds down.
    BOOST_TEST(from_bf16(to_bf16(bits(0x3f808001u))) == 1.0f + 0x1p-7f);
    BOOST_TEST(from_bf16(to_bf16(bits(0x3f807fffu))) == 1.0f);
    BOOST_TEST(from_bf16(to_bf16(-1.0f - 0x1p-8f)) == -1.0f, "the sign does not change the rounding");
    // The relative error of any finite value is at most 2^-8.
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::uint32_t> any;
    for (int i = 0; i < 100000; ++i) {
        const float f = bits(any(rng) & 0xbfffffffu);  // exponent below 128: no overflow
        if (!std::isnormal(f)) continue;
        BOOST_TEST_REQUIRE(std::fabs(from_bf16(to_bf16(f)) - f) <= std::fabs(f) * 0x1p-8f, f);
    }
}

BOOST_AUTO_TEST_CASE(infinities_and_nans_are_kept)
{
    const float inf = std::numeric_limits<float>::infinity();
    BOOST_TEST(to_bf16(inf) == 0x7f80u);
    BOOST_TEST(to_bf16(-inf) == 0xff80u);
    BOOST_TEST(from_bf16(to_bf16(inf)) == inf);
    BOOST_TEST(from_bf16(to_bf16(-inf)) == -inf);
    // A NaN whose payload lies only in the low 16 bits would round to an
    // infinity (or carry into the sign); it stays a NaN, quiet, its sign kept.
    for (std::uint32_t u : {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0x7fffffffu, 0xff800001u, 0xffc00000u}) {
        const float back = from_bf16(to_bf16(bits(u)));
        BOOST_TEST(std::isnan(back), std::hex << u);
        BOOST_TEST(std::signbit(back) == bool(u >> 31), std::hex << u);
        BOOST_TEST((to_bf16(bits(u)) & 0x40u) != 0, "quiet: " << std::hex << u);
    }
}

BOOST_AUTO_TEST_CASE(values_past_the_largest_bf16_become_infinities)
{
    const float max_bf16 = from_bf16(0x7f7fu);  // (2 - 2^-7) * 2^127
    BOOST_TEST(from_bf16(to_bf16(max_bf16)) == max_bf16);
    BOOST_TEST(std::isinf(from_bf16(to_bf16(std::numeric_limits<float>::max()))));
    BOOST_TEST(from_bf16(to_bf16(-std::numeric_limits<float>::max())) == -std::numeric_limits<float>::infinity());
}

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
