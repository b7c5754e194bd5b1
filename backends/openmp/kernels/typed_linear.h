// Typed linear (Hector): Y[r] = X[r] · W[type[r]] without replicating W per row.
//
//   X [R, K], W [T, K, M] (T weight matrices, row-major), Y [R, M], G = dL/dY [R, M].
//
// Two schedules of the same operator:
//   * segment-MM: rows are presorted by type, type t owning rows [type_ptr[t], type_ptr[t+1]);
//     one sgemm per type straight on the row block.
//   * gather/scatter GEMM: rows in any order; `perm` lists the rows grouped by type
//     (perm[type_ptr[t] .. type_ptr[t+1]) are the rows of type t, see group_rows_by_type).  The
//     rows of a type are gathered into a contiguous buffer, multiplied with one sgemm, and the
//     result is scattered back.  An optional input row list x_rows makes the gather read
//     X[x_rows[r]] for output row r (Hector's gather list: e.g. the source node of edge r), so
//     per-edge copies of node features are never materialised.  A tile whose rows are
//     consecutive (node types laid out one after another) is multiplied where it lies, with
//     neither the gather nor the scatter.
// Backward: dW[t] = X_tᵀ G_t and dX_t = G_t W[t]ᵀ.  A type without rows gets dW[t] = 0.
//
// Featureless input (X = identity, an "embedding lookup"): Y[r] = table[type[r]*P + src_row[r]]
// where table = W viewed as [T*P, M].  Its gradient scatter-adds G rows into table rows; rows are
// grouped by target once (embedding_grad_plan) so every table row has one writer: no atomics
// and never an N x N matrix.
//
// Segment-MM calls BLAS outside OpenMP regions (gemm.h refuses otherwise); the gather/scatter
// kernels call it single-threaded on tiles inside one.  Functions returning int report mg::Status.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

#include "common.h"
#include "gemm.h"

namespace mg {

namespace tl_detail {
inline constexpr idx_t kParallelMin = 1 << 14;

inline void zero(float* p, idx_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (idx_t i = 0; i < n; ++i) p[i] = 0.0f;
}

}  // namespace tl_detail

// Stable counting sort of rows by type: perm[R] (rows grouped by type, increasing row inside a
// type) and type_ptr[T+1].  Done once at load time.  kErrArgument if a type is outside [0, T).
inline int group_rows_by_type(const idx_t* type, idx_t R, idx_t T, idx_t* perm, idx_t* type_ptr) {
    if (R < 0 || T < 0) return kErrArgument;
    for (idx_t t = 0; t <= T; ++t) type_ptr[t] = 0;
    for (idx_t r = 0; r < R; ++r) {
        if (type[r] < 0 || type[r] >= T) return kErrArgument;
        ++type_ptr[type[r] + 1];
    }
    for (idx_t t = 0; t < T; ++t) type_ptr[t + 1] += type_ptr[t];
    std::vector<idx_t> next(type_ptr, type_ptr + T);
    for (idx_t r = 0; r < R; ++r) perm[next[type[r]]++] = r;
    return kOk;
}

// ---- segment-MM (rows presorted by type) -------------------------------------------------

inline int typed_linear_segment_fwd(const float* X, const float* W, float* Y, const idx_t* type_ptr, idx_t T,
                                    idx_t K, idx_t M) {
    for (idx_t t = 0; t < T; ++t) {
        const idx_t r0 = type_ptr[t], n = type_ptr[t + 1] - r0;
        if (n == 0) continue;
        const int st = linear_forward(n, K, M, X + r0 * K, W + t * K * M, Y + r0 * M);
        if (st != kOk) return st;
    }
    return kOk;
}

// dX [R, K] and/or dW [T, K, M]; either may be nullptr.
inline int typed_linear_segment_bwd(const float* X, const float* W, const float* G, const idx_t* type_ptr,
                                    idx_t T, idx_t K, idx_t M, float* dX, float* dW) {
    for (idx_t t = 0; t < T; ++t) {
        const idx_t r0 = type_ptr[t], n = type_ptr[t + 1] - r0;
        if (dW) {
            if (n == 0) {
                tl_detail::zero(dW + t * K * M, K * M);
            } else {
                const int st = linear_weight_grad(n, K, M, X + r0 * K, G + r0 * M, dW + t * K * M);
                if (st != kOk) return st;
            }
        }
        if (dX && n > 0) {
            const int st = linear_input_grad(n, K, M, G + r0 * M, W + t * K * M, dX + r0 * K);
            if (st != kOk) return st;
        }
    }
    return kOk;
}

// ---- gather/scatter GEMM (rows in any order) ---------------------------------------------
// Parallel over tiles of one type's rows, inside one OpenMP region, each tile gathered into a
// thread's buffer and multiplied by one single-threaded sgemm (gemm.h: one thread pool; a BLAS
// call per type outside the region would run on one core).  dW is summed by fixed chunks of each
// type's rows, each chunk's partial product in its own slot, then the slots in chunk order: every
// result is the same at any thread count.

namespace tl_detail {
inline constexpr idx_t kTileRows = 128;         // rows per forward / input-gradient sgemm
inline constexpr idx_t kMaxChunksPerType = 16;  // dW partials per type (bounds the scratch)
inline constexpr idx_t kBlockFloats = 1 << 15;  // a weight-gradient sgemm's gathered rows (128 KiB)

// One unit of work: `n` consecutive rows of one type, starting at perm position r0.
struct Span {
    idx_t type, r0, n;
};

// The spans of every type, at most `rows` rows each (types without rows have none).
inline std::vector<Span> spans(const idx_t* type_ptr, idx_t T, idx_t rows) {
    std::vector<Span> out;
    for (idx_t t = 0; t < T; ++t)
        for (idx_t r0 = type_ptr[t]; r0 < type_ptr[t + 1]; r0 += rows)
            out.push_back({t, r0, std::min(rows, type_ptr[t + 1] - r0)});
    return out;
}

// Rows per weight-gradient sgemm: a block of kBlockFloats floats of X or G.
inline idx_t grad_block_rows(idx_t K, idx_t M) { return std::max<idx_t>(16, kBlockFloats / std::max(K, M)); }

// The weight-gradient chunks: type t's rows in at most kMaxChunksPerType chunks of whole blocks.
inline std::vector<Span> grad_chunks(const idx_t* type_ptr, idx_t T, idx_t K, idx_t M) {
    const idx_t block = grad_block_rows(K, M);
    std::vector<Span> out;
    for (idx_t t = 0; t < T; ++t) {
        const idx_t n = type_ptr[t + 1] - type_ptr[t];
        const idx_t blocks = (n + block - 1) / block;
        const idx_t per_chunk = std::max<idx_t>(1, (blocks + kMaxChunksPerType - 1) / kMaxChunksPerType) * block;
        for (idx_t r0 = type_ptr[t]; r0 < type_ptr[t + 1]; r0 += per_chunk)
            out.push_back({t, r0, std::min(per_chunk, type_ptr[t + 1] - r0)});
    }
    return out;
}

// The first of the n rows at perm[r0..r0+n) when they are consecutive and read in place (no
// x_rows), else -1.  Node types laid out one after another (the loaders' order) make every tile
// such a block: it is multiplied where it lies instead of being gathered into a buffer and
// scattered back.  HGT on acm_heco (11,246 nodes by type, 64 x 64 typed linears), 2 threads,
// AVX-512, two interleaved runs of 30 epochs each: the typed linears 11.5-11.9 -> 9.6-10.5 ms
// an epoch, the epoch 20.5-21.0 -> 18.4-19.4 ms.
inline idx_t consecutive_rows(const idx_t* perm, idx_t r0, idx_t n, const idx_t* x_rows) {
    if (x_rows || n == 0) return -1;
    const idx_t first = perm[r0];
    for (idx_t k = 1; k < n; ++k)
        if (perm[r0 + k] != first + k) return -1;
    return first;
}

inline bool fits_blas(idx_t K, idx_t M) { return K <= INT_MAX && M <= INT_MAX && K >= 0 && M >= 0; }

// `workspace`, or `n` floats of `own` (not zeroed: every float is written before it is read).
inline float* scratch(float* workspace, std::unique_ptr<float[]>& own, idx_t n) {
    if (workspace) return workspace;
    own.reset(new float[size_t(n)]);
    return own.get();
}
}  // namespace tl_detail

// Floats of scratch the gather/scatter kernels need at the current OpenMP thread count: a tile
// (or a weight-gradient block) of X and of G per thread, and the dW partials of every chunk but
// each type's first.
inline idx_t typed_linear_workspace_floats(const idx_t* type_ptr, idx_t T, idx_t K, idx_t M) {
    const idx_t threads = omp_get_max_threads();
    const idx_t rows = std::max(tl_detail::kTileRows, tl_detail::grad_block_rows(K, M));
    idx_t partials = 0;
    for (const auto& c : tl_detail::grad_chunks(type_ptr, T, K, M))
        partials += c.r0 != type_ptr[c.type];
    return threads * rows * (K + M) + partials * K * M;
}

// Y[r] = X[x_rows ? x_rows[r] : r] · W[type of r], then the epilogue on each row as it is written.
// workspace: typed_linear_workspace_floats() floats, or nullptr to allocate per call.
inline int typed_linear_gather_fwd(const float* X, const float* W, float* Y, const idx_t* perm,
                                   const idx_t* type_ptr, idx_t T, idx_t K, idx_t M, float* workspace = nullptr,
                                   const idx_t* x_rows = nullptr, const Epilogue& epi = Epilogue{}) {
    using tl_detail::kTileRows;
    if (!tl_detail::fits_blas(K, M)) return kErrTooLarge;
    if (omp_in_parallel()) return kErrInParallel;
    if (K == 0 || M == 0) {                         // nothing for BLAS to multiply
        std::fill(Y, Y + type_ptr[T] * M, 0.f);
        apply_epilogue_rows(epi, Y, M, 0, type_ptr[T]);
        return kOk;
    }
    // the forward needs one tile per thread; a caller's workspace is laid out for the backward
    const idx_t stride = workspace ? std::max(kTileRows, tl_detail::grad_block_rows(K, M)) * (K + M)
                                   : kTileRows * (K + M);
    std::unique_ptr<float[]> own;
    workspace = tl_detail::scratch(workspace, own, idx_t(omp_get_max_threads()) * stride);
    const std::vector<tl_detail::Span> tiles = tl_detail::spans(type_ptr, T, kTileRows);
#pragma omp parallel if (type_ptr[T] * (K + M) > tl_detail::kParallelMin)
    {
        float* xbuf = workspace + idx_t(omp_get_thread_num()) * stride;
        float* ybuf = xbuf + kTileRows * K;
#pragma omp for schedule(dynamic, 1)
        for (size_t i = 0; i < tiles.size(); ++i) {
            const tl_detail::Span& s = tiles[i];
            const idx_t first = tl_detail::consecutive_rows(perm, s.r0, s.n, x_rows);
            if (first >= 0) {
                tile_nn(s.n, M, K, X + first * K, W + s.type * K * M, Y + first * M);
                apply_epilogue_rows(epi, Y, M, first, first + s.n);
                continue;
            }
            for (idx_t k = 0; k < s.n; ++k) {
                const idx_t row = perm[s.r0 + k];
                const float* x = X + (x_rows ? x_rows[row] : row) * K;
                copy_row(x, xbuf + k * K, K);
            }
            tile_nn(s.n, M, K, xbuf, W + s.type * K * M, ybuf);
            for (idx_t k = 0; k < s.n; ++k) {
                const idx_t row = perm[s.r0 + k];
                copy_row(ybuf + k * M, Y + row * M, M);
                if (has_epilogue(epi)) apply_epilogue_row(epi, Y, M, row);
            }
        }
    }
    return kOk;
}

// dX [R, K] and/or dW [T, K, M]; either may be nullptr.  With x_rows, dX[r] is the gradient of
// the gathered row X[x_rows[r]] (shape [R, K]); the caller sums it into X's rows with the
// matching scatter (e.g. gather_src_bwd), which needs no atomics.  dX_epi runs on each row of
// dX as it is written (a residual: the other operand of an add of input gradients).
inline int typed_linear_gather_bwd(const float* X, const float* W, const float* G, const idx_t* perm,
                                   const idx_t* type_ptr, idx_t T, idx_t K, idx_t M, float* dX, float* dW,
                                   float* workspace = nullptr, const idx_t* x_rows = nullptr,
                                   const Epilogue& dX_epi = Epilogue{}) {
    using tl_detail::kTileRows;
    if (!tl_detail::fits_blas(K, M)) return kErrTooLarge;
    if (omp_in_parallel()) return kErrInParallel;
    if (K == 0 || M == 0) {                         // nothing for BLAS to multiply
        if (dX) std::fill(dX, dX + type_ptr[T] * K, 0.f);
        if (dX) apply_epilogue_rows(dX_epi, dX, K, 0, type_ptr[T]);
        if (dW) std::fill(dW, dW + T * K * M, 0.f);
        return kOk;
    }
    std::unique_ptr<float[]> own;
    workspace = tl_detail::scratch(workspace, own, typed_linear_workspace_floats(type_ptr, T, K, M));
    const idx_t block = tl_detail::grad_block_rows(K, M);
    const idx_t stride = std::max(kTileRows, block) * (K + M);
    const std::vector<tl_detail::Span> tiles = dX ? tl_detail::spans(type_ptr, T, kTileRows)
                                                  : std::vector<tl_detail::Span>{};
    const std::vector<tl_detail::Span> chunks = dW ? tl_detail::grad_chunks(type_ptr, T, K, M)
                                                   : std::vector<tl_detail::Span>{};
    // Each chunk's dW slot: its type's dW for the type's first chunk, else a partial.
    std::vector<float*> slot(chunks.size());
    float* partials = workspace + idx_t(omp_get_max_threads()) * stride;
    for (size_t c = 0; c < chunks.size(); ++c) {
        const bool first = chunks[c].r0 == type_ptr[chunks[c].type];
        slot[c] = first ? dW + chunks[c].type * K * M : partials;
        partials += first ? 0 : K * M;
    }
#pragma omp parallel if (type_ptr[T] * (K + M) > tl_detail::kParallelMin)
    {
        float* xbuf = workspace + idx_t(omp_get_thread_num()) * stride;
        float* gbuf = xbuf + std::max(kTileRows, block) * K;
        std::vector<float> wt(size_t(dX ? K * M : 0));  // W_tᵀ (tile_nt)
        const float* wt_of = nullptr;
        // dX: per tile G_t W_tᵀ, scattered to the tile's rows (one writer per row)
#pragma omp for schedule(dynamic, 1) nowait
        for (size_t i = 0; i < tiles.size(); ++i) {
            const tl_detail::Span& s = tiles[i];
            const idx_t first = tl_detail::consecutive_rows(perm, s.r0, s.n, nullptr);
            if (first >= 0) {
                tile_nt(s.n, K, M, G + first * M, W + s.type * K * M, dX + first * K, wt.data(), &wt_of);
                apply_epilogue_rows(dX_epi, dX, K, first, first + s.n);
                continue;
            }
            for (idx_t k = 0; k < s.n; ++k) {
                const float* g = G + perm[s.r0 + k] * M;
                copy_row(g, gbuf + k * M, M);
            }
            tile_nt(s.n, K, M, gbuf, W + s.type * K * M, xbuf, wt.data(), &wt_of);
            for (idx_t k = 0; k < s.n; ++k) {
                const idx_t row = perm[s.r0 + k];
                copy_row(xbuf + k * K, dX + row * K, K);
                if (has_epilogue(dX_epi)) apply_epilogue_row(dX_epi, dX, K, row);
            }
        }
        // dW: per chunk X_cᵀ G_c into its slot, block by block
#pragma omp for schedule(dynamic, 1)
        for (size_t c = 0; c < chunks.size(); ++c) {
            const tl_detail::Span& s = chunks[c];
            for (idx_t b0 = 0; b0 < s.n; b0 += block) {
                const idx_t n = std::min(block, s.n - b0);
                const idx_t first = tl_detail::consecutive_rows(perm, s.r0 + b0, n, x_rows);
                if (first >= 0) {
                    tile_tn(n, K, M, X + first * K, G + first * M, b0 != 0, slot[c]);
                    continue;
                }
                for (idx_t k = 0; k < n; ++k) {
                    const idx_t row = perm[s.r0 + b0 + k];
                    const float* x = X + (x_rows ? x_rows[row] : row) * K;
                    const float* g = G + row * M;
                    copy_row(x, xbuf + k * K, K);
                    copy_row(g, gbuf + k * M, M);
                }
                tile_tn(n, K, M, xbuf, gbuf, b0 != 0, slot[c]);
            }
        }
        // dW[t] += its other chunks' partials, in chunk order; zero for a type without rows
#pragma omp for schedule(static)
        for (idx_t t = 0; t < (dW ? T : 0); ++t) {
            float* out = dW + t * K * M;
            if (type_ptr[t] == type_ptr[t + 1]) std::fill(out, out + K * M, 0.f);
            for (size_t c = 0; c < chunks.size(); ++c) {
                if (chunks[c].type != t || slot[c] == out) continue;
                const float* part = slot[c];
#pragma omp simd
                for (idx_t i = 0; i < K * M; ++i) out[i] += part[i];
            }
        }
    }
    return kOk;
}

// ---- featureless: embedding lookup -------------------------------------------------------

// Y[r] = table[type[r] * rows_per_type + src_row[r]], table [T * rows_per_type, M].
// type == nullptr means type 0 for every row; src_row == nullptr means row 0 within the type
// (the typed_param case W[type]).
inline void embedding_lookup_fwd(const float* table, const idx_t* type, const idx_t* src_row, idx_t R,
                                 idx_t rows_per_type, idx_t M, float* Y) {
#pragma omp parallel for schedule(static) if (R * M > tl_detail::kParallelMin)
    for (idx_t r = 0; r < R; ++r) {
        const idx_t key = (type ? type[r] : 0) * rows_per_type + (src_row ? src_row[r] : 0);
        const float* s = table + key * M;
        float* d = Y + r * M;
#pragma omp simd
        for (idx_t j = 0; j < M; ++j) d[j] = s[j];
    }
}

// Groups the R lookups by the table row they read, once at load time.
//   order[R]: lookup rows sorted by table row (stable); key_ptr[U+1]: segments of order;
//   keys[U]: the distinct table rows, increasing.  Arrays are sized for the worst case U = R
//   (key_ptr R+1).  Returns U, or -1 if a type or src_row is out of range.
inline idx_t embedding_grad_plan(const idx_t* type, const idx_t* src_row, idx_t R, idx_t num_types,
                                 idx_t rows_per_type, idx_t* order, idx_t* key_ptr, idx_t* keys) {
    std::vector<idx_t> key(static_cast<size_t>(R));
    for (idx_t r = 0; r < R; ++r) {
        const idx_t t = type ? type[r] : 0, s = src_row ? src_row[r] : 0;
        if (t < 0 || t >= num_types || s < 0 || s >= rows_per_type) return -1;
        key[r] = t * rows_per_type + s;
    }
    std::iota(order, order + R, idx_t{0});
    std::stable_sort(order, order + R, [&](idx_t a, idx_t b) { return key[a] < key[b]; });
    idx_t u = 0;
    for (idx_t i = 0; i < R; ++i) {
        if (i == 0 || key[order[i]] != key[order[i - 1]]) {
            keys[u] = key[order[i]];
            key_ptr[u] = i;
            ++u;
        }
    }
    key_ptr[u] = R;
    return u;
}

// dtable[keys[k]] = sum of G[order[i]] for i in segment k; no other row is written.
inline void embedding_lookup_bwd_rows(const float* G, const idx_t* order, const idx_t* key_ptr, const idx_t* keys,
                                      idx_t num_keys, idx_t M, float* dtable) {
#pragma omp parallel for schedule(dynamic, 64) if (key_ptr[num_keys] * M > tl_detail::kParallelMin)
    for (idx_t k = 0; k < num_keys; ++k) {
        float* d = dtable + keys[k] * M;
        const float* first = G + order[key_ptr[k]] * M;
#pragma omp simd
        for (idx_t j = 0; j < M; ++j) d[j] = first[j];
        for (idx_t i = key_ptr[k] + 1; i < key_ptr[k + 1]; ++i) {
            const float* s = G + order[i] * M;
#pragma omp simd
            for (idx_t j = 0; j < M; ++j) d[j] += s[j];
        }
    }
}

// dtable [table_rows, M] = 0 except dtable[keys[k]] = sum of G[order[i]] for i in segment k.
inline void embedding_lookup_bwd(const float* G, const idx_t* order, const idx_t* key_ptr, const idx_t* keys,
                                 idx_t num_keys, idx_t table_rows, idx_t M, float* dtable) {
    tl_detail::zero(dtable, table_rows * M);
    embedding_lookup_bwd_rows(G, order, key_ptr, keys, num_keys, M, dtable);
}

// ---- featureless with bases: rows of W_t = sum_b A[t, b] V[b], W_t never formed -----------------
// R-GCN's basis decomposition on featureless input (passes/basis_lookup.py). V is [B, P, M], A is
// [T, B]; lookup r reads row row(r) of W_type(r). The lookups come grouped by embedding_grad_plan
// keyed row * T + type: one segment per distinct (row, type) pair, so each combined row is
// computed once however many edges read it, and the segments in row order, row_start[i] the first
// segment of the i-th distinct row. Walking rows in order makes the B reads V[b][row] B sequential
// streams the prefetcher follows; in type order they were scattered over all of V (aifb: 16 MB,
// beyond L2) and every read waited on L3.

namespace tl_detail {
// gsum = the sum of the G rows of one plan segment.
template <int MC>
inline void segment_sum(const float* G, const idx_t* order, idx_t begin, idx_t end, idx_t M, float* gsum) {
    const idx_t m = MC ? MC : M;
    const float* first = G + order[begin] * m;
#pragma omp simd
    for (idx_t j = 0; j < m; ++j) gsum[j] = first[j];
    for (idx_t i = begin + 1; i < end; ++i) {
        const float* g = G + order[i] * m;
#pragma omp simd
        for (idx_t j = 0; j < m; ++j) gsum[j] += g[j];
    }
}

// Walking the pairs in row order reads (or writes) B rows of V or dV, [B][P][M], for each row:
// B streams, more than the hardware prefetcher follows (the forward waited on memory for most of
// its time on mutag: 6.0 ms a call, 2.6 with this).  So the B rows of the row whose first pair
// comes kAhead pairs later are asked for now (`write`: rows about to be written).
inline constexpr idx_t kAhead = 8;
template <bool write = false>
MG_INLINE void prefetch_row(const float* base, idx_t row, idx_t B, idx_t P, idx_t m) {
    for (idx_t b = 0; b < B; ++b) __builtin_prefetch(base + (b * P + row) * m, write ? 1 : 0);
}
MG_INLINE void prefetch_rows_ahead(const float* base, const idx_t* keys, idx_t k, idx_t end, idx_t T, idx_t B,
                                   idx_t P, idx_t m) {
    if (base == nullptr || k + kAhead >= end) return;
    const idx_t ahead = keys[k + kAhead] / T;
    if (ahead != keys[k + kAhead - 1] / T) prefetch_row(base, ahead, B, P, m);    // once per row
}

// fn(s, t) for each (row s, type t) pair of the plan's distinct rows [first, last), in order, with
// gsum holding the sum of the pair's G rows (the lookups that read it); `rows`, when given, the
// [B][P][m] table whose rows the pairs read, fetched ahead.
template <int MC, class Fn>
inline void for_each_pair(const float* G, const idx_t* order, const idx_t* key_ptr, const idx_t* keys,
                          const idx_t* row_start, idx_t first, idx_t last, idx_t T, idx_t m, float* gsum, Fn fn,
                          const float* rows = nullptr, idx_t B = 0, idx_t P = 0) {
    const idx_t end = row_start[last];
    for (idx_t k = row_start[first]; k < end; ++k) {
        prefetch_rows_ahead(rows, keys, k, end, T, B, P, m);
        segment_sum<MC>(G, order, key_ptr[k], key_ptr[k + 1], m, gsum);
        fn(keys[k] / T, keys[k] % T);
    }
}

// The coefficients' gradient is summed per chunk of rows, then over the chunks in order: as many
// chunks whatever the thread count (the same sums on any), few enough to keep the partials small.
inline idx_t coef_chunks(idx_t num_rows) { return std::min<idx_t>(64, (num_rows + 255) / 256); }
}  // namespace tl_detail

// Y[r] = sum_b A[type(r), b] V[b][row(r)].
inline void basis_lookup_fwd(const float* A, const float* V, const idx_t* order, const idx_t* key_ptr,
                             const idx_t* keys, idx_t num_keys, idx_t T, idx_t B, idx_t P, idx_t M, float* Y) {
    with_width(M, [&](auto width) {
        constexpr int MC = decltype(width)::value;
        const idx_t m = MC ? MC : M;
#pragma omp parallel for schedule(dynamic, 64) if (num_keys * B * m > tl_detail::kParallelMin)
        for (idx_t k = 0; k < num_keys; ++k) {
            const idx_t s = keys[k] / T, t = keys[k] % T;
            tl_detail::prefetch_rows_ahead(V, keys, k, num_keys, T, B, P, m);
            float* first = Y + order[key_ptr[k]] * m;
            float acc[MC ? MC : 1];
            float* sum = MC ? acc : first;         // a constant width sums in registers
#pragma omp simd
            for (idx_t j = 0; j < m; ++j) sum[j] = 0.f;
            for (idx_t b = 0; b < B; ++b) {
                const float a = A[t * B + b];
                const float* v = V + (b * P + s) * m;
#pragma omp simd
                for (idx_t j = 0; j < m; ++j) sum[j] += a * v[j];
            }
            for (idx_t i = key_ptr[k]; i < key_ptr[k + 1]; ++i) {
                float* d = Y + order[i] * m;
                if (d == sum) continue;
#pragma omp simd
                for (idx_t j = 0; j < m; ++j) d[j] = sum[j];
            }
        }
    });
}

// dA[t, b] = sum over the lookups r of type t of <V[b][row(r)], G[r]>.
// Within a chunk of rows each (t, b) sums the elementwise products V[b][s] * gsum in an m-wide
// vector, reduced to one number at the chunk's end: a horizontal sum per pair and basis (B of
// them per pair) had been most of the kernel's time (mutag: 16 of an epoch's 41 ms on one
// thread).  The vectors of the types a chunk met are zeroed and reduced, no others; where T * B
// vectors would not stay in a core's L2 the dot products are taken one by one as before.
namespace tl_detail {
inline constexpr idx_t kCoefVectorBytes = idx_t(1) << 20;
}

inline void basis_lookup_coef_bwd(const float* V, const float* G, const idx_t* order, const idx_t* key_ptr,
                                  const idx_t* keys, const idx_t* row_start, idx_t num_rows, idx_t T, idx_t B,
                                  idx_t P, idx_t M, float* dA) {
    const idx_t chunks = tl_detail::coef_chunks(num_rows), TB = T * B;
    if (chunks == 0) {
        tl_detail::zero(dA, TB);
        return;
    }
    std::vector<float> partial(static_cast<size_t>(chunks * TB), 0.f);
    const bool vectors = TB * M * idx_t(sizeof(float)) <= tl_detail::kCoefVectorBytes;
    with_width(M, [&](auto width) {
        constexpr int MC = decltype(width)::value;
        const idx_t m = MC ? MC : M;
#pragma omp parallel if (key_ptr[row_start[num_rows]] * B * m > tl_detail::kParallelMin)
        {
            RowBuffer<MC> row(m);
            float* gsum = row.data;
            std::vector<float> sums(vectors ? static_cast<size_t>(TB * m) : 0);   // per (t, b): m partial sums
            std::vector<char> met(vectors ? static_cast<size_t>(T) : 0, 0);
            std::vector<idx_t> types_met;
#pragma omp for schedule(dynamic, 1)
            for (idx_t c = 0; c < chunks; ++c) {
                float* acc = partial.data() + c * TB;
                const idx_t first = num_rows * c / chunks, last = num_rows * (c + 1) / chunks;
                if (!vectors) {
                    tl_detail::for_each_pair<MC>(G, order, key_ptr, keys, row_start, first, last, T, m, gsum,
                                                 [&](idx_t s, idx_t t) {
                        for (idx_t b = 0; b < B; ++b) {
                            const float* v = V + (b * P + s) * m;
                            float dot = 0.f;
#pragma omp simd reduction(+ : dot)
                            for (idx_t j = 0; j < m; ++j) dot += v[j] * gsum[j];
                            acc[t * B + b] += dot;
                        }
                    }, V, B, P);
                    continue;
                }
                tl_detail::for_each_pair<MC>(G, order, key_ptr, keys, row_start, first, last, T, m, gsum,
                                             [&](idx_t s, idx_t t) {
                    float* sum = sums.data() + t * B * m;
                    if (!met[static_cast<size_t>(t)]) {
                        met[static_cast<size_t>(t)] = 1;
                        types_met.push_back(t);
#pragma omp simd
                        for (idx_t j = 0; j < B * m; ++j) sum[j] = 0.f;
                    }
                    for (idx_t b = 0; b < B; ++b) {
                        const float* v = V + (b * P + s) * m;
                        float* d = sum + b * m;
#pragma omp simd
                        for (idx_t j = 0; j < m; ++j) d[j] += v[j] * gsum[j];
                    }
                }, V, B, P);
                for (idx_t t : types_met) {
                    for (idx_t b = 0; b < B; ++b) {
                        const float* d = sums.data() + (t * B + b) * m;
                        float total = 0.f;
                        for (idx_t j = 0; j < m; ++j) total += d[j];     // in order: the same sum on any ISA
                        acc[t * B + b] = total;
                    }
                    met[static_cast<size_t>(t)] = 0;
                }
                types_met.clear();
            }
#pragma omp for schedule(static)
            for (idx_t e = 0; e < TB; ++e) {
                float total = 0.f;
                for (idx_t c = 0; c < chunks; ++c) total += partial[static_cast<size_t>(c * TB + e)];
                dA[e] = total;
            }
        }
    });
}

// dV[b][s] for one row s and every basis b from the row's pairs: the G sums of its `pairs` pairs
// one after the other in `gsums`, their types in `types`.  Each of the B outputs is written once
// (the first pair's term, then the others' added in order), past the caches with `stream`
// (bases_streamed).  Shared with the MPI backend, which makes dV's rows from reduced pair sums.
namespace tl_detail {
template <int MC>
MG_INLINE void write_bases_row(const float* A, idx_t B, const float* gsums, const idx_t* types, idx_t pairs,
                               idx_t m, float* dV, idx_t P, idx_t s, bool stream) {
    for (idx_t b = 0; b < B; ++b) {
        float* d = dV + (b * P + s) * m;
#if MG_HAVE_SIMD
        if constexpr (MC > 0 && MC % simd::kLanes == 0) {
            for (idx_t j = 0; j < m; j += simd::kLanes) {
                simd::vf acc = simd::mul(simd::set1(A[types[0] * B + b]), simd::load(gsums + j));
                for (idx_t k = 1; k < pairs; ++k)
                    acc = simd::fmadd(simd::set1(A[types[k] * B + b]), simd::load(gsums + k * m + j), acc);
                if (stream) simd::stream(d + j, acc);
                else simd::store(d + j, acc);
            }
            continue;
        }
#endif
        const float a0 = A[types[0] * B + b];
#pragma omp simd
        for (idx_t j = 0; j < m; ++j) d[j] = a0 * gsums[j];
        for (idx_t k = 1; k < pairs; ++k) {
            const float a = A[types[k] * B + b];
            const float* g = gsums + k * m;
#pragma omp simd
            for (idx_t j = 0; j < m; ++j) d[j] += a * g[j];
        }
    }
}
}  // namespace tl_detail

// Whether write_bases_row writes a dV of `floats` floats at dV past the caches: with whole
// 16-float vectors, 64-byte aligned, and large enough not to stay in them (mutag's 45 MB dV:
// 6.0 -> 4.7 ms a call; aifb's 15.9 MB took as long either way).  The writing threads then call
// _mm_sfence before the team ends.
template <int MC>
inline bool bases_streamed(const float* dV, idx_t floats) {
    return MC > 0 && simd::kLanes == 16 && MC % 16 == 0 && reinterpret_cast<std::uintptr_t>(dV) % 64 == 0 &&
           floats * idx_t(sizeof(float)) >= (idx_t(16) << 20);
}

// dV[b][s] = sum over the lookups r of row s of A[type(r), b] G[r]; rows no lookup reads are zero.
// One thread owns a row's B outputs (write_bases_row); the same iteration zeroes the rows between
// the previous read row and this one (rows come in increasing order), so dV (B * P * M floats:
// 45 MB on mutag) is written once rather than zeroed first.
inline void basis_lookup_bases_bwd(const float* A, const float* G, const idx_t* order, const idx_t* key_ptr,
                                   const idx_t* keys, const idx_t* row_start, idx_t num_rows, idx_t T,
                                   idx_t B, idx_t P, idx_t M, float* dV) {
    if (num_rows == 0) {
        tl_detail::zero(dV, B * P * M);
        return;
    }
    const auto zero_rows = [&](idx_t from, idx_t to) {      // rows [from, to) of every basis
        for (idx_t b = 0; b < B && from < to; ++b) {
            float* d = dV + (b * P + from) * M;
#pragma omp simd
            for (idx_t j = 0; j < (to - from) * M; ++j) d[j] = 0.f;
        }
    };
    with_width(M, [&](auto width) {
        constexpr int MC = decltype(width)::value;
        const idx_t m = MC ? MC : M;
        const bool stream = bases_streamed<MC>(dV, B * P * m);
#pragma omp parallel if (key_ptr[row_start[num_rows]] * B * m > tl_detail::kParallelMin)
        {
            std::vector<float> gsums;       // the row's pairs' G sums, one after the other
            std::vector<idx_t> types;
#pragma omp for schedule(dynamic, 64) nowait
            for (idx_t i = 0; i < num_rows; ++i) {
                const idx_t s = keys[row_start[i]] / T;
                zero_rows(i == 0 ? 0 : keys[row_start[i - 1]] / T + 1, s);
                if (i == num_rows - 1) zero_rows(s + 1, P);
                if (!stream && i + 3 < num_rows) tl_detail::prefetch_row<true>(dV, keys[row_start[i + 3]] / T, B, P, m);
                const idx_t pairs = row_start[i + 1] - row_start[i];
                gsums.resize(static_cast<size_t>(pairs * m));
                types.clear();
                for (idx_t k = row_start[i]; k < row_start[i + 1]; ++k) {
                    tl_detail::segment_sum<MC>(G, order, key_ptr[k], key_ptr[k + 1], m,
                                               gsums.data() + (k - row_start[i]) * m);
                    types.push_back(keys[k] % T);
                }
                tl_detail::write_bases_row<MC>(A, B, gsums.data(), types.data(), pairs, m, dV, P, s, stream);
            }
#if MG_HAVE_SIMD
            if (stream) _mm_sfence();
#endif
        }
    });
}

}  // namespace mg
