// A loss that is not finite stops the run with one line naming the step
// and the fix; a finite one, however large, does not.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE loss_guard
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/app/loss_guard.hpp"

#include <cmath>
#include <limits>
#include <string>

using namespace pstrain::trainer;

namespace {

std::string stop_line(double loss, std::int64_t step)
{
    try {
        check_loss(loss, step);
    } catch (const pstrain::error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_finite_loss_goes_on)
{
    BOOST_TEST(stop_line(0.0, 1) == "");
    BOOST_TEST(stop_line(1e30, 2) == "");
    BOOST_TEST(stop_line(-3.5, 3) == "");
}

BOOST_AUTO_TEST_CASE(a_nan_or_infinite_loss_stops_with_the_step_and_the_fix)
{
    BOOST_TEST(stop_line(std::nan(""), 17) == "the training loss is nan at step 17: lower --learning-rate");
    BOOST_TEST(stop_line(std::numeric_limits<double>::infinity(), 5) ==
               "the training loss is inf at step 5: lower --learning-rate");
    BOOST_TEST(stop_line(-std::numeric_limits<double>::infinity(), 6) ==
               "the training loss is -inf at step 6: lower --learning-rate");
}
