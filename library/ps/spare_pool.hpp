// Replacing a lost PS, from a client's side.  The transport's peers after
// the job's PS tasks are spare PS tasks, idle until the chief puts one in
// a lost PS's place (take_over); a worker other than the chief hears of it
// from the spare (standing_in), in a receive posted into each spare from
// the start.
//
// The rule: a loss is healed only while as many spares are left as PS
// tasks are lost, and only the loss itself (another PS's abort, refusal or
// silence is no loss to heal).  Its callers, all in client.cpp: a failed
// call asks replaceable() whether its error becomes lost_ps, and else
// enough_for() for the error that names every lost PS; replace_lost_ps()
// then abandons the calls in flight and waits for what the other PS tasks
// owe (abandon, settle), puts a spare in each lost PS's place (the chief:
// take_over) or waits for the spare that says it stands in (the others:
// stand_in), each routing the lost PS's messages to that spare
// (exchange::reroute); the chief's shutdown ends the spares
// still waiting.  What throws, throws pstrain::peer_error naming the peer;
// the client breaks on it.
//
// Used by the client's thread only.
#pragma once

#include "pstrain/transport.hpp"
#include "library/ps/exchange.hpp"
#include "library/ps/protocol.hpp"
#include "library/ps/ticket_book.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace pstrain::ps {

class spare_pool {
public:
    // net's peers from num_ps on are the spares; `listen` (a worker other
    // than the chief): a receive for its standing_in is posted into each.
    spare_pool(transport& net, exchange& ex, std::size_t num_ps, bool listen);
    spare_pool(const spare_pool&) = delete;
    spare_pool& operator=(const spare_pool&) = delete;

    bool empty() const { return spares_.empty(); }
    // Spares neither standing in nor gone.
    std::size_t left() const;
    // Their peers (the chief's shutdown ends them too).
    std::vector<std::size_t> waiting() const;
    // The PS tasks whose peers are gone, and the others of the job's.
    std::vector<std::size_t> lost() const;
    std::vector<std::size_t> serving(const std::vector<std::size_t>& lost) const;

    // A call failed naming `failed_peer`: the PS it lost, when that is one
    // of `lost` and a spare is left for each of them.
    std::optional<std::size_t> replaceable(const std::vector<std::size_t>& lost, const std::string& failed_peer) const;
    // Throws the error naming every PS of `lost` when more are lost than
    // spares are left (and the job has spares).
    void enough_for(const std::vector<std::size_t>& lost) const;

    // The first step of a replacement: every call in flight in `book` is
    // abandoned (the lost PS tasks' receives go back).  Returns the lost
    // PS tasks; throws as enough_for does.
    std::vector<std::size_t> abandon(ticket_book& book);
    // Then the replies the other PS tasks owe for them are waited for, so
    // that no old reply lands in a new receive (a sync step they hold
    // completes once every worker has pushed to them or sent its filler;
    // a reply the staleness bound holds, once the slowest workers push:
    // the chief of an async job waits for it after take_over, since those
    // workers wait for the spare).  `lost`: abandon()'s, maybe rerouted
    // since.  Returns the PS tasks lost now; throws when the others did not
    // answer in time, or enough_for does.
    std::vector<std::size_t> settle(ticket_book& book, const std::vector<std::size_t>& lost);
    // The chief: an idle spare is told to take PS p's place (one of `lost`),
    // and p's messages go to it.
    void take_over(std::size_t p, const std::vector<std::size_t>& lost);
    // A worker other than the chief: waits (the timeout at most) for the
    // spare that says it took PS p's place; p's messages go to it.
    void stand_in(std::size_t p);

    // The receives posted for standing_in go back, and whether they have.
    void cancel();
    bool settled();

private:
    struct spare_peer {
        std::size_t peer = 0;
        wire::frame in;  // standing_in (a worker's) or take_over (the chief's)
        transfer recv;
        std::optional<std::size_t> standing_in;  // the PS whose place it says it took (workers other than the chief)
        bool used = false;                       // a PS is routed to it
    };

    bool idle(const spare_peer& s) const { return !s.used && !net_.failed(s.peer); }
    spare_peer* heard(std::size_t p);
    std::string names(const std::vector<std::size_t>& lost) const;
    [[noreturn]] void too_few(const std::vector<std::size_t>& lost) const;

    transport& net_;
    exchange& exchange_;
    const std::size_t num_ps_;
    std::vector<spare_peer> spares_;  // a receive is posted into each: never moved
};

}  // namespace pstrain::ps
