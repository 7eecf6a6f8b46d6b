// Random numbers that are the same with every compiler and standard library.
// The standard's engines (std::mt19937_64) are specified bit for bit, its
// distributions are not: std::normal_distribution gives other numbers with
// libc++ than with libstdc++. So the distributions are written once here,
// on top of any engine that returns 64 bits per call, and splitmix64 is the
// engine for new code (small, fast, and its reference outputs are known).
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <numbers>

namespace pstrain::random {

// An engine giving 64 uniformly random bits per call.
// clang-format off (clang-format 14 lays requires-expressions out badly)
template <class G>
concept bits64 = requires(G& g)
{
    {
        g()
        } -> std::same_as<std::uint64_t>;
}
&&G::min() == 0 && G::max() == std::numeric_limits<std::uint64_t>::max();
// clang-format on

// splitmix64 (Steele, Lea and Flood, 2014), as in Vigna's reference
// splitmix64.c: a Weyl sequence through a mixing function.
constexpr std::uint64_t splitmix64_increment = 0x9e3779b97f4a7c15ull;

constexpr std::uint64_t splitmix64_mix(std::uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The k-th output (k >= 1) of splitmix64 seeded with `seed`, one mix away:
// a GPU thread draws what the sequential generator draws (constexpr, so
// CUDA kernels call it too).
constexpr std::uint64_t splitmix64_at(std::uint64_t seed, std::uint64_t k)
{
    return splitmix64_mix(seed + k * splitmix64_increment);
}

class splitmix64 {
public:
    using result_type = std::uint64_t;

    explicit constexpr splitmix64(std::uint64_t seed) : state_(seed) {}

    static constexpr result_type min() { return 0; }
    static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }

    constexpr result_type operator()() { return splitmix64_mix(state_ += splitmix64_increment); }

private:
    std::uint64_t state_;
};

// A double in (0, 1) from the top 53 bits, centred in its bucket: never 0,
// so log() of it is finite, and the arithmetic is exact.
template <bits64 G>
double uniform_open01(G& g)
{
    return (static_cast<double>(g() >> 11) + 0.5) * 0x1p-53;
}

// A double in (lo, hi).
template <bits64 G>
double uniform(G& g, double lo, double hi)
{
    return lo + (hi - lo) * uniform_open01(g);
}

// N(0, 1) by Box-Muller, one value per pair of draws. The two draws are
// separate statements because C++ leaves the order in which the operands of
// one expression are evaluated unspecified.
template <bits64 G>
double standard_normal(G& g)
{
    const double u1 = uniform_open01(g);
    const double u2 = uniform_open01(g);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace pstrain::random
