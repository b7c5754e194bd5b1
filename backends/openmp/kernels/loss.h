// Fused softmax cross-entropy over the masked rows, and accuracy counting.
//
// logits [rows, classes] float32, labels [rows] int64, mask [rows] uint8 (nonzero = counted;
// nullptr = every row).  Precondition: labels of counted rows lie in [0, classes); the data
// loader checks this once, so the per-epoch kernel does not.
#pragma once

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common.h"

namespace mg {

namespace loss_detail {
inline constexpr int64_t kParallelMin = 1 << 14;

inline bool counted(const uint8_t* mask, int64_t i) { return mask == nullptr || mask[i] != 0; }
}  // namespace loss_detail

// Number of rows the mask selects.
inline int64_t mask_count(const uint8_t* mask, int64_t rows) {
    if (mask == nullptr) return rows;
    int64_t c = 0;
#pragma omp parallel for simd reduction(+ : c) schedule(static) if (rows > loss_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i) c += mask[i] != 0;
    return c;
}

// Returns mean over counted rows of -log softmax(logits[i])[labels[i]], computed with the
// log-sum-exp shift by the row maximum.  If dlogits is non-null it receives
// (softmax - onehot) / num_counted on counted rows and 0 elsewhere.  With no counted row the
// loss is 0 and dlogits is all zero.  `count` >= 0 replaces the number of counted rows as the
// divisor: a rank of a distributed run holds some of the rows and divides by the global count.
// `only` (with `only_count` entries): the rows to visit, a superset of the counted ones (the
// training rows, ops.h MaskedRows); dlogits is then written on those rows alone, the others are
// left as they are (no reader of such a gradient reads them).
inline float softmax_cross_entropy(const float* logits, const int64_t* labels, const uint8_t* mask,
                                   int64_t rows, int64_t classes, float* dlogits, int64_t count = -1,
                                   const idx_t* only = nullptr, int64_t only_count = 0) {
    using loss_detail::counted;
    const int64_t n = count >= 0 ? count : mask_count(mask, rows);
    const float inv_n = n > 0 ? 1.0f / static_cast<float>(n) : 0.0f;
    // Per-thread partials over a static partition, added in thread order: an OpenMP reduction
    // combines them in arrival order, which changes the loss's last bits from run to run.
    const int64_t visited = only ? only_count : rows;
    const int team = visited * classes > loss_detail::kParallelMin ? omp_get_max_threads() : 1;
    std::vector<double> partial(static_cast<size_t>(team) * 8, 0.0);   // a cache line apart
#pragma omp parallel num_threads(team)
    {
        double mine = 0.0;
#pragma omp for schedule(static)
        for (int64_t k = 0; k < visited; ++k) {
            const int64_t i = only ? only[k] : k;
            const float* z = logits + i * classes;
            float* d = dlogits ? dlogits + i * classes : nullptr;
            if (!counted(mask, i)) {
                if (d) {
#pragma omp simd
                    for (int64_t c = 0; c < classes; ++c) d[c] = 0.0f;
                }
                continue;
            }
            float zmax = z[0];
#pragma omp simd reduction(max : zmax)
            for (int64_t c = 0; c < classes; ++c) zmax = z[c] > zmax ? z[c] : zmax;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t c = 0; c < classes; ++c) sum += std::exp(z[c] - zmax);
            const float lse = zmax + std::log(sum);
            const int64_t y = labels[i];
            mine += static_cast<double>(lse - z[y]);
            if (d) {
                const float scale = inv_n / sum;
#pragma omp simd
                for (int64_t c = 0; c < classes; ++c) d[c] = std::exp(z[c] - zmax) * scale;
                d[y] -= inv_n;
            }
        }
        partial[static_cast<size_t>(omp_get_thread_num()) * 8] = mine;
    }
    double total = 0.0;
    for (int t = 0; t < team; ++t) total += partial[static_cast<size_t>(t) * 8];
    return n > 0 ? static_cast<float>(total / static_cast<double>(n)) : 0.0f;
}

// Index of the largest logit of row i (the first one on ties, like numpy/torch argmax).
inline int64_t row_argmax(const float* logits, int64_t i, int64_t classes) {
    const float* z = logits + i * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
        if (z[c] > z[best]) best = c;
    return best;
}

// Number of counted rows whose argmax equals the label.
inline int64_t count_correct(const float* logits, const int64_t* labels, const uint8_t* mask, int64_t rows,
                             int64_t classes) {
    int64_t correct = 0;
#pragma omp parallel for schedule(static) reduction(+ : correct) if (rows * classes > loss_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i)
        if (loss_detail::counted(mask, i) && row_argmax(logits, i, classes) == labels[i]) ++correct;
    return correct;
}

}  // namespace mg
