#include "common/denormals.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace pstrain {

namespace {

#if defined(__x86_64__) || defined(__i386__)
// MXCSR: bit 15 flush-to-zero, bit 6 denormals-are-zero.
constexpr unsigned long flush_bits = 0x8040;
unsigned long read_control() { return _mm_getcsr(); }
void write_control(unsigned long v) { _mm_setcsr(static_cast<unsigned>(v)); }
constexpr bool has_bits = true;
#elif defined(__aarch64__)
// FPCR: bit 24 FZ (inputs and outputs flushed alike).
constexpr unsigned long flush_bits = 1ul << 24;
unsigned long read_control()
{
    unsigned long v;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(v));
    return v;
}
void write_control(unsigned long v) { __asm__ __volatile__("msr fpcr, %0" : : "r"(v)); }
constexpr bool has_bits = true;
#else
constexpr unsigned long flush_bits = 0;
unsigned long read_control() { return 0; }
void write_control(unsigned long) {}
constexpr bool has_bits = false;
#endif

}  // namespace

bool can_flush_denormals() { return has_bits; }

void set_denormal_mode(denormal_mode mode)
{
    const unsigned long v = read_control();
    write_control(mode == denormal_mode::flush ? (v | flush_bits) : (v & ~flush_bits));
}

denormal_mode current_denormal_mode()
{
    return has_bits && (read_control() & flush_bits) == flush_bits ? denormal_mode::flush : denormal_mode::keep;
}

std::optional<denormal_mode> parse_denormal_mode(std::string_view text)
{
    if (text == "flush") return denormal_mode::flush;
    if (text == "keep") return denormal_mode::keep;
    return std::nullopt;
}

scoped_denormal_mode::scoped_denormal_mode(denormal_mode mode) : saved_(read_control()) { set_denormal_mode(mode); }

scoped_denormal_mode::~scoped_denormal_mode() { write_control(saved_); }

}  // namespace pstrain
