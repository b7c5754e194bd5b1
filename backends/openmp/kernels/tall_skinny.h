// Tall-skinny dense product Y = X W for X [rows x K] with many rows and a narrow weight
// W [K x M] (M <= kSkinnyMaxWidth: the hidden widths of GNN layers).
//
// This is the dense input-feature product of a first GNN layer (Flickr-shaped: 89,250 x 500
// through 500 x 32). OpenBLAS packs X into panels before multiplying (an extra read and write of
// the largest array); here X is read once, in row order: with AVX-512 8 rows x 32 columns of Y
// live in 16 zmm accumulators, and per k one row of W (2 loads, L1/L2) and 8 broadcasts of X feed
// 16 FMAs; with AVX2 6 rows x 16 columns in 12 ymm (simd.h). A last tile narrower than two
// vectors uses masked loads and stores; any K and M work.
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

#if MG_HAVE_SIMD
using namespace simd;

// Register tiles sized to the register file: 32 zmm with AVX-512, 16 ymm with AVX2.
//   forward:  kRows rows x 2 vectors of Y (16 accumulators of 32, or 12 of 16)
//   gradient: kTnBlock rows of WT x 3 vectors (24 accumulators, or 12)
constexpr int kRows = kLanes == 16 ? 8 : 6;
constexpr int kTnBlock = kLanes == 16 ? 8 : 4;
constexpr idx_t kCols = 2 * kLanes;    // columns of Y per forward tile
constexpr idx_t kTnCols = 3 * kLanes;  // columns of X per gradient tile

// Y[0..R) x [m0, m0+kCols) = X[0..R) . W[:, m0..m0+kCols), X rows of length K (row-major).
// FULL: all 2 * kLanes columns exist, so W is read with plain loads (a masked load costs more
// than a load on AMD cores, and this one runs for every k).
template <int R, bool FULL>
MG_INLINE void nn_tile(const float* MG_RESTRICT X, idx_t K, const float* MG_RESTRICT W, idx_t M, idx_t m0,
                       float* MG_RESTRICT Y) {
    const mask k0 = lanes(M - m0), k1 = lanes(M - m0 - kLanes);
    vf acc[R][2];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = zero();
    for (idx_t k = 0; k < K; ++k) {
        const float* w = W + k * M + m0;
        const vf w0 = FULL ? load(w) : load(k0, w), w1 = FULL ? load(w + kLanes) : load(k1, w + kLanes);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
            const vf x = set1(X[i * K + k]);
            acc[i][0] = fmadd(x, w0, acc[i][0]);
            acc[i][1] = fmadd(x, w1, acc[i][1]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
        if (FULL) {
            store(Y + i * M + m0, acc[i][0]);
            store(Y + i * M + m0 + kLanes, acc[i][1]);
        } else {
            store(k0, Y + i * M + m0, acc[i][0]);
            store(k1, Y + i * M + m0 + kLanes, acc[i][1]);
        }
    }
}

// The weight gradient, computed as its transpose: WT[m0..m0+MB) x [k0, k0+kTnCols) += G^T X over
// rows [r0, r1).  X is read in row order (3 contiguous loads per row, no packing), G broadcast:
// MB x 3 accumulators, the mirror image of nn_tile.  WT is [M x K] row-major.  FULL: all
// kTnCols columns of X exist (plain loads, as in nn_tile).
template <int MB, bool FULL>
MG_INLINE void tn_tile(const float* MG_RESTRICT X, idx_t K, const float* MG_RESTRICT G, idx_t M, idx_t m0,
                       idx_t k0, idx_t r0, idx_t r1, float* MG_RESTRICT WT) {
    const mask q0 = lanes(K - k0), q1 = lanes(K - k0 - kLanes), q2 = lanes(K - k0 - 2 * kLanes);
    vf acc[MB][3];
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) acc[i][0] = acc[i][1] = acc[i][2] = zero();
    for (idx_t r = r0; r < r1; ++r) {
        const float* x = X + r * K + k0;
        const vf x0 = FULL ? load(x) : load(q0, x), x1 = FULL ? load(x + kLanes) : load(q1, x + kLanes),
                 x2 = FULL ? load(x + 2 * kLanes) : load(q2, x + 2 * kLanes);
        const float* g = G + r * M + m0;
#pragma GCC unroll 8
        for (int i = 0; i < MB; ++i) {
            const vf gi = set1(g[i]);
            acc[i][0] = fmadd(gi, x0, acc[i][0]);
            acc[i][1] = fmadd(gi, x1, acc[i][1]);
            acc[i][2] = fmadd(gi, x2, acc[i][2]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MB; ++i) {
        float* w = WT + (m0 + i) * K + k0;
        store(q0, w, add(load(q0, w), acc[i][0]));
        store(q1, w + kLanes, add(load(q1, w + kLanes), acc[i][1]));
        store(q2, w + 2 * kLanes, add(load(q2, w + 2 * kLanes), acc[i][2]));
    }
}

// tn_tile<MB> for a run-time MB in [1, B]: the last block of rows of WT when kTnBlock does not
// divide M.
template <int B, bool FULL>
MG_INLINE void tn_tile_upto(int mb, const float* X, idx_t K, const float* G, idx_t M, idx_t m0, idx_t k0,
                            idx_t r0, idx_t r1, float* WT) {
    if constexpr (B >= 1) {
        if (mb == B) tn_tile<B, FULL>(X, K, G, M, m0, k0, r0, r1, WT);
        else tn_tile_upto<B - 1, FULL>(mb, X, K, G, M, m0, k0, r0, r1, WT);
    }
}

// Every block of kTnBlock rows of WT (and the last, narrower one) over columns [k0, k0 + kTnCols).
template <bool FULL>
MG_INLINE void tn_slice(const float* X, idx_t K, const float* G, idx_t M, idx_t k0, idx_t r0, idx_t r1,
                        float* WT) {
    idx_t m0 = 0;
    for (; m0 + kTnBlock <= M; m0 += kTnBlock) tn_tile<kTnBlock, FULL>(X, K, G, M, m0, k0, r0, r1, WT);
    if (m0 < M) tn_tile_upto<kTnBlock - 1, FULL>(int(M - m0), X, K, G, M, m0, k0, r0, r1, WT);
}

#else
constexpr int kRows = 8;  // the threads' row blocks stay multiples of it, as with the tiles
#endif

// WT[M x K] += (G^T X) over rows [r0, r1).  Rows go in chunks of kTnRows: a kTnCols-column slice
// of the chunk of X (24 KiB with AVX-512) and the chunk of G (16 KiB at M = 32) stay in L1 while
// every block of G's columns passes over the slice.  (Chunks of 64-256 rows measured within noise
// of each other; a chunk kept in L2 while the blocks of G pass over all of it ran at half the
// speed.)
inline void tn_rows(const float* X, idx_t K, const float* G, idx_t M, float* WT, idx_t r0, idx_t r1) {
#if MG_HAVE_SIMD
    constexpr idx_t kTnRows = 128;
    for (idx_t c0 = r0; c0 < r1; c0 += kTnRows) {
        const idx_t c1 = std::min(r1, c0 + kTnRows);
        idx_t k0 = 0;
        for (; k0 + kTnCols <= K; k0 += kTnCols) tn_slice<true>(X, K, G, M, k0, c0, c1, WT);
        if (k0 < K) tn_slice<false>(X, K, G, M, k0, c0, c1, WT);
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
#if MG_HAVE_SIMD
    idx_t r = r0;
    for (; r + kRows <= r1; r += kRows) {
        idx_t m0 = 0;
        for (; m0 + kCols <= M; m0 += kCols) nn_tile<kRows, true>(X + r * K, K, W, M, m0, Y + r * M);
        if (m0 < M) nn_tile<kRows, false>(X + r * K, K, W, M, m0, Y + r * M);
        apply_epilogue_rows(epi, Y, M, r, r + kRows);
    }
    for (; r < r1; ++r) {
        for (idx_t m0 = 0; m0 < M; m0 += kCols) nn_tile<1, false>(X + r * K, K, W, M, m0, Y + r * M);
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
