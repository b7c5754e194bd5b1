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
    const uint64_t base = stream_base(key), thr = drop_threshold(p);
    const float s = 1.0f / (1.0f - p);
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = keep(base, static_cast<uint64_t>(i), thr) ? x[i] * s : 0.0f;
}

// dropout_fwd on a [rows, cols] matrix whose row r is row row_ids[r] of a larger one (a rank's
// share of a distributed value): element (r, c) keeps the mask of index row_ids[r] * cols + c.
// row_ids == nullptr: row r is row r, and this is dropout_fwd.
inline void dropout_rows_fwd(const float* x, float* y, int64_t rows, int64_t cols, const int64_t* row_ids,
                             float p, DropoutKey key) {
    if (row_ids == nullptr) {
        dropout_fwd(x, y, rows * cols, p, key);
        return;
    }
    using namespace dropout_detail;
    const uint64_t base = stream_base(key), thr = p <= 0.0f ? 0 : drop_threshold(p);
    const float s = p <= 0.0f ? 1.0f : 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        const uint64_t first = static_cast<uint64_t>(row_ids[r] * cols);
        for (int64_t c = 0; c < cols; ++c)
            y[r * cols + c] = thr == 0 || keep(base, first + static_cast<uint64_t>(c), thr) ? x[r * cols + c] * s : 0.0f;
    }
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
