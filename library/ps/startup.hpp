// How a server starts, in steps: its own settings are checked when it is
// made (the job's shape) and, unless the chief says them, put in force; a
// spare first waits for the chief's take_over; the chief's hello says the
// model's size and, in its payload, the training settings when the chief
// says them (the server adopts or checks them) and, for a server without
// settings of its own, the wire precision; the size plans this PS's shard,
// which is checked to fit and allocated; the payload says which ranges are
// moving averages; once the chief is welcomed, its next message
// initialises the shard or restores it from a snapshot.  Nobody else is
// served before that.  A chief whose messages do not fit these steps ends
// the server with a pstrain::peer_error that says why (check_request's
// refusals, in words).  Beside the restore, a running server's rollback to
// a snapshot (sync: a lost PS's replacement restored it).
//
// Used by the server's thread only.
#pragma once

#include "pstrain/server.hpp"
#include "library/ps/activity_recorder.hpp"
#include "library/ps/membership.hpp"
#include "library/ps/protocol.hpp"
#include "library/ps/served_shard.hpp"
#include "library/ps/server_state.hpp"
#include "library/ps/sparse_service.hpp"
#include "library/ps/worker_link.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pstrain::ps {

class dense_step;

class startup {
public:
    // The settings in force go to `members` and `sparse` (configure); `cfg`
    // is the server's, whose training settings, precision and index the
    // chief may say.
    startup(transport& net, worker_links& links, server_config& cfg, const server_hooks& hooks, membership& members,
            sparse_service& sparse, activity_recorder& activity, server_clock& profile);

    // 0. When the server is made: the job's shape checked and, unless the
    // chief says them (settings_from_chief), this server's settings in force.
    void take_own_settings();
    // 0a. A spare waits for the chief: its take_over names the lost PS
    // whose place this one takes (cfg's index).  A shutdown instead: the
    // job ended without needing this spare (false).
    bool await_take_over();
    // 1. The chief's hello (its frame).
    wire::hello receive_hello();
    // 2. The hello's payload, checked for size and received aside.
    void receive_hello_payload(const wire::hello& h);
    // 3. The training settings the chief's hello brings, if it brings any.
    std::optional<training_settings> chief_settings(const wire::hello& h) const;
    // 3a. The chief's training settings, adopted (settings_from_chief) and
    // put in force, or checked against this server's own.
    void take_settings(const std::optional<training_settings>& chief);
    // 3b. A server without settings of its own takes the chief's wire
    // precision (every other worker's hello must say the same); others
    // check it at the chief's hello as at any other.
    void take_precision(const wire::hello& h);
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
    // 8. A spare, started: it holds the lost PS's shard at `step`, and
    // every other worker is told (they say hello).
    void stand_in(std::uint64_t step);

    // Sync: a lost PS's replacement restored the snapshot at `step`, and
    // worker i (the chief) asks every shard to go back to it, so that the
    // model stays one step's; the reply is the shard's values.  Async
    // refuses it.
    void roll_back(std::size_t i, std::uint64_t step, served_shard& shard, dense_step& dense, training_state& state);

private:
    // How the settings are checked: a server's own when it is made, the
    // chief's when its hello brings them.
    enum settings_origin { error_from_here, error_from_chief };

    // The rules of a job's shape, in one place: throws error (the server's
    // own settings) or peer_error (the chief's) naming the fix.
    void check_job_shape(settings_origin origin) const;
    // The settings in force: the members' pace and the tables.
    void configure();
    void wait_for_chief(transfer& r, const char* what);
    void check_shard_fits(shard_range range) const;

    transport& net_;
    worker_links& links_;
    server_config& cfg_;
    const server_hooks& hooks_;
    membership& members_;
    sparse_service& sparse_;
    activity_recorder& activity_;
    server_clock& profile_;
    const std::string who_;  // the chief
    std::uint64_t num_params_ = 0;
    // The chief's hello payload: a member, since its receive may outlive
    // start-up when the chief is lost.
    std::vector<std::uint8_t> hello_payload_;
};

}  // namespace pstrain::ps
