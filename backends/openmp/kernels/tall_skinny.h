// Tall-skinny dense product Y = X W for X [rows x K] with many rows and a narrow weight
// W [K x M] (M <= kSkinnyMaxWidth: the hidden widths of GNN layers).
//
// This is the dense input-feature product of a first GNN layer (Flickr-shaped: 89,250 x 500
// through 500 x 32). OpenBLAS packs X into panels before multiplying (an extra read and write of
// the largest array); here X is read once, in row order: 8 rows x 32 columns of Y live in 16 zmm
// accumulators, and per k one row of W (2 loads, L1/L2) and 8 broadcasts of X feed 16 FMAs.
// A last tile narrower than 32 columns uses masked loads and stores; any K and M work.
//
// (The weight gradient X^T G stays on BLAS: a register-tiled version of it measured slower.)
#pragma once

#include <algorithm>

#include "common.h"

namespace mg {

inline constexpr idx_t kSkinnyMaxWidth = 64;

namespace skinny_detail {

constexpr int kRows = 8;          // rows of Y per register tile

#if MG_HAVE_AVX512
MG_INLINE __mmask16 lanes(idx_t n) {
    return n >= 16 ? static_cast<__mmask16>(0xFFFF) : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1u);
}

// Y[0..R) x [m0, m0+32) = X[0..R) . W[:, m0..m0+32), X rows of length K (row-major).
template <int R>
MG_INLINE void nn_tile(const float* MG_RESTRICT X, idx_t K, const float* MG_RESTRICT W, idx_t M, idx_t m0,
                       float* MG_RESTRICT Y) {
    const __mmask16 k0 = lanes(M - m0), k1 = lanes(M - m0 - 16);
    __m512 acc[R][2];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (idx_t k = 0; k < K; ++k) {
        const float* w = W + k * M + m0;
        const __m512 w0 = _mm512_maskz_loadu_ps(k0, w), w1 = _mm512_maskz_loadu_ps(k1, w + 16);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
            const __m512 x = _mm512_set1_ps(X[i * K + k]);
            acc[i][0] = _mm512_fmadd_ps(x, w0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(x, w1, acc[i][1]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
        _mm512_mask_storeu_ps(Y + i * M + m0, k0, acc[i][0]);
        _mm512_mask_storeu_ps(Y + i * M + m0 + 16, k1, acc[i][1]);
    }
}

#endif

// Rows [r0, r1) of Y = X W.
inline void nn_rows(const float* X, idx_t K, const float* W, idx_t M, float* Y, idx_t r0, idx_t r1) {
#if MG_HAVE_AVX512
    idx_t r = r0;
    for (; r + kRows <= r1; r += kRows)
        for (idx_t m0 = 0; m0 < M; m0 += 32) nn_tile<kRows>(X + r * K, K, W, M, m0, Y + r * M);
    for (; r < r1; ++r)
        for (idx_t m0 = 0; m0 < M; m0 += 32) nn_tile<1>(X + r * K, K, W, M, m0, Y + r * M);
#else
    for (idx_t r = r0; r < r1; ++r) {
        float* y = Y + r * M;
        for (idx_t m = 0; m < M; ++m) y[m] = 0.f;
        for (idx_t k = 0; k < K; ++k) {
            const float x = X[r * K + k];
            const float* w = W + k * M;
#pragma omp simd
            for (idx_t m = 0; m < M; ++m) y[m] += x * w[m];
        }
    }
#endif
}

}  // namespace skinny_detail

// Y[rows, M] = X[rows, K] W[K, M], rows split statically over the OpenMP threads.
inline int tall_skinny_nn(idx_t rows, idx_t K, idx_t M, const float* X, const float* W, float* Y) {
    if (rows < 0 || K < 0 || M < 0 || M > kSkinnyMaxWidth) return kErrArgument;
    if (omp_in_parallel()) return kErrInParallel;
#pragma omp parallel
    {
        const idx_t T = omp_get_num_threads(), t = omp_get_thread_num();
        // Blocks of whole register tiles per thread, so only the last block has a remainder.
        const idx_t tiles = (rows + skinny_detail::kRows - 1) / skinny_detail::kRows;
        const idx_t per = (tiles + T - 1) / T;
        const idx_t r0 = std::min(rows, t * per * skinny_detail::kRows);
        const idx_t r1 = std::min(rows, r0 + per * skinny_detail::kRows);
        if (r1 > r0) skinny_detail::nn_rows(X, K, W, M, Y, r0, r1);
    }
    return kOk;
}

}  // namespace mg
