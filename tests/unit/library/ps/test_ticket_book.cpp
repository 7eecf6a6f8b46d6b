#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE ticket_book
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "library/ps/ticket_book.hpp"

#include <algorithm>
#include <string>
#include <vector>

using namespace pstrain::ps;

BOOST_AUTO_TEST_CASE(tickets_are_numbered_from_1_and_never_reused)
{
    ticket_book book(2);
    const auto a = book.open(), b = book.open();
    BOOST_TEST(a == 1u);
    BOOST_TEST(b == 2u);
    book.close(a);
    BOOST_TEST(book.open() == 3u);
    BOOST_TEST(!book.outstanding(a));
    BOOST_TEST(book.outstanding(b));
}

BOOST_AUTO_TEST_CASE(a_ticket_not_outstanding_is_named_in_the_error)
{
    ticket_book book(1);
    const auto t = book.open();
    book.close(t);
    BOOST_CHECK_EXCEPTION(book.at(t), pstrain::error, [](const pstrain::error& e) {
        return std::string(e.what()) == "ticket 1 is not outstanding (already waited for?)";
    });
    BOOST_CHECK_THROW(book.close(7), pstrain::error);
}

BOOST_AUTO_TEST_CASE(a_closed_tickets_storage_serves_the_next_without_allocating)
{
    ticket_book book(3);
    const auto a = book.open();
    auto& first = book.at(a);
    BOOST_TEST(first.ops.capacity() >= 3u);
    first.ops.emplace_back().ps = 2;
    const auto* storage = first.ops.data();
    book.close(a);
    const auto b = book.open();
    auto& next = book.at(b);
    BOOST_TEST(next.ops.empty());  // nothing of the closed ticket's operations is left
    BOOST_TEST(next.ops.data() == storage);
}

BOOST_AUTO_TEST_CASE(a_retired_ticket_is_no_longer_outstanding_but_its_operations_are_still_visited)
{
    ticket_book book(2);
    const auto a = book.open(), b = book.open();
    book.at(a).ops.emplace_back().ps = 5;
    book.at(b).ops.emplace_back().ps = 6;
    book.retire(a);
    BOOST_TEST(!book.outstanding(a));
    std::vector<std::size_t> seen;
    book.for_each_op([&](operation& op) { seen.push_back(op.ps); });
    std::sort(seen.begin(), seen.end());
    BOOST_TEST(seen == (std::vector<std::size_t>{5, 6}), boost::test_tools::per_element());
}
