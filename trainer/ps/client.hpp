// The worker's side of the protocol: one request to every PS (INIT, PULL or
// PUSH with that PS's slice of a payload), every reply received in place
// into the caller's parameter buffer.  Used by the worker and the benchmark.
#pragma once

#include "trainer/bootstrap/job.hpp"
#include "trainer/ps/protocol.hpp"
#include "trainer/ps/shard.hpp"
#include "trainer/transport/ucx.hpp"

#include <chrono>
#include <cstdint>
#include <vector>

namespace pstrain::ps {

class client {
public:
    // `params` (total floats of the model) receives every reply.
    client(const bootstrap::job& j, transport::worker& w, bootstrap::connections& c, float* params, std::size_t total,
           std::chrono::seconds timeout);

    // Sends `type` to every PS; `payload` (total floats, or null) is sliced
    // by the shard map.  Waits for every reply; throws pstrain::error naming
    // the PS that was lost, did not answer, or aborted the job.
    void exchange(msg type, const float* payload);
    // The chief's last word: every PS exits.
    void shutdown();

    const std::vector<shard_range>& shard_map() const { return map_; }
    std::int64_t global_step() const { return global_step_; }
    bool done() const { return done_; }

private:
    const bootstrap::job& j_;
    transport::worker& w_;
    bootstrap::connections& c_;
    float* params_;
    std::size_t total_;
    std::chrono::seconds timeout_;
    std::vector<shard_range> map_;
    std::vector<header> in_, out_;
    // Per PS: header and payload receives and sends.
    std::vector<transport::request> recvs_, payload_recvs_, sends_, payload_sends_;
    std::vector<std::uint64_t> base_step_;
    std::int64_t global_step_ = 0;
    bool done_ = false;
};

}  // namespace pstrain::ps
