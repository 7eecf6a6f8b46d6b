#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE request_check
#include <boost/test/unit_test.hpp>

#include "library/ps/request_check.hpp"

#include <cstdint>
#include <optional>
#include <vector>

using namespace pstrain::ps;
using stage = request_context::stage;

namespace {

const std::vector<std::uint32_t> dims{4};  // one table of dim 4

// Worker 1, greeted, of 2, by a PS holding [8, 16) of 32 parameters.
request_context worker_1()
{
    request_context c;
    c.worker = 1;
    c.num_workers = 2;
    c.greeted = true;
    c.range = {8, 16};
    c.num_params = 32;
    c.table_dims = dims;
    return c;
}

std::optional<wire::refusal_code> code_of(const wire::frame& f, const request_context& c,
                                          std::optional<std::uint64_t> received = std::nullopt)
{
    const auto r = check_request(f, received, c);
    if (!r) return std::nullopt;
    return static_cast<wire::refusal_code>(r->code);
}

wire::frame push(std::uint64_t b, std::uint64_t e, std::uint32_t shared = 0, std::uint64_t step = 0,
                 std::uint32_t skip = 0)
{
    return wire::encode(wire::push{step, b, e, 0, shared, skip}, shared ? 0 : wire::float_bytes(e - b));
}

wire::frame hello(std::uint64_t num_params, std::uint32_t index, std::uint32_t workers, std::uint32_t tables)
{
    wire::hello h;
    h.num_params = num_params;
    h.worker_index = index;
    h.num_workers = workers;
    h.num_tables = tables;
    return wire::encode(h);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_push_inside_the_shard_with_its_whole_payload_is_served)
{
    BOOST_TEST(!check_request(push(8, 12), 16, worker_1()).has_value());
    BOOST_TEST(!check_request(push(10, 16), std::nullopt, worker_1()).has_value());
}

BOOST_AUTO_TEST_CASE(a_payload_other_than_the_frame_says_is_refused_first_naming_both_lengths)
{
    auto f = push(8, 12);
    f.magic = 0;  // even before the envelope: the next message's payload must not be taken for this one's
    const auto r = check_request(f, 12, worker_1());
    BOOST_TEST_REQUIRE(r.has_value());
    BOOST_TEST(r->code == static_cast<std::uint32_t>(wire::refusal_code::bad_length));
    BOOST_TEST(r->detail_begin == 16u);
    BOOST_TEST(r->detail_end == 12u);
}

BOOST_AUTO_TEST_CASE(pushes_outside_the_shard_unmapped_or_of_the_wrong_length_are_refused)
{
    BOOST_TEST((code_of(push(4, 12), worker_1()) == wire::refusal_code::bad_range));
    BOOST_TEST((code_of(push(12, 10), worker_1()) == wire::refusal_code::bad_range));
    BOOST_TEST((code_of(push(8, 12, 1), worker_1()) == wire::refusal_code::not_mapped));
    auto mapped = worker_1();
    mapped.mapped = true;
    BOOST_TEST(!code_of(push(8, 12, 1), mapped).has_value());
    auto f = push(8, 12);
    f.payload_bytes = 8;
    BOOST_TEST((code_of(f, worker_1()) == wire::refusal_code::bad_length));
}

// Sync: a push is of the whole shard or of a bucket; with backup workers a
// bucket is refused (its step's buckets would aggregate other workers), and
// so is a skip once a bucket of its step is applied (a worker that skips
// pushes every bucket of the step with skip, before any can apply).
BOOST_AUTO_TEST_CASE(sync_takes_buckets_but_not_with_backup_workers_nor_a_skip_after_a_bucket_applied)
{
    auto c = worker_1();
    c.sync_pushes = true;
    BOOST_TEST(!code_of(push(8, 12), c).has_value());
    BOOST_TEST(!code_of(push(8, 16), c).has_value());
    BOOST_TEST(!code_of(push(8, 12, 0, 0, 1), c).has_value());
    BOOST_TEST(!code_of(push(8, 16, 0, 0, 1), c).has_value());
    c.step_applied = true;
    BOOST_TEST((code_of(push(8, 12, 0, 0, 1), c) == wire::refusal_code::bucket_skips));
    BOOST_TEST(!code_of(push(8, 12, 0, 1, 1), c).has_value());  // another step's: the dense step's to judge
    BOOST_TEST(!code_of(push(8, 12), c).has_value());
    c.step_applied = false;
    c.buckets = false;
    BOOST_TEST((code_of(push(8, 12), c) == wire::refusal_code::needs_whole_shard));
    BOOST_TEST(wire::describe(*check_request(push(8, 12), std::nullopt, c))
                   .starts_with("a push of [8, 12), part of the shard, where sync training with backup workers"));
    BOOST_TEST(!code_of(push(8, 16), c).has_value());
    c.sync_pushes = false;  // done: answered with done, not refused
    BOOST_TEST(!code_of(push(8, 12), c).has_value());
}

// Every worker buckets a step alike: a bucket that overlaps one of the
// step's without being it would leave both short of gradients for ever.
// A push of another step (stale) is the dense step's to drop.
BOOST_AUTO_TEST_CASE(a_bucket_that_overlaps_another_of_the_step_is_refused_naming_both)
{
    auto c = worker_1();
    c.sync_pushes = true;
    c.step = 5;
    const std::vector<shard_range> step_buckets{{12, 16}, {8, 12}};
    c.step_buckets = step_buckets;
    BOOST_TEST(!code_of(push(12, 16, 0, 5), c).has_value());
    BOOST_TEST(!code_of(push(8, 12, 0, 5), c).has_value());
    BOOST_TEST((code_of(push(10, 16, 0, 5), c) == wire::refusal_code::bucket_mismatch));
    BOOST_TEST((code_of(push(8, 16, 0, 5), c) == wire::refusal_code::bucket_mismatch));
    BOOST_TEST(wire::describe(*check_request(push(10, 14, 0, 5), std::nullopt, c)) ==
               "a push of the bucket [10, 14), which overlaps the bucket [12, 16) of the same sync step that another "
               "worker pushed: every worker must push the same buckets (the same model and bucket size)");
    BOOST_TEST(!code_of(push(10, 16, 0, 4), c).has_value());
}

// One gradient per worker and sync step: a second push to the step the
// worker has pushed to, before the first is answered, is refused (it would
// count twice in the mean); a push to another step is the dense step's to
// judge (stale, or the next step's).
BOOST_AUTO_TEST_CASE(a_second_push_to_the_step_a_worker_has_pushed_to_is_refused)
{
    auto c = worker_1();
    c.sync_pushes = true;
    c.pushed_to_step = 0;
    BOOST_TEST((code_of(push(8, 16), c) == wire::refusal_code::pushed_twice));
    const auto r = check_request(push(8, 16), std::nullopt, c);
    BOOST_TEST_REQUIRE(r.has_value());
    BOOST_TEST(wire::describe(*r).starts_with("a second push to sync step 0 before the first was answered"));
    c.pushed_to_step = 3;
    BOOST_TEST(!code_of(push(8, 16), c).has_value());
    c.pushed_to_step.reset();
    BOOST_TEST(!code_of(push(8, 16), c).has_value());
}

BOOST_AUTO_TEST_CASE(before_its_hello_a_worker_gets_only_no_hello)
{
    auto c = worker_1();
    c.greeted = false;
    BOOST_TEST((code_of(wire::encode(wire::pull{8, 16, 0}), c) == wire::refusal_code::no_hello));
    BOOST_TEST((code_of(wire::encode(wire::stats{}), c) == wire::refusal_code::no_hello));
    BOOST_TEST(!code_of(hello(32, 1, 2, 1), c).has_value());
}

BOOST_AUTO_TEST_CASE(a_hello_of_another_model_tables_or_place_is_refused_in_that_order)
{
    const auto c = worker_1();
    BOOST_TEST((code_of(hello(33, 0, 3, 0), c) == wire::refusal_code::model_mismatch));
    BOOST_TEST((code_of(hello(32, 0, 3, 0), c) == wire::refusal_code::tables_mismatch));
    const auto r = check_request(hello(32, 0, 2, 1), std::nullopt, c);
    BOOST_TEST_REQUIRE(r.has_value());
    BOOST_TEST(r->code == static_cast<std::uint32_t>(wire::refusal_code::wrong_peer));
    BOOST_TEST(r->detail_begin == 0u);
    BOOST_TEST(r->detail_end == 2u);
    BOOST_TEST(r->peer_index == 1u);
    BOOST_TEST((code_of(hello(32, 1, 3, 1), c) == wire::refusal_code::wrong_peer));
}

BOOST_AUTO_TEST_CASE(only_the_chief_snapshots_ends_training_or_initialises_again)
{
    auto c = worker_1();
    for (auto f : {wire::encode(wire::snapshot{}), wire::encode(wire::shutdown{}), wire::encode(wire::init{8, 16}),
                   wire::encode(wire::restore{})})
        BOOST_TEST((code_of(f, c) == wire::refusal_code::not_chief), "kind " << f.kind);
    c.worker = 0;
    BOOST_TEST(!code_of(wire::encode(wire::snapshot{}), c).has_value());
    BOOST_TEST((code_of(wire::encode(wire::snapshot{}, 4), c) == wire::refusal_code::bad_length));
}

// A worker's leave is served; the chief's is a bad kind (it ends the job with shutdown).
BOOST_AUTO_TEST_CASE(a_worker_may_leave_and_the_chief_may_not)
{
    auto c = worker_1();
    BOOST_TEST(!code_of(wire::encode(wire::leave{}), c).has_value());
    BOOST_TEST((code_of(wire::encode(wire::leave{}, 4), c) == wire::refusal_code::bad_length));
    c.worker = 0;
    BOOST_TEST((code_of(wire::encode(wire::leave{}), c) == wire::refusal_code::bad_kind));
}

BOOST_AUTO_TEST_CASE(sparse_requests_name_a_table_the_ps_has_and_at_most_max_sparse_keys)
{
    const auto c = worker_1();
    const auto r = check_request(wire::encode(wire::sparse_pull{1, 3, 0}, 8), std::nullopt, c);
    BOOST_TEST_REQUIRE(r.has_value());
    BOOST_TEST(r->code == static_cast<std::uint32_t>(wire::refusal_code::bad_table));
    BOOST_TEST(r->detail_begin == 3u);
    BOOST_TEST(r->detail_end == 1u);
    const auto many = wire::max_sparse_keys + 1;
    BOOST_TEST(
        (code_of(wire::encode(wire::sparse_pull{many, 0, 0}, many * 8), c) == wire::refusal_code::too_many_keys));
    BOOST_TEST(!code_of(wire::encode(wire::sparse_pull{2, 0, 0}, 16), c).has_value());
    BOOST_TEST((code_of(wire::encode(wire::sparse_pull{2, 0, 0}, 12), c) == wire::refusal_code::bad_length));
    // A push: 2 keys of 8 bytes, then 2 rows of 4 floats.
    BOOST_TEST(!code_of(wire::encode(wire::sparse_push{2, 0}, 16 + 32), c).has_value());
    BOOST_TEST((code_of(wire::encode(wire::sparse_push{2, 0}, 16 + 16), c) == wire::refusal_code::bad_length));
}

BOOST_AUTO_TEST_CASE(a_ps_kind_of_message_from_a_worker_is_a_bad_kind)
{
    for (auto k : {wire::kind::welcome, wire::kind::values, wire::kind::refusal, wire::kind::rows}) {
        auto f = wire::encode(wire::stats{});
        f.kind = static_cast<std::uint16_t>(k);
        const auto r = check_request(f, std::nullopt, worker_1());
        BOOST_TEST_REQUIRE(r.has_value());
        BOOST_TEST(r->code == static_cast<std::uint32_t>(wire::refusal_code::bad_kind));
        BOOST_TEST(r->detail_begin == static_cast<std::uint64_t>(k));
    }
}

BOOST_AUTO_TEST_CASE(the_chiefs_first_message_must_be_a_well_formed_hello)
{
    request_context first;
    first.at = stage::chief_hello;
    BOOST_TEST(!code_of(hello(1ull << 62, 0, 1, 0), first).has_value());  // its size is checked by start-up's plan
    BOOST_TEST((code_of(wire::encode(wire::pull{0, 6, 0}), first) == wire::refusal_code::no_hello));
    auto f = hello(6, 0, 1, 0);
    f.version = 5;
    BOOST_TEST((code_of(f, first) == wire::refusal_code::bad_version));
}

BOOST_AUTO_TEST_CASE(the_chiefs_second_message_initialises_the_whole_shard_or_restores)
{
    request_context second;
    second.at = stage::chief_init;
    second.range = {0, 6};
    BOOST_TEST(!code_of(wire::encode(wire::init{0, 6}, 24), second, 24).has_value());
    BOOST_TEST(!code_of(wire::encode(wire::restore{4}), second, 0).has_value());
    BOOST_TEST((code_of(wire::encode(wire::init{0, 5}, 20), second, 20) == wire::refusal_code::bad_range));
    BOOST_TEST((code_of(wire::encode(wire::init{0, 6}, 20), second, 20) == wire::refusal_code::bad_length));
    BOOST_TEST((code_of(wire::encode(wire::init{0, 6}, 24), second, 20) == wire::refusal_code::bad_length));
    BOOST_TEST((code_of(wire::encode(wire::pull{0, 6, 0}), second, 0) == wire::refusal_code::bad_kind));
}

BOOST_AUTO_TEST_CASE(a_hello_of_another_wire_precision_is_refused_naming_both_and_the_worker)
{
    auto c = worker_1();
    c.greeted = false;
    c.precision = wire_precision::bf16;
    auto f = hello(32, 1, 2, 1);
    const auto r = check_request(f, std::nullopt, c);  // says fp32 (0)
    BOOST_TEST_REQUIRE(r.has_value());
    BOOST_TEST((static_cast<wire::refusal_code>(r->code) == wire::refusal_code::precision_mismatch));
    BOOST_TEST(r->peer_index == 1u);
    BOOST_TEST(wire::describe(*r) == "worker 1 sends fp32 on the wire and this PS bf16: give every task of the job "
                                     "the same --wire-precision");
    auto h = wire::body<wire::hello>(f);
    h.precision = static_cast<std::uint32_t>(wire_precision::bf16);
    BOOST_TEST(!check_request(wire::encode(h), std::nullopt, c).has_value());
    h.precision = 7;  // no precision this version knows
    BOOST_TEST(wire::describe(*check_request(wire::encode(h), std::nullopt, c)) ==
               "worker 1 sends wire precision 7 on the wire and this PS bf16: give every task of the job the same "
               "--wire-precision");
}

BOOST_AUTO_TEST_CASE(in_bf16_a_push_and_a_row_push_carry_two_bytes_a_number)
{
    auto c = worker_1();
    c.precision = wire_precision::bf16;
    BOOST_TEST(!check_request(wire::encode(wire::push{0, 8, 12, 0, 0}, 8), 8, c).has_value());
    BOOST_TEST((code_of(wire::encode(wire::push{0, 8, 12, 0, 0}, 16), c, 16) == wire::refusal_code::bad_length));
    wire::sparse_push m;
    m.count = 2;
    BOOST_TEST(!check_request(wire::encode(m, 2 * 8 + 2 * 4 * 2), std::nullopt, c).has_value());
    BOOST_TEST((code_of(wire::encode(m, 2 * 8 + 2 * 4 * 4), c) == wire::refusal_code::bad_length));
}
