// The data's split among the workers (data_split.hpp): the job's own at
// the start, and with --elastic a new one each time ps 0's live workers
// change.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE data_split
#include <boost/test/unit_test.hpp>

#include "trainer/app/data_split.hpp"
#include "tests/unit/stderr_capture.hpp"

#include <string>

using namespace pstrain;
using testing::stderr_of;
using trainer::data_split;
using live = ps::client::membership;

namespace {

trainer::train_options elastic(bool on)
{
    trainer::train_options o;
    o.elastic = on;
    return o;
}

}  // namespace

BOOST_AUTO_TEST_CASE(each_worker_starts_on_its_shard_of_the_jobs_own_split)
{
    const auto o = elastic(false);
    data_split split(o, 100, 4, 1, 4);
    BOOST_TEST(!split.dense());  // a click-through model's reader has its own
    BOOST_TEST((split.live() == live{4, 1}));
    split.from_the_start();
    BOOST_TEST(split.dense());
    BOOST_TEST(split.sampler().shard_size() == 25u);
    BOOST_TEST((split.live() == live{4, 1}));
}

BOOST_AUTO_TEST_CASE(no_word_from_ps_0_or_the_same_workers_change_nothing)
{
    const auto o = elastic(true);
    data_split split(o, 100, 4, 1, 4);
    split.from_the_start();
    const auto log = stderr_of([&] {
        BOOST_TEST(!split.follow(live{0, 0}, 3, nullptr));  // before any values reply
        BOOST_TEST(!split.follow(live{4, 1}, 3, nullptr));
    });
    BOOST_TEST(log.empty(), log);
    BOOST_TEST(split.sampler().shard_size() == 25u);
}

BOOST_AUTO_TEST_CASE(elastic_workers_re_split_the_data_among_the_live_ones_and_say_so)
{
    const auto o = elastic(true);
    data_split split(o, 100, 4, 3, 6);
    split.from_the_start();
    const auto log = stderr_of([&] { BOOST_TEST(split.follow(live{2, 1}, 17, nullptr)); });
    BOOST_TEST(log.find("data: re-split among the 2 live workers of 6 at global step 17 (was 4): this worker trains "
                        "on shard 1 of 2") != std::string::npos,
               log);
    BOOST_TEST(split.sampler().shard_size() == 50u);
    BOOST_TEST((split.live() == live{2, 1}));
    // One taken back: a shard of its own again.
    stderr_of([&] { BOOST_TEST(split.follow(live{3, 2}, 20, nullptr)); });
    BOOST_TEST(split.sampler().shard_size() == 33u);
}

BOOST_AUTO_TEST_CASE(without_elastic_the_split_stays_but_the_change_is_seen)
{
    const auto o = elastic(false);
    data_split split(o, 100, 4, 1, 4);
    split.from_the_start();
    const auto log = stderr_of([&] { BOOST_TEST(split.follow(live{3, 1}, 5, nullptr)); });
    BOOST_TEST(log.empty(), log);
    BOOST_TEST(split.sampler().shard_size() == 25u);
    BOOST_TEST((split.live() == live{3, 1}));  // the chief's record, the final line's count
}

BOOST_AUTO_TEST_CASE(from_the_start_goes_back_to_the_jobs_own_split)
{
    const auto o = elastic(true);
    data_split split(o, 100, 4, 1, 4);
    split.from_the_start();
    std::vector<std::uint32_t> first, again;
    split.sampler().next_batch(5, first);
    stderr_of([&] { split.follow(live{2, 0}, 9, nullptr); });
    split.from_the_start();  // a sync job's data going back with the model
    BOOST_TEST((split.live() == live{4, 1}));
    BOOST_TEST(split.sampler().shard_size() == 25u);
    split.sampler().next_batch(5, again);
    BOOST_TEST(first == again);  // the first batch of the seed's order
}
