#include "library/ps/aligned_buffer.hpp"

#include "pstrain/error.hpp"

#include <algorithm>
#include <cstring>
#include <new>

#include <fmt/format.h>

namespace pstrain::ps {

float_buffer::float_buffer(std::size_t n, std::size_t page_offset) : size_(n), offset_(page_offset)
{
    if (page_offset % sizeof(float) != 0 || page_offset >= page)
        throw error(fmt::format("internal error: a float buffer cannot start {} bytes past a page", page_offset));
    if (n > (SIZE_MAX - page) / sizeof(float)) throw std::bad_alloc();
    const std::size_t bytes = page_offset + n * sizeof(float);
    base_.reset(static_cast<std::byte*>(::operator new[](std::max<std::size_t>(bytes, 1), std::align_val_t{page})));
    data_ = reinterpret_cast<float*>(base_.get() + page_offset);
    std::memset(data_, 0, n * sizeof(float));
}

void float_buffer::resize(std::size_t n)
{
    if (n == size_) return;
    float_buffer bigger(n, offset_);
    std::copy_n(data_, std::min(n, size_), bigger.data_);
    swap(bigger);
}

void float_buffer::swap(float_buffer& other) noexcept
{
    std::swap(base_, other.base_);
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(offset_, other.offset_);
}

}  // namespace pstrain::ps
