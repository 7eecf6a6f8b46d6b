#include "library/ps/ticket_book.hpp"

#include "pstrain/error.hpp"

#include <fmt/format.h>

#include <vector>

namespace pstrain::ps {

ticket ticket_book::open()
{
    const ticket id = next_++;
    if (recycled_.empty()) {
        auto [it, inserted] = tickets_.try_emplace(id);
        it->second.ops.reserve(ops_hint_);  // never reallocated while in flight
        return id;
    }
    auto node = std::move(recycled_.back());
    recycled_.pop_back();
    node.key() = id;
    node.mapped().ops.clear();
    tickets_.insert(std::move(node));
    return id;
}

ticket_book::book::iterator ticket_book::find(ticket t)
{
    auto it = tickets_.find(t);
    if (it == tickets_.end()) throw error(fmt::format("ticket {} is not outstanding (already waited for?)", t));
    return it;
}

pending_ticket& ticket_book::at(ticket t) { return find(t)->second; }

void ticket_book::close(ticket t) { recycled_.push_back(tickets_.extract(find(t))); }

void ticket_book::retire(ticket t) { retired_.push_back(tickets_.extract(find(t))); }

void ticket_book::drop_retired()
{
    std::erase_if(retired_, [](book::node_type& node) {
        for (auto& op : node.mapped().ops)
            if (!op.recv.complete() || !op.payload_recv.complete() || !op.send.complete() ||
                !op.payload_send.complete())
                return false;
        return true;
    });
}

void ticket_book::retire_all()
{
    while (!tickets_.empty()) retired_.push_back(tickets_.extract(tickets_.begin()));
}

}  // namespace pstrain::ps
