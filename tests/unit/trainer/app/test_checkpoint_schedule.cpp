// When the chief checkpoints: by steps, by time, never twice at one step.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE checkpoint_schedule
#include <boost/test/unit_test.hpp>

#include "trainer/app/checkpoint_schedule.hpp"

#include <chrono>
#include <thread>

using namespace pstrain::trainer;

namespace {
train_options every(int steps, int secs)
{
    train_options o;
    o.save_checkpoint_steps = steps;
    o.save_checkpoint_secs = secs;
    return o;
}
}  // namespace

BOOST_AUTO_TEST_CASE(checkpoints_every_n_steps_even_when_steps_jump)
{
    checkpoint_schedule s(every(100, 0));
    BOOST_TEST(!s.due(1));
    BOOST_TEST(!s.due(99));
    BOOST_TEST(s.due(100));
    s.saved(100);
    BOOST_TEST(!s.due(100));
    BOOST_TEST(!s.due(199));
    BOOST_TEST(s.due(203));  // async: global_step jumped past 200
    s.saved(203);
    BOOST_TEST(!s.due(250));
    BOOST_TEST(s.due(300));
}

BOOST_AUTO_TEST_CASE(checkpoints_by_time_from_the_last_attempt)
{
    // 1 s is the shortest interval --save-checkpoint-secs takes: the case
    // sleeps a little over it, twice.
    const auto past_the_interval = std::chrono::milliseconds(1100);
    checkpoint_schedule by_time(every(0, 1));
    checkpoint_schedule never(every(0, 0));
    BOOST_TEST(!by_time.due(5));
    std::this_thread::sleep_for(past_the_interval);
    BOOST_TEST(by_time.due(5));
    BOOST_TEST(!never.due(5));
    // The clock restarts at the attempt, whether or not it was saved.
    by_time.attempted();
    BOOST_TEST(!by_time.due(6));
    std::this_thread::sleep_for(past_the_interval);
    BOOST_TEST(by_time.due(6));
    // Never twice at the step just saved, however long ago the attempt.
    by_time.saved(6);
    BOOST_TEST(!by_time.due(6));
    BOOST_TEST(by_time.due(7));
}

// A checkpoint that could not be written is tried again at the next step
// once (a passing glitch); failing again (a full or read-only disk), at the
// next multiple, not at every step until one is saved.
BOOST_AUTO_TEST_CASE(a_failed_checkpoint_is_tried_at_the_next_step_then_at_the_next_multiple)
{
    checkpoint_schedule s(every(100, 0));
    s.saved(100);
    BOOST_TEST(s.due(200));
    s.attempted(200);  // failed: not saved
    BOOST_TEST(s.due(201));
    s.attempted(201);  // failed again
    BOOST_TEST(!s.due(202));
    BOOST_TEST(!s.due(299));
    BOOST_TEST(s.due(300));
    s.attempted(300);  // failed a third time: the next multiple again
    BOOST_TEST(!s.due(301));
    BOOST_TEST(s.due(400));
    s.attempted(400);
    s.saved(400);  // the disk has room again
    BOOST_TEST(!s.due(401));
    BOOST_TEST(s.due(500));
    s.attempted(500);  // a glitch after a success: the next step again
    BOOST_TEST(s.due(501));
}
