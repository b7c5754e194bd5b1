// Inverted dropout with a counter-based random stream.
//
// Whether element i is kept is a pure function of (seed, epoch, op_id, i): a splitmix64 hash,
// no generator state.  The mask is therefore the same for any thread count or schedule, and the
// backward pass regenerates it instead of storing it.  A variant that stores the mask as a
// bitmask (1 bit per element) is offered for callers that prefer memory over recomputation.
//
// Kept elements are scaled by 1/(1-p) so evaluation needs no rescaling.  Preconditions:
// 0 <= p < 1 (p == 0 is an identity copy).
#pragma once

#include <cstdint>

#include "common.h"

namespace mg {

// DropoutKey and the hash (mix64, stream_base, drop_threshold, keep): runtime/op_types.h.
namespace dropout_detail {

inline constexpr int64_t kParallelMin = 1 << 15;
inline constexpr int64_t kBlock = 64;  // elements per block of keep masks

#if MG_HAVE_SIMD
// keep() for kLanes consecutive elements at a time: the hash's two 64-bit multiplies run on
// vector lanes (AVX2 has no 64-bit multiply, so GCC left the scalar loop unvectorised; with the
// branch its select compiled to, that loop took about 15 cycles an element, this one 2).
// Bit-identical to keep(): same counters, same splitmix64.
class KeepLanes {
  public:
    KeepLanes(uint64_t base, uint64_t first, uint64_t threshold) : thr_(threshold) {
        alignas(64) uint64_t z[simd::kLanes];
        for (int j = 0; j < simd::kLanes; ++j) z[j] = base + (first + uint64_t(j) + 1) * kGolden;
        lo_ = simd::load_u64(z);
        hi_ = simd::load_u64(z + simd::kLanes / 2);
        step_ = simd::set1_u64(uint64_t(simd::kLanes) * kGolden);
    }
    // The keep mask of the next kLanes elements.
    simd::mask next() {
        const simd::mask m = simd::high_half_at_least(mix(lo_), mix(hi_), thr_);
        lo_ = simd::add_u64(lo_, step_);
        hi_ = simd::add_u64(hi_, step_);
        return m;
    }

  private:
    static simd::vu64 mix(simd::vu64 z) {  // mix64 of op_types.h
        using namespace simd;
        z = mul_u64(xor_u64(z, shr_u64<30>(z)), 0xBF58476D1CE4E5B9ull);
        z = mul_u64(xor_u64(z, shr_u64<27>(z)), 0x94D049BB133111EBull);
        return xor_u64(z, shr_u64<31>(z));
    }
    uint64_t thr_;
    simd::vu64 lo_, hi_, step_;
};
#endif

// k[j] = keep(base, first + j, threshold) ? ~0 : 0 for j in [0, n), n <= kBlock.
MG_INLINE void keep_masks(uint64_t base, uint64_t first, int64_t n, uint64_t threshold, uint32_t* k) {
#if MG_HAVE_SIMD
    KeepLanes lanes(base, first, threshold);
    for (int64_t j = 0; j < n; j += simd::kLanes) simd::store_mask(reinterpret_cast<int32_t*>(k + j), lanes.next());
#else
    for (int64_t j = 0; j < n; ++j) k[j] = keep(base, first + uint64_t(j), threshold) ? ~0u : 0u;
#endif
}

// Calls body(i, k, m) for the blocks [i, i + m) of [0, n), m <= kBlock, with k[j] the keep mask
// of element first + i + j (see keep_masks): threads take whole blocks.
template <class Body>
inline void for_keep_blocks(int64_t n, uint64_t first, uint64_t base, uint64_t threshold, Body body) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t i = b * kBlock, m = n - i < kBlock ? n - i : kBlock;
        alignas(64) uint32_t k[kBlock];
        keep_masks(base, first + uint64_t(i), m, threshold, k);
        body(i, k, m);
    }
}

// for_keep_blocks over a [rows, cols] matrix whose row r is row row_ids[r] of a larger one (a
// rank's share of a distributed value): k[j] is the mask of index row_ids[r] * cols + c, and
// body gets the local offset r * cols + c.  row_ids == nullptr: row r is row r.
template <class Body>
inline void for_keep_rows(int64_t rows, int64_t cols, const int64_t* row_ids, uint64_t base, uint64_t threshold,
                          Body body) {
    if (row_ids == nullptr) return for_keep_blocks(rows * cols, 0, base, threshold, body);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        const uint64_t first = static_cast<uint64_t>(row_ids[r] * cols);
        for (int64_t c = 0; c < cols; c += kBlock) {
            const int64_t m = cols - c < kBlock ? cols - c : kBlock;
            alignas(64) uint32_t k[kBlock];
            keep_masks(base, first + uint64_t(c), m, threshold, k);
            body(r * cols + c, k, m);
        }
    }
}

#if MG_HAVE_SIMD
// Outputs at least this large are written past the caches (they do not fit, and their lines are
// then neither read for ownership nor evicted dirty): with 16-float vectors, where the kernel is
// bound by memory; 2 threads, AMD EPYC, 89,250 x 500: 9.3 -> 7.3 ms.  With AVX2 the hash bounds it
// and streaming stores measured slower (13.1 -> 14.2 ms).
inline constexpr int64_t kStreamBytes = int64_t(64) << 20;

inline bool streams(const float* y, int64_t n) {
    return simd::kLanes == 16 && n * int64_t(sizeof(float)) >= kStreamBytes &&
           reinterpret_cast<std::uintptr_t>(y) % 64 == 0;
}

// dropout_fwd's loop with streaming stores; each thread fences its own before the team ends.
inline void dropout_streamed(const float* x, float* y, int64_t n, float s, uint64_t base, uint64_t threshold) {
    using namespace simd;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    const vf scale = set1(s);
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
        for (int64_t b = 0; b < blocks; ++b) {
            const int64_t i = b * kBlock, m = n - i < kBlock ? n - i : kBlock;
            alignas(64) uint32_t k[kBlock];
            keep_masks(base, uint64_t(i), m, threshold, k);
            int64_t j = 0;
            for (; j + kLanes <= m; j += kLanes)   // kBlock is whole vectors: y + i + j stays aligned
                stream(y + i + j, and_bits(mul(load(x + i + j), scale), load_i32(reinterpret_cast<const int32_t*>(k + j))));
            for (; j < m; ++j) y[i + j] = keep_bits(k[j], x[i + j] * s);
        }
        _mm_sfence();
    }
}
#endif

}  // namespace dropout_detail

// The keep decision of element i, exposed for tests and for fused kernels that apply dropout
// inline.
inline bool dropout_keep(DropoutKey key, float p, int64_t i) {
    return dropout_detail::keep(dropout_detail::stream_base(key), static_cast<uint64_t>(i),
                                dropout_detail::drop_threshold(p));
}

// y = mask(x) / (1 - p); y may alias x.
inline void dropout_fwd(const float* x, float* y, int64_t n, float p, DropoutKey key) {
    using namespace dropout_detail;
    if (p <= 0.0f) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
        for (int64_t i = 0; i < n; ++i) y[i] = x[i];
        return;
    }
    const float s = 1.0f / (1.0f - p);
#if MG_HAVE_SIMD
    if (streams(y, n)) return dropout_streamed(x, y, n, s, stream_base(key), drop_threshold(p));
#endif
    for_keep_blocks(n, 0, stream_base(key), drop_threshold(p), [&](int64_t i, const uint32_t* k, int64_t m) {
#pragma omp simd
        for (int64_t j = 0; j < m; ++j) y[i + j] = keep_bits(k[j], x[i + j] * s);
    });
}

// dropout_fwd on a [rows, cols] matrix whose row r is row row_ids[r] of a larger one (a rank's
// share of a distributed value): element (r, c) keeps the mask of index row_ids[r] * cols + c.
// row_ids == nullptr: row r is row r, and this is dropout_fwd.
inline void dropout_rows_fwd(const float* x, float* y, int64_t rows, int64_t cols, const int64_t* row_ids,
                             float p, DropoutKey key) {
    if (row_ids == nullptr || p <= 0.0f) {
        dropout_fwd(x, y, rows * cols, p, key);
        return;
    }
    using namespace dropout_detail;
    const float s = 1.0f / (1.0f - p);
    for_keep_rows(rows, cols, row_ids, stream_base(key), drop_threshold(p), [&](int64_t i, const uint32_t* k, int64_t m) {
#pragma omp simd
        for (int64_t j = 0; j < m; ++j) y[i + j] = keep_bits(k[j], x[i + j] * s);
    });
}

// gx = mask(gy) / (1 - p) with the mask regenerated from the same key.
inline void dropout_bwd(const float* gy, float* gx, int64_t n, float p, DropoutKey key) {
    dropout_fwd(gy, gx, n, p, key);
}

// Number of uint64 words of a bitmask for n elements.
inline int64_t dropout_mask_words(int64_t n) { return (n + 63) / 64; }

// As dropout_fwd, and records the mask: bit (i % 64) of bits[i / 64] is 1 when kept.  The mask
// is identical to the one dropout_fwd would use for the same key.  Parallel over whole words so
// each word has one writer.
inline void dropout_fwd_mask(const float* x, float* y, int64_t n, float p, DropoutKey key, uint64_t* bits) {
    using namespace dropout_detail;
    const uint64_t base = stream_base(key), thr = p <= 0.0f ? 0 : drop_threshold(p);
    const float s = p <= 0.0f ? 1.0f : 1.0f / (1.0f - p);
    const int64_t words = dropout_mask_words(n);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t w = 0; w < words; ++w) {
        const int64_t lo = w * 64, hi = lo + 64 < n ? lo + 64 : n;
        uint64_t word = 0;
        for (int64_t i = lo; i < hi; ++i) {
            const bool k = thr == 0 || keep(base, static_cast<uint64_t>(i), thr);
            word |= static_cast<uint64_t>(k) << (i - lo);
            y[i] = k ? x[i] * s : 0.0f;
        }
        bits[w] = word;
    }
}

// Backward from a stored bitmask.
inline void dropout_bwd_mask(const float* gy, float* gx, int64_t n, float p, const uint64_t* bits) {
    using namespace dropout_detail;
    const float s = p <= 0.0f ? 1.0f : 1.0f / (1.0f - p);
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) gx[i] = ((bits[i >> 6] >> (i & 63)) & 1u) ? gy[i] * s : 0.0f;
}

}  // namespace mg
