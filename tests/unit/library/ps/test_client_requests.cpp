// A client's pure parts: its config and arguments checked, a dense
// request's frame and the hello encoded, the snapshot and stats replies read.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE client_requests
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "pstrain/loopback.hpp"
#include "library/ps/client_requests.hpp"

#include <string>
#include <vector>

using namespace pstrain::ps;

namespace {

std::string error_of(const std::function<void()>& f)
{
    try {
        f();
    } catch (const pstrain::error& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

BOOST_AUTO_TEST_CASE(only_worker_0s_config_makes_a_chief)
{
    client_config c;
    BOOST_CHECK_NO_THROW(chiefs_config(c));
    c.index = 2;
    BOOST_TEST(
        error_of([&] { chiefs_config(c); }) ==
        "worker 2 made a chief_client: only worker 0, the chief, starts, saves and ends the job (make a client)");
}

BOOST_AUTO_TEST_CASE(the_tables_dims_come_from_the_settings_and_must_agree_with_those_given)
{
    client_config c;
    BOOST_TEST(with_table_dims(c).table_dims.empty());
    training_settings s;
    s.tables.resize(2);
    s.tables[0].dim = 4;
    s.tables[1].dim = 8;
    c.settings = s;
    BOOST_TEST(with_table_dims(c).table_dims == (std::vector<std::uint32_t>{4, 8}), boost::test_tools::per_element());
    c.table_dims = {4, 8};
    BOOST_TEST(with_table_dims(c).table_dims.size() == 2u);
    c.table_dims = {4};
    BOOST_TEST(error_of([&] { with_table_dims(c); }) ==
               "the client was given 1 table dims and settings of 2 tables with other dims: give the dims once, in "
               "the settings");
}

BOOST_AUTO_TEST_CASE(the_ps_tasks_are_every_peer_or_the_first_num_ps)
{
    loopback_network net(3, 1);
    client_config c;
    BOOST_TEST(ps_count(net.worker(0), c) == 3u);
    c.num_ps = 2;
    BOOST_TEST(ps_count(net.worker(0), c) == 2u);
    c.num_ps = 4;
    BOOST_TEST(error_of([&] { ps_count(net.worker(0), c); }) ==
               "the client was told of 4 PS tasks and its transport has 3 peers");
}

BOOST_AUTO_TEST_CASE(a_range_and_rows_outside_what_the_client_has_are_named)
{
    BOOST_CHECK_NO_THROW(check_range({0, 6}, 6));
    BOOST_TEST(error_of([&] { check_range({2, 7}, 6); }) == "range [2, 7) is outside the model's 6 parameters");
    BOOST_TEST(error_of([&] { check_range({3, 2}, 6); }) == "range [3, 2) is outside the model's 6 parameters");
    client_config c;
    c.table_dims = {4};
    const std::vector<std::uint64_t> keys{7, 9};
    BOOST_TEST(check_rows(c, "async_pull_rows", 0, keys, 8, "output") == 4u);
    BOOST_TEST(error_of([&] { check_rows(c, "async_push_rows", 0, keys, 6, "gradient"); }) ==
               "async_push_rows: 2 keys of table 0 (dim 4) need 8 floats of gradient, not 6");
    BOOST_TEST(error_of([&] { check_rows(c, "async_pull_rows", 1, keys, 8, "output"); }) ==
               "embedding table 1 does not exist: the client was given 1");
}

BOOST_AUTO_TEST_CASE(whole_shard_requests_and_the_replies_they_wait_for)
{
    for (auto k : {wire::kind::hello, wire::kind::init, wire::kind::restore, wire::kind::snapshot, wire::kind::stats,
                   wire::kind::rollback})
        BOOST_TEST(asks_whole_model(k));
    for (auto k : {wire::kind::pull, wire::kind::push}) BOOST_TEST(!asks_whole_model(k));
    BOOST_TEST((reply_kind(wire::kind::hello) == wire::kind::welcome));
    BOOST_TEST((reply_kind(wire::kind::snapshot) == wire::kind::snapshot_done));
    BOOST_TEST((reply_kind(wire::kind::stats) == wire::kind::stats_reply));
    for (auto k : {wire::kind::init, wire::kind::restore, wire::kind::rollback, wire::kind::pull, wire::kind::push})
        BOOST_TEST((reply_kind(k) == wire::kind::values));
}

// A push says the step of the values its PS last sent, and sends the
// gradient in place (fp32), encoded aside (bf16), or nothing (shared).
BOOST_AUTO_TEST_CASE(a_push_carries_its_ps_base_step_and_its_gradient_as_the_wire_says)
{
    const std::vector<float> params{1, 2, 3, 4}, grads{0.5f, 1, 2, 4};
    const std::vector<std::uint64_t> base{7, 9};
    operation op;
    op.ps = 1;
    op.part = {2, 4};
    request_source from{params.data(), grads.data(), base, wire_precision::fp32};
    BOOST_TEST(encode_request(wire::kind::push, op, from, 0, 5) == grads.data() + 2);
    const auto push = wire::body<wire::push>(op.out);
    BOOST_TEST(push.step == 9u);
    BOOST_TEST(push.position == 5u);
    BOOST_TEST(op.out.payload_bytes == 8u);
    from.precision = wire_precision::bf16;
    const void* payload = encode_request(wire::kind::push, op, from, 0, 5);
    BOOST_TEST(payload == static_cast<const void*>(op.bytes.data()));  // encoded aside
    BOOST_TEST(op.out.payload_bytes == 4u);
    op.shared = true;
    BOOST_TEST(encode_request(wire::kind::push, op, from, 0, 5) == nullptr);
    BOOST_TEST(wire::body<wire::push>(op.out).in_shared_memory == 1u);
    BOOST_TEST(op.out.payload_bytes == 0u);
    op.shared = false;
    BOOST_TEST(encode_request(wire::kind::init, op, from, 0, 0) == params.data() + 2);
    encode_request(wire::kind::rollback, op, from, 3, 0);
    BOOST_TEST(wire::body<wire::rollback>(op.out).step == 3u);
    BOOST_CHECK_THROW(encode_request(wire::kind::welcome, op, from, 0, 0), pstrain::error);
}

// The chief's hello carries the moving averages and the settings after
// the rkey; another worker's, the rkey alone.
BOOST_AUTO_TEST_CASE(the_hello_offers_the_buffers_with_a_key_and_the_chief_adds_its_ranges_and_settings)
{
    float params[2], grads[2];
    client_config c;
    c.num_params = 2;
    c.num_workers = 3;
    c.settings = training_settings{};
    const std::vector<shard_range> moving{{0, 1}};
    const std::vector<std::uint8_t> key{1, 2, 3};
    const auto chief = hello_of(c, params, grads, key, moving);
    BOOST_TEST(chief.head.params_address == reinterpret_cast<std::uintptr_t>(params));
    BOOST_TEST(chief.head.grads_address == reinterpret_cast<std::uintptr_t>(grads));
    BOOST_TEST(chief.head.num_moving == 1u);
    BOOST_TEST(chief.head.settings_bytes > 0u);
    BOOST_TEST(chief.head.num_workers == 3u);
    c.index = 1;
    const auto other = hello_of(c, params, grads, {}, moving);
    BOOST_TEST(other.head.params_address == 0u);
    BOOST_TEST(other.head.num_moving == 0u);
    BOOST_TEST(other.head.settings_bytes == 0u);
    BOOST_TEST(other.payload.size() < chief.payload.size());
    operation op;
    request_source from;
    from.hello = &chief;
    BOOST_TEST(encode_request(wire::kind::hello, op, from, 0, 0) == chief.payload.data());
    BOOST_TEST(op.out.payload_bytes == chief.payload.size());
}

BOOST_AUTO_TEST_CASE(the_log_line_names_how_values_travel_with_each_ps)
{
    BOOST_TEST(exchange_paths(false, {}, {"ps 0"}) ==
               "gradients and parameters go through UCX messages with every PS (--shared-memory off)");
    BOOST_TEST(exchange_paths(true, {"ps 0", "ps 1"}, {}) ==
               "gradients and parameters go through shared memory with ps 0, ps 1");
    BOOST_TEST(exchange_paths(true, {}, {"ps 0"}) == "gradients and parameters go through UCX messages with ps 0");
    BOOST_TEST(exchange_paths(true, {"ps 0"}, {"ps 1"}) ==
               "gradients and parameters go through shared memory with ps 0 and through UCX messages with ps 1");
}

BOOST_AUTO_TEST_CASE(snapshot_and_stats_replies_read_into_the_public_results)
{
    wire::snapshot_done d;
    d.status = static_cast<std::uint32_t>(wire::snapshot_status::moved_on);
    d.step = 12;
    d.bytes = 100;
    d.checksum = 0xabc;
    const auto r = snapshot_result_of(d);
    BOOST_TEST((r.outcome == snapshot_result::status::moved_on));
    BOOST_TEST(r.step == 12u);
    BOOST_TEST(r.bytes == 100u);
    BOOST_TEST(r.checksum == 0xabcu);
    d.status = static_cast<std::uint32_t>(wire::snapshot_status::taken);
    BOOST_TEST((snapshot_result_of(d).outcome == snapshot_result::status::taken));
    d.status = 77;
    BOOST_TEST((snapshot_result_of(d).outcome == snapshot_result::status::failed));

    wire::stats_reply s;
    s.step = 5;
    s.bytes_received = 10;
    s.bytes_sent = 20;
    std::vector<wire::worker_counters> counters(2);
    counters[1].gradients = 3;
    counters[1].staleness_max = 2;
    const auto st = stats_of(s, counters);
    BOOST_TEST(st.step == 5u);
    BOOST_TEST(st.bytes_received == 10u);
    BOOST_TEST(st.bytes_sent == 20u);
    BOOST_TEST_REQUIRE(st.workers.size() == 2u);
    BOOST_TEST(st.workers[1].gradients == 3u);
    BOOST_TEST(st.workers[1].staleness_max == 2u);
}
