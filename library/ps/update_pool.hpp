// Threads that share a large shard's update: the caller and threads - 1
// helpers each take blocks of the shard until none is left.  The helpers
// sleep between steps (a futex wake-up costs microseconds, so a server
// uses them only where a step's update takes far longer).  Each helper
// computes with the denormal mode (common/denormals.hpp) of the thread that
// made the pool: the server's, which flushes unless told not to.
#pragma once

#include "common/denormals.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pstrain::ps {

class update_pool {
public:
    explicit update_pool(int threads);
    ~update_pool();
    update_pool(const update_pool&) = delete;
    update_pool& operator=(const update_pool&) = delete;

    int threads() const { return static_cast<int>(helpers_.size()) + 1; }

    // Calls block(b) once for every b in [0, blocks), on up to threads()
    // threads at once (the caller's among them); returns when all are done.
    // `block` must not throw.
    void run(std::size_t blocks, const std::function<void(std::size_t)>& block);

private:
    void help(denormal_mode mode);
    void take_blocks();

    std::vector<std::thread> helpers_;
    std::mutex mutex_;
    std::condition_variable start_, finished_;
    std::uint64_t generation_ = 0;  // a new run() began
    int busy_ = 0;                  // helpers still in this run
    bool quit_ = false;
    const std::function<void(std::size_t)>* block_ = nullptr;
    std::size_t blocks_ = 0;
    std::atomic<std::size_t> next_{0};
};

}  // namespace pstrain::ps
