// Tall-skinny dense product Y = X W for X [rows x K] with many rows and a narrow weight
// W [K x M] (M <= kSkinnyMaxWidth: the hidden widths of GNN layers).
//
// This is the dense input-feature product of a first GNN layer (Flickr-shaped: 89,250 x 500
// through 500 x 32). OpenBLAS packs X into panels before multiplying (an extra read and write of
// the largest array); here X is read once, in row order: 8 rows x 32 columns of Y live in 16 zmm
// accumulators, and per k one row of W (2 loads, L1/L2) and 8 broadcasts of X feed 16 FMAs.
// A last tile narrower than 32 columns uses masked loads and stores; any K and M work.
//
// The weight gradient X^T G of the same shapes (tall_skinny_tn) is computed as G^T X so that X
// is again read in row order: on 89,250 x 500 rows with M = 32, 29-32 ms against OpenBLAS's
// 44-50 ms (which packs X first).
#pragma once

#include <algorithm>
#include <vector>

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

// The weight gradient, computed as its transpose: WT[m0..m0+MB) x [k0, k0+48) += G^T X over rows
// [r0, r1).  X is read in row order (3 contiguous loads per row, no packing), G broadcast: MB x 3
// zmm accumulators, the mirror image of nn_tile.  WT is [M x K] row-major.
template <int MB>
MG_INLINE void tn_tile(const float* MG_RESTRICT X, idx_t K, const float* MG_RESTRICT G, idx_t M, idx_t m0,
                       idx_t k0, idx_t r0, idx_t r1, float* MG_RESTRICT WT) {
    const __mmask16 q0 = lanes(K - k0), q1 = lanes(K - k0 - 16), q2 = lanes(K - k0 - 32);
    __m512 acc[MB][3];
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) acc[i][0] = acc[i][1] = acc[i][2] = _mm512_setzero_ps();
    for (idx_t r = r0; r < r1; ++r) {
        const float* x = X + r * K + k0;
        const __m512 x0 = _mm512_maskz_loadu_ps(q0, x), x1 = _mm512_maskz_loadu_ps(q1, x + 16),
                     x2 = _mm512_maskz_loadu_ps(q2, x + 32);
        const float* g = G + r * M + m0;
#pragma GCC unroll 8
        for (int i = 0; i < MB; ++i) {
            const __m512 gi = _mm512_set1_ps(g[i]);
            acc[i][0] = _mm512_fmadd_ps(gi, x0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(gi, x1, acc[i][1]);
            acc[i][2] = _mm512_fmadd_ps(gi, x2, acc[i][2]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
        float* w = WT + (m0 + i) * K + k0;
        _mm512_mask_storeu_ps(w, q0, _mm512_add_ps(_mm512_maskz_loadu_ps(q0, w), acc[i][0]));
        _mm512_mask_storeu_ps(w + 16, q1, _mm512_add_ps(_mm512_maskz_loadu_ps(q1, w + 16), acc[i][1]));
        _mm512_mask_storeu_ps(w + 32, q2, _mm512_add_ps(_mm512_maskz_loadu_ps(q2, w + 32), acc[i][2]));
    }
}

#endif

// WT[M x K] += (G^T X) over rows [r0, r1).  Rows go in chunks of kTnRows: a 48-column slice of the
// chunk of X (24 KiB) and the chunk of G (16 KiB at M = 32) stay in L1 while every 8-column block
// of G passes over the slice.  (Chunks of 64-256 rows measured within noise of each other; a
// chunk kept in L2 while the blocks of G pass over all of it ran at half the speed.)
inline void tn_rows(const float* X, idx_t K, const float* G, idx_t M, float* WT, idx_t r0, idx_t r1) {
#if MG_HAVE_AVX512
    constexpr idx_t kTnRows = 128;
    for (idx_t c0 = r0; c0 < r1; c0 += kTnRows) {
        const idx_t c1 = std::min(r1, c0 + kTnRows);
        for (idx_t k0 = 0; k0 < K; k0 += 48) {
            idx_t m0 = 0;
            for (; m0 + 8 <= M; m0 += 8) tn_tile<8>(X, K, G, M, m0, k0, c0, c1, WT);
            switch (M - m0) {
                case 7: tn_tile<7>(X, K, G, M, m0, k0, c0, c1, WT); break;
                case 6: tn_tile<6>(X, K, G, M, m0, k0, c0, c1, WT); break;
                case 5: tn_tile<5>(X, K, G, M, m0, k0, c0, c1, WT); break;
                case 4: tn_tile<4>(X, K, G, M, m0, k0, c0, c1, WT); break;
                case 3: tn_tile<3>(X, K, G, M, m0, k0, c0, c1, WT); break;
                case 2: tn_tile<2>(X, K, G, M, m0, k0, c0, c1, WT); break;
                case 1: tn_tile<1>(X, K, G, M, m0, k0, c0, c1, WT); break;
                default: break;
            }
        }
    }
#else
    for (idx_t r = r0; r < r1; ++r)
        for (idx_t m = 0; m < M; ++m) {
            const float g = G[r * M + m];
            float* w = WT + m * K;
            const float* x = X + r * K;
#pragma omp simd
            for (idx_t k = 0; k < K; ++k) w[k] += g * x[k];
        }
#endif
}

// Rows [r0, r1) of Y = epi(X W): the epilogue runs on each block of rows right after it is written.
inline void nn_rows(const float* X, idx_t K, const float* W, idx_t M, float* Y, idx_t r0, idx_t r1,
                    const Epilogue& epi) {
#if MG_HAVE_AVX512
    idx_t r = r0;
    for (; r + kRows <= r1; r += kRows) {
        for (idx_t m0 = 0; m0 < M; m0 += 32) nn_tile<kRows>(X + r * K, K, W, M, m0, Y + r * M);
        apply_epilogue_rows(epi, Y, M, r, r + kRows);
    }
    for (; r < r1; ++r) {
        for (idx_t m0 = 0; m0 < M; m0 += 32) nn_tile<1>(X + r * K, K, W, M, m0, Y + r * M);
        apply_epilogue_rows(epi, Y, M, r, r + 1);
    }
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
        apply_epilogue_rows(epi, Y, M, r, r + 1);
    }
#endif
}

}  // namespace skinny_detail

// Y[rows, M] = epi(X[rows, K] W[K, M]) (bias and activation, none by default), rows split
// statically over the OpenMP threads.
inline int tall_skinny_nn(idx_t rows, idx_t K, idx_t M, const float* X, const float* W, float* Y,
                          const Epilogue& epi = Epilogue{}) {
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
        if (r1 > r0) skinny_detail::nn_rows(X, K, W, M, Y, r0, r1, epi);
    }
    return kOk;
}

// dW[K, M] = X[rows, K]^T G[rows, M] for a narrow G (M <= kSkinnyMaxWidth): each thread sums its
// rows into a private transposed partial (G^T X, so X streams in row order), then the partials are
// added and transposed into dW once.
inline int tall_skinny_tn(idx_t rows, idx_t K, idx_t M, const float* X, const float* G, float* dW) {
    if (rows < 0 || K < 0 || M < 0 || M > kSkinnyMaxWidth) return kErrArgument;
    if (omp_in_parallel()) return kErrInParallel;
    const idx_t T = omp_get_max_threads();
    std::vector<float> partial(size_t(T * K * M));        // zero: a thread that never starts adds nothing
#pragma omp parallel num_threads(int(T))
    {
        const idx_t t = omp_get_thread_num(), n = omp_get_num_threads();
        const idx_t per = (rows + n - 1) / n, r0 = std::min(rows, t * per), r1 = std::min(rows, r0 + per);
        if (r1 > r0) skinny_detail::tn_rows(X, K, G, M, partial.data() + t * K * M, r0, r1);
    }
#pragma omp parallel for schedule(static)
    for (idx_t k = 0; k < K; ++k)
        for (idx_t m = 0; m < M; ++m) {
            float acc = 0.f;
            for (idx_t t = 0; t < T; ++t) acc += partial[size_t(t * K * M + m * K + k)];
            dW[k * M + m] = acc;
        }
    return kOk;
}

}  // namespace mg
