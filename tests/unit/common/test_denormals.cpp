// A thread's denormal mode (common/denormals.hpp): flushed, a denormal
// operand reads as 0 and a denormal result is 0; kept, both are IEEE 754's;
// a thread started afterwards has its creator's mode; a scoped mode puts
// the thread back as it was.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE denormals
#include <boost/test/unit_test.hpp>

#include "common/denormals.hpp"

#include <thread>

using namespace pstrain;

namespace {

// 1e-39 is denormal in FP32 (the smallest normal is about 1.18e-38).
// volatile: the products are made at run time, under the thread's mode.
float times_one(float x)
{
    volatile float a = x, b = 1.0f;
    return a * b;
}

float tenth_of(float x)
{
    volatile float a = x, b = 0.1f;
    return a * b;
}

}  // namespace

BOOST_AUTO_TEST_CASE(flushed_a_denormal_operand_and_a_denormal_result_are_zero)
{
    if (!can_flush_denormals()) return;
    scoped_denormal_mode flush(denormal_mode::flush);
    BOOST_TEST((current_denormal_mode() == denormal_mode::flush));
    BOOST_TEST(times_one(1e-39f) == 0.0f);  // DAZ
    BOOST_TEST(tenth_of(1e-38f) == 0.0f);   // FTZ: 1e-39
    BOOST_TEST(times_one(2e-38f) == 2e-38f);
}

BOOST_AUTO_TEST_CASE(kept_denormals_are_computed_as_ieee_754_says)
{
    scoped_denormal_mode keep(denormal_mode::keep);
    BOOST_TEST((current_denormal_mode() == denormal_mode::keep));
    BOOST_TEST(times_one(1e-39f) == 1e-39f);
    BOOST_TEST(tenth_of(1e-38f) > 0.0f);
}

BOOST_AUTO_TEST_CASE(a_thread_started_afterwards_has_its_creators_mode)
{
    if (!can_flush_denormals()) return;
    for (auto mode : {denormal_mode::flush, denormal_mode::keep}) {
        scoped_denormal_mode set(mode);
        denormal_mode seen{};
        float product = -1.0f;
        std::thread([&] {
            seen = current_denormal_mode();
            product = times_one(1e-39f);
        }).join();
        BOOST_TEST((seen == mode));
        BOOST_TEST(product == (mode == denormal_mode::flush ? 0.0f : 1e-39f));
    }
}

BOOST_AUTO_TEST_CASE(a_scoped_mode_puts_the_thread_back_as_it_was)
{
    if (!can_flush_denormals()) return;
    set_denormal_mode(denormal_mode::keep);
    {
        scoped_denormal_mode flush(denormal_mode::flush);
        BOOST_TEST((current_denormal_mode() == denormal_mode::flush));
        {
            scoped_denormal_mode keep(denormal_mode::keep);
            BOOST_TEST((current_denormal_mode() == denormal_mode::keep));
        }
        BOOST_TEST((current_denormal_mode() == denormal_mode::flush));
    }
    BOOST_TEST((current_denormal_mode() == denormal_mode::keep));
    BOOST_TEST(times_one(1e-39f) == 1e-39f);
}

BOOST_AUTO_TEST_CASE(the_modes_are_named_flush_and_keep)
{
    BOOST_TEST((parse_denormal_mode("flush") == denormal_mode::flush));
    BOOST_TEST((parse_denormal_mode("keep") == denormal_mode::keep));
    BOOST_TEST(!parse_denormal_mode("FLUSH"));
    BOOST_TEST(!parse_denormal_mode(""));
    BOOST_TEST(!parse_denormal_mode("ieee"));
}
