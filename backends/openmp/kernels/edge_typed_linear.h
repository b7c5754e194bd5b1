// Typed linear of node rows read at one end of every edge (IR: edge_typed_linear):
//
//   Y[e] = X[end(e)] · W[type(e)]      X [N, K] node rows, W [T, K, M], Y [E, M]
//
// without the E x K copy of X a gather would write first.  The products are made per row of the
// layout built once at load time (runtime/edge_rows.h: one row per distinct (node, type) pair,
// compact, or per edge), type-major and node-ordered inside a type, so a tile of rows is one
// product with one W_t and its X reads go forward through memory (outputs of 64 or fewer read
// the tile's node rows where they lie, gemm.h: tile_nn_gathered; wider ones gather them into a
// buffer for BLAS); each product is copied to its row's edges, and the edges' gradients are
// summed into rows first.
//
// Parallel over tiles of rows (forward, input gradient) or over (type, column block) of dW
// (weight gradient): every output element has one writer, and every sum runs in a fixed order, so
// the results do not depend on the thread count.  BLAS runs single-threaded inside the OpenMP
// region (gemm.h: one thread pool).  Functions returning int report mg::Status.
#pragma once

#include <algorithm>
#include <climits>
#include <vector>

#include "common.h"
#include "edge_rows.h"
#include "gemm.h"

namespace mg {

namespace et_detail {
inline constexpr idx_t kTileRows = 128;      // rows per forward / input-gradient sgemm
inline constexpr idx_t kGradChunk = 1024;    // rows per weight-gradient sgemm (accumulated)
inline constexpr idx_t kGradCols = 64;       // dW columns (of K) per weight-gradient work unit
inline constexpr idx_t kSparseCols = 256;    // dW columns per work unit when x's rows are CSR
}  // namespace et_detail

// The layout (runtime/edge_rows.h) and the scratch its kernels reuse between calls.
struct EdgeTypedRows {
    EdgeRowLayout layout;
    std::vector<float> scratch, row_grad, row_dx;  // grown on first use, kept between calls
    const int32_t* sorted_checked = nullptr;       // CSR column indices last checked for order...
    bool indices_sorted = false;                   // ...and whether each row's were increasing

    // end[E]: the node at the read end of each edge; type[E] in [0, T).  kErrArgument if an index
    // is out of range.
    // far[E] (optional): the node at each edge's other end (gathered_row_sums).
    int build(const idx_t* end, const idx_t* type, idx_t E, idx_t T, idx_t N, bool compact, idx_t blocks = 1,
              const idx_t* far = nullptr) {
        return layout.build(end, type, E, T, N, compact, et_detail::kTileRows, blocks, far) ? kOk : kErrArgument;
    }
    idx_t rows() const { return layout.rows; }    // product rows
    int64_t bytes() const {
        return layout.bytes() + int64_t((scratch.size() + row_grad.size() + row_dx.size()) * sizeof(float));
    }
};

namespace et_detail {
inline void grow(std::vector<float>& v, idx_t n) {
    if (idx_t(v.size()) < n) v.resize(size_t(n));
}

inline bool fits_blas(idx_t a, idx_t b) { return a <= INT_MAX && b <= INT_MAX; }

// Product row r where its readers find it: once at its stored row (stored: the layout's
// store_rows) or copied to each of its edges.
MG_INLINE void put_row(const EdgeRowLayout& L, idx_t r, const float* y, idx_t M, bool stored, float* Y) {
    if (stored) {
        copy_row(y, Y + L.row_store[size_t(r)] * M, M);
        return;
    }
    for (idx_t j = L.edge_ptr[size_t(r)]; j < L.edge_ptr[size_t(r + 1)]; ++j) copy_row(y, Y + L.edges[size_t(j)] * M, M);
}

// row_grad[r] = sum of G[e] over the edges of row r (a permuted copy in the edge layout).  The
// gradient kernels take `rows_summed`: true when the previous call, of the other gradient of the
// same product, left these sums of the same G in row_grad (the emitter says when).
inline void collapse(EdgeTypedRows& p, const float* G, idx_t M) {
    const EdgeRowLayout& L = p.layout;
    grow(p.row_grad, L.rows * M);
    segment_row_sums(L.edge_ptr.data(), L.edges.data(), L.rows, G, M, p.row_grad.data());
}
}  // namespace et_detail

// The row sums both gradients start from (collapse), of an edge gradient that is never stored:
// G[e] = w[e] * Gnode[far(e)], node rows read at the edges' far end (layout built with `far`)
// scaled per edge (R-GCN's gather(g) / c, HGT's head_mul(gather(g), alpha)).  Gnode [N, B*M] is
// [N*B, M] one block wide; w_div = B when one weight scales all B blocks of an edge, 1 when each
// block has its own (w [E, B]).  The gradient kernels then run with rows_summed.
inline int gathered_row_sums(EdgeTypedRows& p, const float* Gnode, const float* w, idx_t w_div, idx_t M) {
    const EdgeRowLayout& L = p.layout;
    if (L.edge_far.size() != L.edges.size() || w_div < 1) return kErrArgument;
    et_detail::grow(p.row_grad, L.rows * M);
    weighted_segment_row_sums(L.edge_ptr.data(), L.edges.data(), L.edge_far.data(), w, w_div, L.rows, Gnode, M,
                              p.row_grad.data());
    return kOk;
}

// Y [E, M] = X[end(e)] · W[type(e)] for every edge; stored: Y holds one row per distinct (node,
// type) pair instead, edge e's at L.edge_row[e] (layout built with store_rows).
inline int edge_typed_linear_fwd(EdgeTypedRows& p, const float* X, idx_t K, const float* W, idx_t M, float* Y,
                                 bool stored = false) {
    if (!et_detail::fits_blas(K, M)) return kErrTooLarge;
    const EdgeRowLayout& L = p.layout;
    if (stored && idx_t(L.row_store.size()) != L.rows) return kErrArgument;
    const idx_t tile_floats = et_detail::kTileRows * (K + M);
    et_detail::grow(p.scratch, idx_t(omp_get_max_threads()) * tile_floats);
#pragma omp parallel
    {
        float* xbuf = p.scratch.data() + idx_t(omp_get_thread_num()) * tile_floats;
        float* ybuf = xbuf + et_detail::kTileRows * K;
#pragma omp for schedule(dynamic, 1)
        for (idx_t i = 0; i < L.tiles(); ++i) {
            const idx_t r0 = L.tile_row[size_t(i)], n = L.tile_row[size_t(i + 1)] - r0;
            const float* Wt = W + L.tile_type[size_t(i)] * K * M;
            if (M <= kSkinnyMaxWidth) {   // the nodes' rows read where they lie
                tile_nn_gathered(n, M, K, X, L.row_node.data() + r0, Wt, ybuf);
            } else {
                for (idx_t k = 0; k < n; ++k) copy_row(X + L.row_node[size_t(r0 + k)] * K, xbuf + k * K, K);
                tile_nn(n, M, K, xbuf, Wt, ybuf);
            }
            for (idx_t k = 0; k < n; ++k) et_detail::put_row(L, r0 + k, ybuf + k * M, M, stored, Y);
        }
    }
    return kOk;
}

// dW [T, K, M]: dW[t] = sum over the edges e of type t of X[end(e)]ᵀ G[e]; zero for a type
// without edges.  One work unit per (type, block of kGradCols of K): its rows' sums in row order.
inline int edge_typed_linear_weight_bwd(EdgeTypedRows& p, const float* X, idx_t K, const float* G, idx_t M,
                                         float* dW, bool rows_summed = false) {
    using et_detail::kGradChunk;
    using et_detail::kGradCols;
    if (!et_detail::fits_blas(K, M)) return kErrTooLarge;
    const EdgeRowLayout& L = p.layout;
    if (!rows_summed) et_detail::collapse(p, G, M);
    const idx_t blocks = (K + kGradCols - 1) / kGradCols, chunk_floats = kGradChunk * kGradCols;
    et_detail::grow(p.scratch, idx_t(omp_get_max_threads()) * chunk_floats);
    const float* grad = p.row_grad.data();
#pragma omp parallel
    {
        float* xbuf = p.scratch.data() + idx_t(omp_get_thread_num()) * chunk_floats;
#pragma omp for schedule(dynamic, 1)
        for (idx_t u = 0; u < L.types * blocks; ++u) {
            const idx_t t = u / blocks, k0 = (u % blocks) * kGradCols, kw = std::min(kGradCols, K - k0);
            float* out = dW + t * K * M + k0 * M;
            if (L.type_ptr[size_t(t)] == L.type_ptr[size_t(t + 1)]) {
                std::fill(out, out + kw * M, 0.f);
                continue;
            }
            for (idx_t c0 = L.type_ptr[size_t(t)]; c0 < L.type_ptr[size_t(t + 1)]; c0 += kGradChunk) {
                const idx_t n = std::min(kGradChunk, L.type_ptr[size_t(t + 1)] - c0);
                const bool accumulate = c0 != L.type_ptr[size_t(t)];
                if (M <= kSkinnyMaxWidth) {   // the nodes' rows read where they lie
                    tile_tn_gathered(n, kw, M, X + k0, K, L.row_node.data() + c0, grad + c0 * M, accumulate, out);
                    continue;
                }
                for (idx_t k = 0; k < n; ++k) copy_row(X + L.row_node[size_t(c0 + k)] * K + k0, xbuf + k * kw, kw);
                tile_tn(n, kw, M, xbuf, grad + c0 * M, accumulate, out);
            }
        }
    }
    return kOk;
}

// dX [N, K]: dX[n] = sum over the edges e with end(e) = n of G[e] W[type(e)]ᵀ; zero for a node
// no edge reads.  Per row G_r W_tᵀ (one sgemm per tile), then each node sums its rows.
inline int edge_typed_linear_input_bwd(EdgeTypedRows& p, const float* G, idx_t M, const float* W, idx_t K,
                                        float* dX, bool rows_summed = false) {
    if (!et_detail::fits_blas(K, M)) return kErrTooLarge;
    const EdgeRowLayout& L = p.layout;
    if (!rows_summed) et_detail::collapse(p, G, M);
    et_detail::grow(p.row_dx, L.rows * K);
    const float* grad = p.row_grad.data();
    float* dx_rows = p.row_dx.data();
#pragma omp parallel
    {
        std::vector<float> wt(size_t(K * M));  // W_tᵀ (tile_nt)
        const float* wt_of = nullptr;
#pragma omp for schedule(dynamic, 1)
        for (idx_t i = 0; i < L.tiles(); ++i) {
            const idx_t r0 = L.tile_row[size_t(i)], n = L.tile_row[size_t(i + 1)] - r0;
            tile_nt(n, K, M, grad + r0 * M, W + L.tile_type[size_t(i)] * K * M, dx_rows + r0 * K, wt.data(), &wt_of);
        }
    }
    segment_row_sums(L.node_ptr.data(), L.node_rows.data(), L.node_count, dx_rows, K, dX);
    return kOk;
}

// ---- x's rows as CSR (the sparse feature path: R-GAT's x_src * W[etype] on sparse features) ---
// indptr [N + 1], indices, values: the rows of x; a row's product is the sum of its non-zeros'
// rows of W_t, M wide, without BLAS (acm_heco: 3,864 columns, 3% of them non-zero).

// Y [E, M] = X[end(e)] · W[type(e)].  A row's sum stays in registers for widths 8/16/32/64
// (with_width): summed in memory, each non-zero waited on the store of the previous one.
inline int edge_typed_linear_csr_fwd(EdgeTypedRows& p, const int64_t* indptr, const int32_t* indices,
                                     const float* values, idx_t K, const float* W, idx_t M, float* Y,
                                     bool stored = false) {
    const EdgeRowLayout& L = p.layout;
    if (stored && idx_t(L.row_store.size()) != L.rows) return kErrArgument;
    with_width(M, [&](auto width) {
        constexpr int MC = decltype(width)::value;
        const idx_t m = MC ? MC : M;
#pragma omp parallel
        {
            RowBuffer<MC> row(m);      // one per thread
            float* y = row.data;
#pragma omp for schedule(dynamic, 1)
            for (idx_t i = 0; i < L.tiles(); ++i) {
                const float* Wt = W + L.tile_type[size_t(i)] * K * m;
                for (idx_t r = L.tile_row[size_t(i)]; r < L.tile_row[size_t(i + 1)]; ++r) {
#pragma omp simd
                    for (idx_t c = 0; c < m; ++c) y[c] = 0.f;
                    const idx_t node = L.row_node[size_t(r)];
                    for (int64_t j = indptr[node]; j < indptr[node + 1]; ++j) {
                        const float v = values[j], *w = Wt + idx_t(indices[j]) * m;
#pragma omp simd
                        for (idx_t c = 0; c < m; ++c) y[c] += v * w[c];
                    }
                    et_detail::put_row(L, r, y, m, stored, Y);
                }
            }
        }
    });
    return kOk;
}

// Whether every row's column indices increase (scipy's canonical CSR; the loaders sort them),
// checked once per index array.
inline bool csr_rows_sorted(EdgeTypedRows& p, const int64_t* indptr, const int32_t* indices) {
    if (p.sorted_checked != indices) {
        bool sorted = true;
        for (idx_t v = 0; v < p.layout.node_count && sorted; ++v)
            for (int64_t j = indptr[v] + 1; j < indptr[v + 1]; ++j)
                if (indices[j] <= indices[j - 1]) { sorted = false; break; }
        p.sorted_checked = indices;
        p.indices_sorted = sorted;
    }
    return p.indices_sorted;
}

// dW [T, K, M] = sum over the edges e of type t of X[end(e)]ᵀ G[e].  One work unit per (type, block
// of kSparseCols columns): the non-zeros of its rows that fall in the block, in row order; with
// sorted column indices a binary search finds each row's part of the block, else every non-zero
// of the row is looked at.
inline int edge_typed_linear_csr_weight_bwd(EdgeTypedRows& p, const int64_t* indptr, const int32_t* indices,
                                            const float* values, idx_t K, const float* G, idx_t M, float* dW,
                                            bool rows_summed = false) {
    using et_detail::kSparseCols;
    const EdgeRowLayout& L = p.layout;
    if (!rows_summed) et_detail::collapse(p, G, M);
    const bool sorted = csr_rows_sorted(p, indptr, indices);
    const float* grad = p.row_grad.data();
    const idx_t blocks = (K + kSparseCols - 1) / kSparseCols;
#pragma omp parallel for schedule(dynamic, 1)
    for (idx_t u = 0; u < L.types * blocks; ++u) {
        const idx_t t = u / blocks, c0 = (u % blocks) * kSparseCols, c1 = std::min(K, c0 + kSparseCols);
        float* out = dW + t * K * M;
        std::fill(out + c0 * M, out + c1 * M, 0.f);
        for (idx_t r = L.type_ptr[size_t(t)]; r < L.type_ptr[size_t(t + 1)]; ++r) {
            const idx_t node = L.row_node[size_t(r)];
            const float* g = grad + r * M;
            int64_t j = indptr[node];
            const int64_t end = indptr[node + 1];
            if (sorted) j = std::lower_bound(indices + j, indices + end, int32_t(c0)) - indices;
            for (; j < end; ++j) {
                const idx_t c = indices[j];
                if (c >= c1) {
                    if (sorted) break;
                    continue;
                }
                if (c < c0) continue;
                float* o = out + c * M;
                const float v = values[j];
#pragma omp simd
                for (idx_t k = 0; k < M; ++k) o[k] += v * g[k];
            }
        }
    }
    return kOk;
}

}  // namespace mg
