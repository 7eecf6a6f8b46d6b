// The worker's side of the protocol: one request to every PS (INIT, PULL or
// PUSH with that PS's slice of a payload), every reply received in place
// into the parameter buffer.  The client owns the two exchange buffers (in
// memory UCX allocated and registered): a PS on the same host maps them and
// reads gradients and writes values there directly; other PS tasks get
// messages.  Used by the worker and the benchmark.
#pragma once

#include "trainer/bootstrap/job.hpp"
#include "trainer/ps/protocol.hpp"
#include "trainer/ps/shard.hpp"
#include "trainer/transport/ucx.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace pstrain::ps {

class client {
public:
    // `total` floats of the model; `shared_memory`: offer the buffers to
    // PS tasks on this host (--shared-memory auto), or always use messages.
    client(const bootstrap::job& j, transport::worker& w, bootstrap::connections& c, std::size_t total,
           std::chrono::seconds timeout, bool shared_memory = true);

    // The exchange buffers, total floats each: every reply lands in
    // params(); push() sends grads().
    std::span<float> params() const { return {params_, total_}; }
    std::span<float> grads() const { return {grads_, total_}; }
    // Both, one after the other (to page-lock them at once).
    std::span<float> buffers() const { return {params_, 2 * total_}; }

    // The chief's first message: the values in params() for every PS.
    void init() { exchange(msg::init, params_, 0, 0, 0); }
    // The chief's first message when resuming: every PS loads its range of
    // the checkpoint at `step` from --checkpoint-dir; the replies bring the
    // values here.
    void restore(std::uint64_t step) { exchange(msg::init, nullptr, step, 1, 0); }
    void pull() { exchange(msg::pull, nullptr, std::nullopt, 0, 0); }
    // The gradient in grads(); `batches` counts the batches this worker has
    // drawn (the data position a checkpoint records).
    void push(std::uint64_t batches) { exchange(msg::push, grads_, std::nullopt, 0, batches); }
    // The chief asks every PS to write its shard of the checkpoint at
    // `step`; returns every PS's SAVED reply.
    const std::vector<header>& save(std::uint64_t step)
    {
        exchange(msg::save, nullptr, step, 0, 0);
        return in_;
    }
    // The chief's last word: every PS exits (with `stop`, after telling
    // the workers the job stopped for preemption).
    void shutdown(bool stop = false);

    const std::vector<shard_range>& shard_map() const { return map_; }
    std::int64_t global_step() const { return global_step_; }
    bool done() const { return done_; }
    // The PS stopped the job for preemption (a reply said `stopped`).
    bool stopped() const { return stopped_; }
    // The checkpoint step the PS tasks restored, if they did.
    std::optional<std::uint64_t> restored_step() const { return restored_; }
    // PS p reads and writes this worker's buffers directly.
    bool mapped(std::size_t p) const { return mapped_[p] != 0; }

private:
    // Generic request: `type` to every PS with `payload` (total floats, or
    // null) sliced by the shard map, or `bytes` (the same for every PS).
    // Waits for every reply; throws pstrain::error naming the PS that was
    // lost, did not answer, or aborted the job.  PARAMS replies land in
    // params() (as a message, or written there by a PS that mapped it).
    void exchange(msg type, const float* payload, std::optional<std::uint64_t> step, std::uint32_t status,
                  std::uint64_t extra, std::span<const std::uint8_t> bytes = {});
    // Offers the exchange buffers to every PS (MAP), once, before the first
    // PUSH or PULL: the chief's INIT comes first.
    void map_buffers();

    const bootstrap::job& j_;
    transport::worker& w_;
    bootstrap::connections& c_;
    std::size_t total_;
    std::chrono::seconds timeout_;
    transport::mapped_memory memory_;  // params, then grads
    float* params_;
    float* grads_;
    bool offer_, offered_ = false;
    std::vector<char> mapped_;  // per PS: it reads and writes the buffers directly
    std::vector<shard_range> map_;
    std::vector<header> in_, out_;
    // Per PS: header and payload receives and sends.
    std::vector<transport::request> recvs_, payload_recvs_, sends_, payload_sends_;
    std::vector<std::uint64_t> base_step_;
    std::int64_t global_step_ = 0;
    bool done_ = false, stopped_ = false;
    std::optional<std::uint64_t> restored_;
};

}  // namespace pstrain::ps
