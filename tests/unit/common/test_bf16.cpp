// bfloat16 rounding (common/bf16.hpp), which --precision bf16's operands and
// --wire-precision bf16's messages both use: exact round trips of the values
// bf16 holds, round to nearest with ties to even, infinities and NaNs kept
// (NaNs quiet, with their sign), overflow to infinity.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE bf16
#include <boost/test/unit_test.hpp>

#include "common/bf16.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

using pstrain::bf16::from_float;
using pstrain::bf16::to_float;

namespace {

float bits(std::uint32_t u) { return std::bit_cast<float>(u); }
std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
float rounded(float f) { return to_float(from_float(f)); }

}  // namespace

BOOST_AUTO_TEST_CASE(every_bf16_value_but_nan_survives_the_round_trip_bit_for_bit)
{
    for (std::uint32_t h = 0; h <= 0xffff; ++h) {
        const float f = to_float(static_cast<std::uint16_t>(h));
        if (std::isnan(f)) continue;
        BOOST_TEST_REQUIRE(from_float(f) == h, "bf16 bits " << std::hex << h);
    }
    // Floats bf16 holds, zeros and subnormals included, keep their bits.
    for (const float f :
         {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 3.0f * std::ldexp(1.0f, -130), 65280.0f, std::ldexp(1.0f, 100),
          std::numeric_limits<float>::min(), -std::numeric_limits<float>::min()}) {
        BOOST_TEST(bits_of(rounded(f)) == bits_of(f), f);
        BOOST_TEST(from_float(f) == bits_of(f) >> 16, f);
    }
}

BOOST_AUTO_TEST_CASE(small_integers_and_powers_of_two_are_exact)
{
    for (int i = -256; i <= 256; ++i) BOOST_TEST(rounded(static_cast<float>(i)) == static_cast<float>(i));
    for (int e = -126; e <= 127; ++e) BOOST_TEST(rounded(std::ldexp(1.0f, e)) == std::ldexp(1.0f, e));
    BOOST_TEST(rounded(257.0f) == 256.0f, "257 needs 9 significant bits: a tie, to the even 256");
}

BOOST_AUTO_TEST_CASE(rounding_is_to_nearest_with_ties_to_even)
{
    // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to the even, 1.
    BOOST_TEST(rounded(1.0f + 0x1p-8f) == 1.0f);
    // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: to the even, 1 + 2^-6.
    BOOST_TEST(rounded(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
    // Just above a tie rounds up, just below rounds down.
    BOOST_TEST(rounded(bits(0x3f808001u)) == 1.0f + 0x1p-7f);
    BOOST_TEST(rounded(bits(0x3f807fffu)) == 1.0f);
    BOOST_TEST(rounded(1.0f + 0x1p-9f) == 1.0f);
    BOOST_TEST(rounded(-1.0f - 0x1p-8f) == -1.0f, "the sign does not change the rounding");
    BOOST_TEST(rounded(0.1f) == 0.10009765625f);
    // Carrying into the exponent: 2 - 2^-9 rounds up to 2.
    BOOST_TEST(rounded(2.0f - 0x1p-9f) == 2.0f);
    // The relative error of any finite value is at most 2^-8.
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::uint32_t> any;
    for (int i = 0; i < 100000; ++i) {
        const float f = bits(any(rng) & 0xbfffffffu);  // exponent below 128: no overflow
        if (!std::isnormal(f)) continue;
        BOOST_TEST_REQUIRE(std::fabs(rounded(f) - f) <= std::fabs(f) * 0x1p-8f, f);
    }
}

BOOST_AUTO_TEST_CASE(infinities_and_nans_are_kept)
{
    const float inf = std::numeric_limits<float>::infinity();
    BOOST_TEST(from_float(inf) == 0x7f80u);
    BOOST_TEST(from_float(-inf) == 0xff80u);
    BOOST_TEST(rounded(inf) == inf);
    BOOST_TEST(rounded(-inf) == -inf);
    // A NaN whose payload lies only in the low 16 bits would round to an
    // infinity (or carry into the sign); it stays a NaN, quiet, its sign kept.
    for (std::uint32_t u : {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0x7fffffffu, 0xff800001u, 0xffc00000u}) {
        const float back = rounded(bits(u));
        BOOST_TEST(std::isnan(back), std::hex << u);
        BOOST_TEST(std::signbit(back) == bool(u >> 31), std::hex << u);
        BOOST_TEST((from_float(bits(u)) & 0x40u) != 0, "quiet: " << std::hex << u);
    }
    BOOST_TEST(from_float(bits(0x7fffffffu)) == 0x7fffu, "all mantissa ones do not carry into the sign");
}

BOOST_AUTO_TEST_CASE(values_past_the_largest_bf16_become_infinities)
{
    const float max_bf16 = to_float(0x7f7fu);  // (2 - 2^-7) * 2^127
    BOOST_TEST(rounded(max_bf16) == max_bf16);
    BOOST_TEST(rounded(std::numeric_limits<float>::max()) == std::numeric_limits<float>::infinity());
    BOOST_TEST(rounded(-std::numeric_limits<float>::max()) == -std::numeric_limits<float>::infinity());
}
