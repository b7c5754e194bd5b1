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
// The weight gradient X^T G of the same shapes (tall_skinny_tn) is the mirror image: kTnBlock
// columns of X (broadcast) by two vectors of G's row (loaded) in the same accumulators, over
// 16-row chunks of X, without packing.  On an AMD EPYC (AVX2), 2 threads, 89,250 x 500 rows
// with M = 64: 42 ms (136 GFLOP/s), against 73-95 ms for the earlier G^T X tiling and 71 ms for
// OpenBLAS (which packs X first).
#pragma once

#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "common.h"

namespace mg {

inline constexpr idx_t kSkinnyMaxWidth = 64;

namespace skinny_detail {

#if MG_HAVE_SIMD
using namespace simd;

// Register tiles sized to the register file: 32 zmm with AVX-512, 16 ymm with AVX2.
//   forward:  kRows rows x 2 vectors of Y (16 accumulators of 32, or 12 of 16)
//   gradient: kTnBlock rows of dW x 2 vectors (16 accumulators, or 12); with AVX-512 and G
//             wider than 3 vectors (49-64 columns), kTnWideBlock rows x 4 vectors (24)
constexpr int kRows = kLanes == 16 ? 8 : 6;
constexpr int kTnBlock = kRows;
constexpr int kTnWideBlock = 6;
// Whether X^T G takes the 4-vector tiles: one pass over X for all of G's columns instead of two
// slices of two vectors each, and per row of X 4 loads of G and 6 broadcasts feeding 24 FMAs
// (against 2 and 8 feeding 16).  2 threads, Intel Xeon with AVX-512 (2 MiB L2 per core), the
// tiles alone: 89,250 x 500 through 64 22.4 -> 17.8 ms, 169,343 x 128 through 64 13.1 -> 11.5.
// Rows of X narrower than 96 keep the 2-vector tiles: 89,250 x 64 through 64 took 3.3 -> 2.8 ms
// alone but 3.6 -> 4.3 ms inside GIN's epoch.
constexpr bool wide_tiles(idx_t M) { return kLanes == 16 && M > 3 * kLanes && M <= 4 * kLanes; }
constexpr bool tn_wide_tiles(idx_t K, idx_t M) { return wide_tiles(M) && K >= 96; }
// The same shape for Y = X W: kWideRows rows x 4 vectors (24 accumulators), per k 4 loads of W and
// 6 broadcasts of X feeding 24 FMAs, against two slices of 8 rows x 2 vectors.  2 threads, Intel
// Xeon with AVX-512: 89,250 x 500 through 64 20.4-21.3 -> 19.5-20.4 ms (89,250 x 64 through 64
// the same, 2.3-2.5 ms).
constexpr int kWideRows = 6;
// Rows of a tile whose columns fit in one vector (outputs of 16 or fewer with AVX-512, 8 with
// AVX2): 16 (AVX-512) or 8 (AVX2) accumulators instead of kRows x 2 vectors of which the second
// is empty.  2 threads, AMD EPYC: AVX-512, 74,000 x 64 through 16 0.68 -> 0.52 ms, through 8
// 0.20 -> 0.13 ms; 2,708 x 1,433 through 16 0.56 -> 0.41 ms; 89,250 x 64 through 7 0.85 -> 0.62;
// AVX2, 74,000 x 16 through 8 0.20 -> 0.12, 89,250 x 64 through 7 1.30 -> 0.50 (12 rows
// measured the same as 8 or 16).
constexpr int kNarrowRows = kLanes == 16 ? 16 : 8;
constexpr idx_t kCols = 2 * kLanes;    // columns of Y (forward) or dW (gradient) per tile
constexpr idx_t kLineFloats = 16;      // floats per 64-byte cache line

// Y[0..R) x [m0, m0 + NV vectors) = X[0..R) . W[:, m0..), X rows of length K (row-major).
// FULL: all NV * kLanes columns exist, so W is read with plain loads (a masked load costs more
// than a load on AMD cores, and this one runs for every k).
// prefetch_next: the R rows after these are fetched into L1 while these are multiplied, one
// line of each per 16 values of k (the hardware prefetcher does not follow the R row streams a
// tile reads; see nn_rows).  INDEXED: row i of the tile is X + index[i] * K (rows gathered where
// they lie), else X + i * K.
template <int R, bool FULL, int NV = 2, bool INDEXED = false>
MG_INLINE void nn_tile(const float* MG_RESTRICT X, idx_t K, const float* MG_RESTRICT W, idx_t M, idx_t m0,
                       float* MG_RESTRICT Y, bool prefetch_next = false, const idx_t* index = nullptr) {
    const float* xr[INDEXED ? R : 1];
    if constexpr (INDEXED)
        for (int i = 0; i < R; ++i) xr[i] = X + index[i] * K;
    auto x_at = [&](int i, idx_t k) -> float {
        if constexpr (INDEXED) return xr[i][k];
        else return X[i * K + k];
    };
    auto next_row = [&](int i) -> const float* { return INDEXED ? X + index[R + i] * K : X + (R + i) * K; };
    mask q[NV];
    vf acc[R][NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) q[v] = lanes(M - m0 - v * kLanes);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = zero();
    for (idx_t k = 0; k < K; ++k) {
        if (prefetch_next && k % kLineFloats == 0) {
#pragma GCC unroll 16
            for (int i = 0; i < R; ++i) prefetch_l1<64>(next_row(i) + k);
        }
        const float* w = W + k * M + m0;
        vf wv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) wv[v] = FULL ? load(w + v * kLanes) : load(q[v], w + v * kLanes);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
            const vf x = set1(x_at(i, k));
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[i][v] = fmadd(x, wv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
            if (FULL) store(Y + i * M + m0 + v * kLanes, acc[i][v]);
            else store(q[v], Y + i * M + m0 + v * kLanes, acc[i][v]);
        }
}

// The weight gradient, in dW's own orientation (the mirror image of nn_tile):
// dW[k0..k0+KB) x [m0, m0 + NV vectors) += X[r0..r1, k0..k0+KB)^T G[r0..r1, m0..).  Per row of
// X: NV contiguous loads of G, KB broadcasts of X, KB x NV FMAs into registers.  FULL: every
// column of the NV vectors exists (plain loads, as in nn_tile).  ahead > 0: each row's values
// `ahead` floats further on (the same columns of the next chunk of rows) are fetched into L2: a
// chunk of long rows (64 x 500 floats, 125 KiB) does not fit L1, and fetching it there evicted
// what the tiles were reading (Intel Xeon, AVX-512, 89,250 x 500 through 64: 19.2 ms with L1
// hints, 17.8 with L2 hints; with the 2-vector tiles 22.4 and 21.2).
// index: row r of X is X + index[r] * ld (rows gathered where they lie), else X + r * K.
template <int KB, int NV, bool FULL>
MG_INLINE void tn_tile(const float* MG_RESTRICT X, idx_t K, const float* MG_RESTRICT G, idx_t M, idx_t m0,
                       idx_t k0, idx_t r0, idx_t r1, float* MG_RESTRICT dW, idx_t ahead = 0,
                       const idx_t* index = nullptr, idx_t ld = 0) {
    mask q[NV];
    vf acc[KB][NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) q[v] = lanes(M - m0 - v * kLanes);
#pragma GCC unroll 12
    for (int i = 0; i < KB; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = zero();
    const float* x = X + r0 * K + k0;
    const float* g = G + r0 * M + m0;
    for (idx_t r = r0; r < r1; ++r, x += K, g += M) {
        if (index) x = X + index[r] * ld + k0;
        if (ahead) prefetch_l2(x + ahead);
        vf gv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) gv[v] = FULL ? load(g + v * kLanes) : load(q[v], g + v * kLanes);
#pragma GCC unroll 12
        for (int i = 0; i < KB; ++i) {
            const vf xi = set1(x[i]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[i][v] = fmadd(xi, gv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < KB; ++i) {
        float* w = dW + (k0 + i) * M + m0;
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
            if (FULL) store(w + v * kLanes, add(load(w + v * kLanes), acc[i][v]));
            else store(q[v], w + v * kLanes, add(load(q[v], w + v * kLanes), acc[i][v]));
        }
    }
}

// Calls f(NV, FULL) (compile-time constants) for the last `left` columns of a product whose tiles
// are two vectors wide: one vector when they fit in one (40 = 32 + 8 with AVX-512, 16 + 16 + 8
// with AVX2), not two of which the second is empty.  Nothing when left is 0.
template <class F>
MG_INLINE void last_columns(idx_t left, F f) {
    if (left > kLanes) f(std::integral_constant<int, 2>{}, std::false_type{});
    else if (left == kLanes) f(std::integral_constant<int, 1>{}, std::true_type{});
    else if (left > 0) f(std::integral_constant<int, 1>{}, std::false_type{});
}

// tn_tile<KB> for a run-time KB in [1, B]: the last columns of X when the block does not divide K.
template <int B, int NV, bool FULL>
MG_INLINE void tn_tile_upto(int kb, const float* X, idx_t K, const float* G, idx_t M, idx_t m0, idx_t k0,
                            idx_t r0, idx_t r1, float* dW, const idx_t* index, idx_t ld) {
    if constexpr (B >= 1) {
        if (kb == B) tn_tile<B, NV, FULL>(X, K, G, M, m0, k0, r0, r1, dW, 0, index, ld);
        else tn_tile_upto<B - 1, NV, FULL>(kb, X, K, G, M, m0, k0, r0, r1, dW, index, ld);
    }
}

// Every block of KB columns of X (and the last, narrower one) against G's columns
// [m0, m0 + NV vectors).
template <int NV, bool FULL, int KB = kTnBlock>
MG_INLINE void tn_slice(const float* X, idx_t K, const float* G, idx_t M, idx_t m0, idx_t r0, idx_t r1,
                        float* dW, idx_t ahead, const idx_t* index, idx_t ld) {
    idx_t k0 = 0;
    for (; k0 + KB <= K; k0 += KB) tn_tile<KB, NV, FULL>(X, K, G, M, m0, k0, r0, r1, dW, ahead, index, ld);
    if (k0 < K) tn_tile_upto<KB - 1, NV, FULL>(int(K - k0), X, K, G, M, m0, k0, r0, r1, dW, index, ld);
}

// The weight gradient of a narrow G (M <= kNarrowTnMax columns, AVX-512 only) in the transposed
// orientation: per row of X, NVX vectors of its columns (loaded) against the M values of G's row
// (broadcast) into M x NVX accumulators that stay in registers for a chunk of rows.  tn_slice's
// tiles broadcast X instead, and with G one vector wide they issue a broadcast per FMA: on an AMD
// EPYC, whose AVX-512 cores take one 512-bit load a cycle, they wait on loads (89,250 x 64 through
// 7, 2 threads: 1.0-1.3 ms for 80 MFLOP, 0.50-0.63 ms this way).  With AVX2's 16 registers the
// two orientations issue the same loads per FMA, so AVX2 keeps the tiles.  Instantiated only for
// the widths a program's dense weight gradients have (tall_skinny_tn<M>, the emitter's
// `matmul_tn<M>`): instances for every width in every program doubled a program's build time.
constexpr int kNarrowTnMax = kLanes == 16 ? 8 : 0;
constexpr idx_t kNarrowTnChunk = 128;   // rows per flush: the chunk's rows of X stay in L1/L2

// dW[k0 + i][m] += sum over rows [r0, r1) of X[r][k0 + i] G[r][m] for the NVX vectors of columns
// from k0 (masked past K).
template <int M, int NVX>
MG_INLINE void tn_narrow_block(const float* MG_RESTRICT X, idx_t K, const float* MG_RESTRICT G, idx_t k0,
                               idx_t r0, idx_t r1, float* MG_RESTRICT dW) {
    mask q[NVX];
    vf acc[M][NVX];
#pragma GCC unroll 4
    for (int v = 0; v < NVX; ++v) q[v] = lanes(K - k0 - v * kLanes);
    const bool full = K - k0 >= NVX * kLanes;
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
        for (int v = 0; v < NVX; ++v) acc[m][v] = zero();
    for (idx_t r = r0; r < r1; ++r) {
        const float* x = X + r * K + k0;
        vf xv[NVX];
#pragma GCC unroll 4
        for (int v = 0; v < NVX; ++v) xv[v] = full ? load(x + v * kLanes) : load(q[v], x + v * kLanes);
        const float* g = G + r * M;
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            const vf gm = set1(g[m]);
#pragma GCC unroll 4
            for (int v = 0; v < NVX; ++v) acc[m][v] = fmadd(gm, xv[v], acc[m][v]);
        }
    }
    alignas(64) float lane[kLanes];
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
        for (int v = 0; v < NVX; ++v) {
            store(lane, acc[m][v]);
            const idx_t k = k0 + v * kLanes, n = std::min<idx_t>(kLanes, K - k);
            for (idx_t l = 0; l < n; ++l) dW[(k + l) * M + m] += lane[l];
        }
}

// Every block of columns of X for a G of M columns: NVX vectors per block, as many as leave
// registers for the row's vectors and a broadcast (M = 7: 3 vectors, 21 accumulators).
template <int M>
inline void tn_narrow_rows(const float* X, idx_t K, const float* G, float* dW, idx_t r0, idx_t r1) {
    constexpr int kMaxVectors = std::min(4, 31 / (M + 1));
    for (idx_t c0 = r0; c0 < r1; c0 += kNarrowTnChunk) {
        const idx_t c1 = std::min(r1, c0 + kNarrowTnChunk);
        // Whole blocks of kMaxVectors, then one vector at a time (masked past K): two instances
        // per width, where one per block width built a program 1.5 s slower.
        idx_t k0 = 0;
        for (; k0 + kMaxVectors * kLanes <= K; k0 += kMaxVectors * kLanes)
            tn_narrow_block<M, kMaxVectors>(X, K, G, k0, c0, c1, dW);
        for (; k0 < K; k0 += kLanes) tn_narrow_block<M, 1>(X, K, G, k0, c0, c1, dW);
    }
}

#else
constexpr int kRows = 8;  // the threads' row blocks stay multiples of it, as with the tiles
constexpr int kWideRows = 8;
constexpr bool wide_tiles(idx_t) { return false; }
constexpr int kNarrowTnMax = 0;
template <int M>   // declared for tall_skinny_tn's discarded branch; never called without SIMD
void tn_narrow_rows(const float* X, idx_t K, const float* G, float* dW, idx_t r0, idx_t r1);
#endif

// dW[K x M] += X^T G over rows [r0, r1), in chunks of rows: the chunk of X (rows x K) stays in
// L1/L2 while every slice of G's columns passes over it, and each tile's accumulators are added
// into dW once per chunk.  Chunk sizes, 2 threads, 89,250 x 500 through 64 columns: on an AMD
// EPYC with AVX2, 16 rows 42 ms, 32 rows 43, 64 rows 58, 128 rows 94 (the chunk of X no longer
// stays close, and G's slice competes with it); on an AMD EPYC with AVX-512, where a tile's 16
// row steps were too few to pay for zeroing and adding its 16 accumulators, 16 rows 25.1 ms, 32
// rows 19.4, 64 rows 17.6, 256 rows 29.7 (169,343 x 128 through 64: 13.2 ms against 9.5; but
// 89,250 x 64 through 64: 2.2 against 2.5, so narrow X keeps 16 for wide G).  Everywhere else
// 32 rows: a narrow G makes few slices of columns, so each tile's set-up and flush is spread over
// too few row steps at 16.  2 threads, AMD EPYC, AVX2 (-mno-avx512f): 89,250 x 500 through 7
// 8.9 -> 6.1 ms, 169,343 x 128 through 40 9.9 -> 9.1, through 64 14.4 -> 14.0, 169,343 x 64
// through 40 5.4 -> 5.0, 89,250 x 64 through 7 1.34 -> 0.99 (64 rows: 5.6, 9.4, 14.2, 5.0,
// 1.27); AVX-512, 169,343 x 64 through 40 4.1 -> 3.8, 89,250 x 64 through 7 1.34 -> 0.82.
inline idx_t tn_chunk_rows(idx_t K, idx_t M) {
    // The 4-vector tiles, Intel Xeon with AVX-512, 2 threads (chunks of 32, 64, 96 rows): 89,250 x
    // 500 through 64 18.9, 17.8, 17.8 ms; 169,343 x 128 12.2, 11.5, 12.0.
    if (simd::kLanes == 16 && K >= 128) return 64;
    return K < 128 && M > 48 ? 16 : 32;
}

// Whether tn_rows fetches the next chunk of X while it works on one.  A tile reads a few values
// from each of the chunk's rows, one row after another: with long rows that is one stream per
// row, more than the hardware prefetcher follows, and the first pass over each line waited on
// memory.  Fetching the next chunk's lines during the first slice of columns, 2 threads, AMD EPYC:
// AVX-512, 89,250 x 500 through 64 18.0 -> 12.0 ms (316 -> 476 GFLOP/s), through 32 12.1 -> 6.2;
// 169,343 x 128 through 64 9.4 -> 7.2, through 40 8.4 -> 5.7; 100,000 x 100 through 47 3.3 ->
// 3.0; AVX2 (-mno-avx512f, same machine) 89,250 x 500 through 32 18.3 -> 11.7, 169,343 x 128
// through 64 18.0 -> 13.8.  Rows of 64 values (256 bytes) make a 16-row chunk one contiguous 4 KiB
// that the hardware follows itself: there the extra hints cost (89,250 x 64 through 64: 2.2-2.4
// -> 2.3-2.8 ms), hence the bound.
inline bool tn_prefetches(idx_t K) { return K >= 96; }

// index: row r of X is X + index[r] * ld, K of its values read (rows gathered where they lie).
// fetch_end: the rows up to which the next chunk may be fetched ahead (the caller's later rows,
// when it calls this for one span of them after another); r1 when 0.
inline void tn_rows(const float* X, idx_t K, const float* G, idx_t M, float* dW, idx_t r0, idx_t r1,
                    const idx_t* index = nullptr, idx_t ld = 0, idx_t fetch_end = 0) {
#if MG_HAVE_SIMD
    const idx_t chunk = tn_chunk_rows(K, M);
    fetch_end = std::max(fetch_end, r1);
    for (idx_t c0 = r0; c0 < r1; c0 += chunk) {
        const idx_t c1 = std::min(r1, c0 + chunk);
        // The first slice of columns fetches the next chunk (the others find this one in cache).
        idx_t ahead = !index && tn_prefetches(K) && c1 + chunk <= fetch_end ? chunk * K : 0;
        if (tn_wide_tiles(K, M)) {      // every column of G in one slice
            if (M == 4 * kLanes) tn_slice<4, true, kTnWideBlock>(X, K, G, M, 0, c0, c1, dW, ahead, index, ld);
            else tn_slice<4, false, kTnWideBlock>(X, K, G, M, 0, c0, c1, dW, ahead, index, ld);
            continue;
        }
        idx_t m0 = 0;
        for (; m0 + kCols <= M; m0 += kCols)
            tn_slice<2, true>(X, K, G, M, m0, c0, c1, dW, std::exchange(ahead, 0), index, ld);
        last_columns(M - m0, [&](auto nv, auto full) {      // class counts: 7, 40 = 32 + 8
            tn_slice<nv(), full()>(X, K, G, M, m0, c0, c1, dW, ahead, index, ld);
        });
    }
#else
    for (idx_t r = r0; r < r1; ++r)
        for (idx_t k = 0; k < K; ++k) {
            const float x = index ? X[index[r] * ld + k] : X[r * K + k];
            const float* g = G + r * M;
            float* w = dW + k * M;
#pragma omp simd
            for (idx_t m = 0; m < M; ++m) w[m] += x * g[m];
        }
#endif
}

// Rows [r0, r1) of Y = epi(X W): the epilogue runs on each block of rows right after it is written.
// index: row r of X is X + index[r] * K (rows gathered where they lie), else X + r * K.
template <bool INDEXED = false>
inline void nn_rows(const float* X, idx_t K, const float* W, idx_t M, float* Y, idx_t r0, idx_t r1,
                    const Epilogue& epi, const idx_t* index = nullptr) {
#if MG_HAVE_SIMD
    // The tile's rows: its first row (dense) or its index entries (gathered).
    auto tile_x = [&](idx_t r) { return INDEXED ? X : X + r * K; };
    auto tile_index = [&](idx_t r) { return INDEXED ? index + r : nullptr; };
    if (wide_tiles(M)) {     // every column of Y in one tile
        // one loop per instance (a test of FULL per tile: 20.5 ms against 19.1 for this loop alone)
        auto tiles = [&](auto full) {
            idx_t r = r0;
            for (; r + kWideRows <= r1; r += kWideRows) {
                nn_tile<kWideRows, full(), 4, INDEXED>(tile_x(r), K, W, M, 0, Y + r * M, r + 2 * kWideRows <= r1,
                                                       tile_index(r));
                apply_epilogue_rows(epi, Y, M, r, r + kWideRows);
            }
            return r;
        };
        idx_t r = M == 4 * kLanes ? tiles(std::true_type{}) : tiles(std::false_type{});
        for (; r < r1; ++r) {
            nn_tile<1, false, 4, INDEXED>(tile_x(r), K, W, M, 0, Y + r * M, false, tile_index(r));
            apply_epilogue_rows(epi, Y, M, r, r + 1);
        }
        return;
    }
    if (M <= kLanes) {  // one vector of columns: more rows per tile instead of a second, empty vector
        idx_t r = r0;
        for (; r + kNarrowRows <= r1; r += kNarrowRows) {
            const bool prefetch_next = r + 2 * kNarrowRows <= r1;
            if (M == kLanes)
                nn_tile<kNarrowRows, true, 1, INDEXED>(tile_x(r), K, W, M, 0, Y + r * M, prefetch_next, tile_index(r));
            else
                nn_tile<kNarrowRows, false, 1, INDEXED>(tile_x(r), K, W, M, 0, Y + r * M, prefetch_next, tile_index(r));
            apply_epilogue_rows(epi, Y, M, r, r + kNarrowRows);
        }
        for (; r < r1; ++r) {
            nn_tile<1, false, 1, INDEXED>(tile_x(r), K, W, M, 0, Y + r * M, false, tile_index(r));
            apply_epilogue_rows(epi, Y, M, r, r + 1);
        }
        return;
    }
    idx_t r = r0;
    for (; r + kRows <= r1; r += kRows) {
        // The first tile of columns fetches the next block of rows (the others find these in L1):
        // 2 threads, AMD EPYC, AVX-512: 89,250 x 500 through 64 13.4 -> 11.3 ms (424 -> 505
        // GFLOP/s), 169,343 x 128 through 64 9.1 -> 5.2, 89,250 x 64 through 64 1.9-2.0 ->
        // 1.4-1.6; AVX2 (-mno-avx512f) 24.2 -> 21.9, 14.5 -> 10.2; 2,708 x 1,433 through 16
        // unchanged (0.48 ms).
        bool prefetch_next = r + 2 * kRows <= r1;
        idx_t m0 = 0;
        for (; m0 + kCols <= M; m0 += kCols)
            nn_tile<kRows, true, 2, INDEXED>(tile_x(r), K, W, M, m0, Y + r * M, std::exchange(prefetch_next, false),
                                            tile_index(r));
        last_columns(M - m0, [&](auto nv, auto full) {
            nn_tile<kRows, full(), nv(), INDEXED>(tile_x(r), K, W, M, m0, Y + r * M, prefetch_next, tile_index(r));
        });
        apply_epilogue_rows(epi, Y, M, r, r + kRows);
    }
    for (; r < r1; ++r) {
        for (idx_t m0 = 0; m0 < M; m0 += kCols)
            nn_tile<1, false, 2, INDEXED>(tile_x(r), K, W, M, m0, Y + r * M, false, tile_index(r));
        apply_epilogue_rows(epi, Y, M, r, r + 1);
    }
#else
    for (idx_t r = r0; r < r1; ++r) {
        float* y = Y + r * M;
        const float* x = X + (INDEXED ? index[r] : r) * K;
        for (idx_t m = 0; m < M; ++m) y[m] = 0.f;
        for (idx_t k = 0; k < K; ++k) {
            const float* w = W + k * M;
#pragma omp simd
            for (idx_t m = 0; m < M; ++m) y[m] += x[k] * w[m];
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
        const idx_t height = skinny_detail::wide_tiles(M) ? skinny_detail::kWideRows : skinny_detail::kRows;
        const idx_t tiles = (rows + height - 1) / height;
        const idx_t per = (tiles + T - 1) / T;
        const idx_t r0 = std::min(rows, t * per * height);
        const idx_t r1 = std::min(rows, r0 + per * height);
        if (r1 > r0) skinny_detail::nn_rows(X, K, W, M, Y, r0, r1, epi);
    }
    return kOk;
}

// dW[K, M] = X[rows, K]^T G[rows, M] for a narrow G (M <= kSkinnyMaxWidth): each thread sums its
// rows into a private K x M partial (thread 0 straight into dW), then the partials are added once.
// WIDTH: M when the caller knows it at compile time, so that G of kNarrowTnMax or fewer columns
// takes tn_narrow_rows (0: any M, the tiles).
template <int WIDTH = 0>
inline int tall_skinny_tn(idx_t rows, idx_t K, idx_t M, const float* X, const float* G, float* dW) {
    static_assert(WIDTH >= 0 && WIDTH <= kSkinnyMaxWidth, "tall_skinny_tn: WIDTH is a narrow G's width");
    if (WIDTH > 0 && M != WIDTH) return kErrArgument;
    if (rows < 0 || K < 0 || M < 0 || M > kSkinnyMaxWidth) return kErrArgument;
    if (omp_in_parallel()) return kErrInParallel;
    const idx_t T = omp_get_max_threads();
    std::vector<float> partial(size_t((T - 1) * K * M));  // zero: a thread that never starts adds nothing
#pragma omp parallel num_threads(int(T))
    {
        const idx_t t = omp_get_thread_num(), n = omp_get_num_threads();
        const idx_t per = (rows + n - 1) / n, r0 = std::min(rows, t * per), r1 = std::min(rows, r0 + per);
        float* out = t == 0 ? dW : partial.data() + (t - 1) * K * M;
        if (t == 0) std::fill(dW, dW + K * M, 0.f);
        // Spans of rows are summed apart and then added to the partial: a float sum of one
        // 16-row chunk after another into one array would round 2-3x more than BLAS does.  The
        // chunks fetch ahead across the spans' ends (without: 89,250 x 500 through 64, Intel
        // Xeon, AVX-512, 2 threads: 23.4 ms, against 18.5 with no spans at all).
        constexpr idx_t kSpan = 1024;
        std::vector<float> span(size_t(r1 - r0 > kSpan ? K * M : 0));
        auto add_rows = [&](float* sum, idx_t s0, idx_t s1) {   // sum += X[s0..s1)^T G[s0..s1)
            if constexpr (WIDTH > 0 && WIDTH <= skinny_detail::kNarrowTnMax)
                skinny_detail::tn_narrow_rows<WIDTH>(X, K, G, sum, s0, s1);
            else
                skinny_detail::tn_rows(X, K, G, M, sum, s0, s1, nullptr, 0, r1);
        };
        for (idx_t s0 = r0; s0 < r1; s0 += kSpan) {
            const idx_t s1 = std::min(r1, s0 + kSpan);
            if (span.empty()) {
                add_rows(out, s0, s1);
                continue;
            }
            std::fill(span.begin(), span.end(), 0.f);
            add_rows(span.data(), s0, s1);
            for (idx_t i = 0; i < K * M; ++i) out[i] += span[size_t(i)];
        }
    }
    if (T > 1) {
#pragma omp parallel for schedule(static)
        for (idx_t i = 0; i < K * M; ++i) {
            float acc = dW[i];
            for (idx_t t = 1; t < T; ++t) acc += partial[size_t((t - 1) * K * M + i)];
            dW[i] = acc;
        }
    }
    return kOk;
}

}  // namespace mg
