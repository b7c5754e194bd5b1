// Buffers in host memory: the storage of the CPU backends (OpenMP, MPI).  A backend whose
// buffers live elsewhere (CUDA: backends/cuda/memory.cuh) defines mg::Buffer and
// mg::IndexBuffer with the same members, and the generated ABI moves data only through them
// (copy_to_host, copy_from_host, first), never with memcpy on .data.
#ifndef MORPHGEN_HOST_BUFFER_H
#define MORPHGEN_HOST_BUFFER_H

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "context.h"

namespace mg {

// Float buffer owned by a context, 64-byte aligned for AVX-512 loads.
// Freed with its owner (the context), so every buffer a model declares is released.
struct Buffer {
    float *data = nullptr;
    int64_t size = 0;
    Buffer() = default;
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    ~Buffer() { std::free(data); }
    void allocate(int64_t n, int64_t &accounted) {
        release(accounted);
        size = n;
        if (n == 0) return;
        // Buffers of 2 MiB and more sit on transparent huge pages: the kernels read rows of them
        // at random (neighbour rows in the SpMM, weight rows in the sparse feature product), and
        // with 4 KiB pages most of those reads also miss the TLB.  Measured on the NELL-shaped
        // weight: X·W 75-80 ms -> ~60 ms.  madvise is advice: where THP is off nothing changes.
        // The size is only rounded to a cache line: the tail past the last whole huge page stays on
        // 4 KiB pages instead of costing up to 2 MiB of padding per buffer.
        const size_t align = size_t(n) * sizeof(float) >= kHugePage ? kHugePage : 64;
        bytes_ = (size_t(n) * sizeof(float) + 63) / 64 * 64;
        data = static_cast<float *>(std::aligned_alloc(align, bytes_));
        if (!data) throw Error("out of memory allocating " + std::to_string(bytes_) + " bytes");
#ifdef MADV_HUGEPAGE
        if (align == kHugePage) madvise(data, bytes_, MADV_HUGEPAGE);
#endif
        std::memset(data, 0, bytes_);
        accounted += int64_t(bytes_);
    }
    // Data movement of the ABI (parameters, predictions, checkpoints): plain copies here.
    void copy_to_host(float *out, int64_t n = -1) const {
        n = n < 0 ? size : n;
        if (n) std::memcpy(out, data, sizeof(float) * size_t(n));
    }
    std::vector<float> host_copy() const { return std::vector<float>(data, data + size); }
    void copy_from_host(const float *in) { if (size) std::memcpy(data, in, sizeof(float) * size_t(size)); }
    float first() const { return data[0]; }
    void release(int64_t &accounted) {
        if (data) {
            accounted -= int64_t(bytes_);
            std::free(data);
        }
        data = nullptr;
        size = 0;
        bytes_ = 0;
    }

  private:
    static constexpr size_t kHugePage = size_t(2) << 20;
    size_t bytes_ = 0;
};

// Integer buffer (argmax indices of max aggregation).
struct IndexBuffer {
    std::vector<int64_t> data;
    void allocate(int64_t n, int64_t &accounted) {
        accounted -= int64_t(data.size() * sizeof(int64_t));
        data.assign(size_t(n), -1);
        accounted += int64_t(data.size() * sizeof(int64_t));
    }
    int64_t *ptr() { return data.data(); }
};

}  // namespace mg
#endif
