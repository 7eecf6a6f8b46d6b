#include "library/ps/update_pool.hpp"

namespace pstrain::ps {

update_pool::update_pool(int threads)
{
    const auto mode = current_denormal_mode();
    for (int t = 1; t < threads; ++t) helpers_.emplace_back([this, mode] { help(mode); });
}

update_pool::~update_pool()
{
    {
        std::lock_guard lock(mutex_);
        quit_ = true;
    }
    start_.notify_all();
    for (auto& t : helpers_) t.join();
}

void update_pool::run(std::size_t blocks, const std::function<void(std::size_t)>& block)
{
    if (helpers_.empty() || blocks < 2) {
        for (std::size_t b = 0; b < blocks; ++b) block(b);
        return;
    }
    {
        std::lock_guard lock(mutex_);
        block_ = &block;
        blocks_ = blocks;
        next_.store(0, std::memory_order_relaxed);
        busy_ = static_cast<int>(helpers_.size());
        ++generation_;
    }
    start_.notify_all();
    take_blocks();
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [this] { return busy_ == 0; });
    block_ = nullptr;
}

void update_pool::take_blocks()
{
    for (std::size_t b = next_.fetch_add(1, std::memory_order_relaxed); b < blocks_;
         b = next_.fetch_add(1, std::memory_order_relaxed))
        (*block_)(b);
}

void update_pool::help(denormal_mode mode)
{
    set_denormal_mode(mode);
    std::uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock lock(mutex_);
            start_.wait(lock, [&] { return quit_ || generation_ != seen; });
            if (quit_) return;
            seen = generation_;
        }
        take_blocks();
        bool last = false;
        {
            std::lock_guard lock(mutex_);
            last = --busy_ == 0;
        }
        if (last) finished_.notify_one();
    }
}

}  // namespace pstrain::ps
