#pragma once
// The float buffers a PS sends from and receives into, placed where the
// worker's slice of its own buffer sits within a page.
//
// On one host UCX moves large messages with a CMA rendezvous: the receiver's
// kernel copies the sender's pages with process_vm_readv.  That copy runs at
// a quarter of its speed when source and destination sit at different
// offsets within a cache line (1 MB in 460-570 us instead of 100-120 us on
// this project's AMD EPYC machines; bench/README.md), and glibc's malloc
// puts a large block 16 bytes past a page.  A worker's buffers come from
// ucp_mem_map and start on a page, so element `begin` of them sits
// begin * 4 bytes (mod 4096) past a page: a shard [begin, end) keeps its
// values at that offset too.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace pstrain::ps {

class float_buffer {
public:
    static constexpr std::size_t page = 4096;

    float_buffer() = default;
    // `n` zeroed floats starting `page_offset` bytes past a page (a multiple
    // of sizeof(float) below 4096).
    explicit float_buffer(std::size_t n, std::size_t page_offset = 0);
    float_buffer(float_buffer&& other) noexcept { swap(other); }
    float_buffer& operator=(float_buffer&& other) noexcept
    {
        float_buffer gone(std::move(other));
        swap(gone);
        return *this;
    }

    float* data() { return data_; }
    const float* data() const { return data_; }
    std::size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    std::size_t page_offset() const { return offset_; }
    float& operator[](std::size_t i) { return data_[i]; }
    float operator[](std::size_t i) const { return data_[i]; }
    float* begin() { return data_; }
    float* end() { return data_ + size_; }
    const float* begin() const { return data_; }
    const float* end() const { return data_ + size_; }

    // Keeps the first min(size(), n) values and the offset; new ones are 0.
    void resize(std::size_t n);
    void swap(float_buffer& other) noexcept;

private:
    struct release {
        void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{page}); }
    };
    std::unique_ptr<std::byte[], release> base_;
    float* data_ = nullptr;
    std::size_t size_ = 0, offset_ = 0;
};

// The offset within a page of element `begin` of a page-aligned buffer.
inline std::size_t page_offset_of(std::uint64_t begin) { return begin * sizeof(float) % float_buffer::page; }

}  // namespace pstrain::ps
