// How a server starts, in steps: the chief's hello says the model's size
// and, in its payload, the training settings when the chief says them (the
// server adopts or checks them); the size plans this PS's shard, which is
// checked to fit and allocated; the payload says which ranges are moving
// averages; once the chief
// is welcomed, its next message initialises the shard or restores it from
// a snapshot.  Nobody else is served before that.  A chief whose messages
// do not fit these steps ends the server with a pstrain::peer_error that
// says why (check_request's refusals, in words).
//
// Used by the server's thread only.
#pragma once

#include "pstrain/server.hpp"
#include "library/ps/protocol.hpp"
#include "library/ps/served_shard.hpp"
#include "library/ps/server_state.hpp"
#include "library/ps/worker_link.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pstrain::ps {

class startup {
public:
    startup(transport& net, worker_links& links, const server_config& cfg, const server_hooks& hooks);

    // 1. The chief's hello (its frame).
    wire::hello receive_hello();
    // 2. The hello's payload, checked for size and received aside.
    void receive_hello_payload(const wire::hello& h);
    // 3. The training settings the chief's hello brings, if it brings any.
    std::optional<training_settings> chief_settings(const wire::hello& h) const;
    // 4. This PS's range of the model the hello announces, checked to be
    // addressable and to fit in memory (or max_shard_bytes).
    shard_range plan_shard(const wire::hello& h);
    // 5. The shard and every worker's receive slot (`slot_floats` at least,
    // for the sparse requests).
    std::unique_ptr<served_shard> allocate(shard_range range, std::size_t slot_floats);
    // 6. The hello's payload applied: its rkey into the chief's slot, its
    // moving-average ranges into the shard.
    void apply_hello_payload(const wire::hello& h, served_shard& shard);
    // 7. The chief's init or restore, applied.  True when it restored.
    bool await_init_or_restore(served_shard& shard, std::span<embedding_table> tables, training_state& state);
    // The snapshot at `step` into the shard and the (empty) tables, through
    // the hooks; the state's step, restored mark and the workers' data
    // positions follow it.  Also a running server's rollback.
    void restore(std::uint64_t step, served_shard& shard, std::span<embedding_table> tables, training_state& state);

private:
    void wait_for_chief(transfer& r, const char* what);
    void check_shard_fits(shard_range range) const;

    transport& net_;
    worker_links& links_;
    const server_config& cfg_;
    const server_hooks& hooks_;
    const std::string who_;  // the chief
    std::uint64_t num_params_ = 0;
    // The chief's hello payload: a member, since its receive may outlive
    // start-up when the chief is lost.
    std::vector<std::uint8_t> hello_payload_;
};

}  // namespace pstrain::ps
