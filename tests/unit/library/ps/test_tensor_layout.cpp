#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE tensor_layout
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "library/ps/tensor_layout.hpp"

#include <string>

using namespace pstrain::ps;
using kind = client_config::tensor_kind;

namespace {
bool says(const pstrain::error& e, const std::string& what) { return std::string(e.what()) == what; }
}  // namespace

BOOST_AUTO_TEST_CASE(without_tensor_sizes_the_whole_vector_is_one_tensor)
{
    client_config c;
    c.num_params = 10;
    const auto l = lay_out_tensors(c);
    BOOST_TEST_REQUIRE(l.tensors.size() == 1u);
    BOOST_TEST(l.tensors[0].end == 10u);
    BOOST_TEST(l.moving.empty());
}

BOOST_AUTO_TEST_CASE(adjacent_moving_average_tensors_make_one_range_and_empty_ones_none)
{
    client_config c;
    c.num_params = 10;
    c.tensor_sizes = {2, 3, 1, 0, 4};
    c.tensor_kinds = {kind::trainable, kind::moving_average, kind::moving_average, kind::moving_average,
                      kind::moving_average};
    const auto l = lay_out_tensors(c);
    BOOST_TEST(l.tensors.size() == 5u);
    BOOST_TEST_REQUIRE(l.moving.size() == 1u);
    BOOST_TEST(l.moving[0].begin == 2u);
    BOOST_TEST(l.moving[0].end == 10u);
    c.tensor_kinds = {kind::moving_average, kind::trainable, kind::moving_average, kind::trainable, kind::trainable};
    const auto apart = lay_out_tensors(c);
    BOOST_TEST_REQUIRE(apart.moving.size() == 2u);
    BOOST_TEST(apart.moving[1].begin == 5u);
    BOOST_TEST(apart.moving[1].end == 6u);
}

BOOST_AUTO_TEST_CASE(sizes_and_kinds_that_do_not_add_up_are_named)
{
    client_config c;
    c.num_params = 8;
    c.tensor_sizes = {4, 5};
    BOOST_CHECK_EXCEPTION(lay_out_tensors(c), pstrain::error, [](const auto& e) {
        return says(e, "the tensors' sizes add up to more than the model's 8 parameters");
    });
    c.tensor_sizes = {4, 3};
    BOOST_CHECK_EXCEPTION(lay_out_tensors(c), pstrain::error, [](const auto& e) {
        return says(e, "the tensors' sizes add up to 7, the model has 8 parameters");
    });
    c.tensor_sizes = {4, 4};
    c.tensor_kinds = {kind::trainable};
    BOOST_CHECK_EXCEPTION(lay_out_tensors(c), pstrain::error, [](const auto& e) {
        return says(e, "1 tensor kinds for 2 tensors: give one kind per tensor, or none (all trainable)");
    });
}

BOOST_AUTO_TEST_CASE(exchange_buffers_are_two_copies_of_the_vector_or_refused_when_they_cannot_be_addressed)
{
    BOOST_TEST(exchange_bytes(10) == 80u);
    BOOST_TEST(exchange_bytes(0) == 1u);
    BOOST_CHECK_EXCEPTION(exchange_bytes(std::uint64_t(1) << 62), pstrain::error, [](const auto& e) {
        return says(e, "4611686018427387904 parameters are more than this machine can address");
    });
}
