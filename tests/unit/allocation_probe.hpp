// Replaces operator new for the one test program that includes it, so a
// test can tell how large a block reading a hostile size asked for: a
// reader must refuse the size before it allocates anything of that size.
//
// A request above `refused_above` is recorded and refused with
// std::bad_alloc without touching memory, so a regression shows up as a
// failed check (or a bad_alloc where a pstrain::error was expected), never
// as the test machine running out of memory.
//
// Include it from exactly one translation unit of a test program.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace pstrain::testing {

inline std::atomic<std::size_t> largest_allocation{0};
inline constexpr std::size_t refused_above = std::size_t(1) << 30;

// Resets the record; largest() is the largest block asked for since.
struct allocation_probe {
    allocation_probe() { largest_allocation = 0; }
    std::size_t largest() const { return largest_allocation.load(); }
};

inline void record_allocation(std::size_t bytes)
{
    std::size_t seen = largest_allocation.load();
    while (bytes > seen && !largest_allocation.compare_exchange_weak(seen, bytes)) {}
    if (bytes > refused_above) throw std::bad_alloc();
}

}  // namespace pstrain::testing

void* operator new(std::size_t bytes)
{
    pstrain::testing::record_allocation(bytes);
    if (void* p = std::malloc(bytes ? bytes : 1)) return p;
    throw std::bad_alloc();
}

void* operator new[](std::size_t bytes) { return operator new(bytes); }

void* operator new(std::size_t bytes, std::align_val_t align)
{
    pstrain::testing::record_allocation(bytes);
    const auto a = std::max(static_cast<std::size_t>(align), sizeof(void*));
    if (void* p = std::aligned_alloc(a, (std::max<std::size_t>(bytes, 1) + a - 1) / a * a)) return p;
    throw std::bad_alloc();
}

void* operator new[](std::size_t bytes, std::align_val_t align) { return operator new(bytes, align); }

// GCC, inlining these, sees free() of what operator new returned; here
// that is exactly right.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop
