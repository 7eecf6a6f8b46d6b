// The time_profile of a client or a server: the owner thread moves from
// phase to phase (scopes nest: leaving one returns to the phase it
// interrupted); other threads read a snapshot.
#pragma once

#include "pstrain/profile.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace pstrain::ps {

template <std::size_t N>
class phase_clock {
public:
    using names = std::array<std::pair<const char*, const char*>, N>;  // name, what

    explicit phase_clock(const names& n) : names_(n), last_(std::chrono::steady_clock::now()) {}

    // Enters phase p; returns the phase it left.
    std::size_t enter(std::size_t p)
    {
        const auto now = std::chrono::steady_clock::now();
        add(time_[current_], (now - last_).count());
        add(entered_[p], 1);
        last_ = now;
        return std::exchange(current_, p);
    }
    void step_done() { add(steps_, 1); }

    time_profile snapshot() const
    {
        time_profile t;
        for (std::size_t p = 0; p < N; ++p)
            t.phases.push_back({names_[p].first, names_[p].second,
                                std::chrono::nanoseconds(time_[p].load(std::memory_order_relaxed)),
                                entered_[p].load(std::memory_order_relaxed)});
        t.steps = steps_.load(std::memory_order_relaxed);
        return t;
    }

    // Phase p for the duration of a scope.
    class scope {
    public:
        scope(phase_clock& c, std::size_t p) : c_(c), left_(c.enter(p)) {}
        ~scope() { c_.enter(left_); }
        scope(const scope&) = delete;
        scope& operator=(const scope&) = delete;

    private:
        phase_clock& c_;
        std::size_t left_;
    };

private:
    // One writer: a plain load and store, no locked instruction.
    static void add(std::atomic<std::int64_t>& a, std::int64_t v)
    {
        a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
    }
    static void add(std::atomic<std::uint64_t>& a, std::uint64_t v)
    {
        a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
    }

    const names names_;
    std::array<std::atomic<std::int64_t>, N> time_{};
    std::array<std::atomic<std::uint64_t>, N> entered_{};
    std::atomic<std::uint64_t> steps_{0};
    std::size_t current_ = 0;
    std::chrono::steady_clock::time_point last_;
};

}  // namespace pstrain::ps
