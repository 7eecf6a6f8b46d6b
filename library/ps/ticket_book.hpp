// A client's outstanding tickets: each names the operations of one call
// (one request per PS it reaches), in flight until wait() completes it.
// A completed ticket's storage (its node of the book) is recycled for the
// next one, so a training step allocates nothing; a ticket whose wait
// failed is retired and kept until the book goes, because receives of it
// may still be posted into its frames.
//
// A ticket_book is used by the client's thread only.
#pragma once

#include "pstrain/client.hpp"
#include "library/ps/exchange.hpp"

#include <cstddef>
#include <map>
#include <vector>

namespace pstrain::ps {

struct pending_ticket {
    std::vector<operation> ops;
};

class ticket_book {
public:
    // A new ticket's operations reserve room for `ops_hint` operations.
    explicit ticket_book(std::size_t ops_hint) : ops_hint_(ops_hint) {}

    // A new ticket (numbered from 1 on, never reused) with no operation.
    ticket open();
    // Its operations; throws pstrain::error when the ticket is not outstanding.
    pending_ticket& at(ticket t);
    // Done with it: its storage goes to the next ticket.
    void close(ticket t);
    // Its wait failed: kept, with its operations, until the book goes (or
    // drop_retired()).
    void retire(ticket t);
    // Every outstanding ticket retired (a lost PS's replacement abandons
    // the calls in flight).
    void retire_all();
    // The retired tickets whose transfers are all complete dropped; the
    // others (a receive from a lost peer that never ends) stay until the
    // book goes.
    void drop_retired();
    bool outstanding(ticket t) const { return tickets_.count(t) > 0; }

    // Every operation of the outstanding and the retired tickets.
    template <typename F>
    void for_each_op(F&& f)
    {
        for (auto& [id, t] : tickets_)
            for (auto& op : t.ops) f(op);
        for (auto& node : retired_)
            for (auto& op : node.mapped().ops) f(op);
    }

private:
    using book = std::map<ticket, pending_ticket>;
    book::iterator find(ticket t);

    const std::size_t ops_hint_;
    book tickets_;
    // The nodes of closed tickets (recycled for the next ones) and of retired ones.
    std::vector<book::node_type> recycled_, retired_;
    ticket next_ = 1;
};

}  // namespace pstrain::ps
