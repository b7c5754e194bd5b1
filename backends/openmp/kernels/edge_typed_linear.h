// Typed linear of node rows read at one end of every edge (IR: edge_typed_linear):
//
//   Y[e] = X[end(e)] · W[type(e)]      X [N, K] node rows, W [T, K, M], Y [E, M]
//
// without the E x K copy of X a gather would write first.  The products are made per "row" of
// an EdgeTypedRows plan, built once at load time in one of two layouts (Hector's materialisation
// choices):
//   * compact: one row per distinct (node, type) pair at that end; its product is copied to each
//     of the pair's edges, and the gradients of those edges are summed into it first;
//   * edge: one row per edge.
// Rows are type-major (type t owns rows [type_ptr[t], type_ptr[t+1])), and node-ordered inside a
// type, so a tile of rows is one sgemm with one W_t and its X reads go forward through memory.
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
#include "gemm.h"

namespace mg {

namespace et_detail {
inline constexpr idx_t kTileRows = 128;      // rows per forward / input-gradient sgemm
inline constexpr idx_t kGradChunk = 1024;    // rows per weight-gradient sgemm (accumulated)
inline constexpr idx_t kGradCols = 64;       // dW columns (of K) per weight-gradient work unit

// Stable counting sort of `n` items by key[i] in [0, buckets): order[n], ptr[buckets + 1].
inline void counting_sort(const idx_t* key, const idx_t* items, idx_t n, idx_t buckets, idx_t* order, idx_t* ptr) {
    std::fill(ptr, ptr + buckets + 1, idx_t(0));
    for (idx_t i = 0; i < n; ++i) ++ptr[key[items ? items[i] : i] + 1];
    for (idx_t b = 0; b < buckets; ++b) ptr[b + 1] += ptr[b];
    std::vector<idx_t> next(ptr, ptr + buckets);
    for (idx_t i = 0; i < n; ++i) {
        const idx_t item = items ? items[i] : i;
        order[next[size_t(key[item])]++] = item;
    }
}
}  // namespace et_detail

struct EdgeTypedRows {
    bool compact = false;
    idx_t types = 0, rows = 0, edge_count = 0, node_count = 0;
    std::vector<idx_t> type_ptr;               // [T + 1]: rows of each type
    std::vector<idx_t> row_node;               // [R]: the node row r reads
    std::vector<idx_t> edge_ptr, edges;        // [R + 1], [E]: the edges of each row
    std::vector<idx_t> node_ptr, node_rows;    // [N + 1], [R]: the rows of each node (input gradient)
    std::vector<idx_t> tile_row, tile_type;    // [tiles + 1], [tiles]: tiles never cross a type
    std::vector<float> scratch, row_grad, row_dx;  // grown on first use, kept between calls

    // end[E]: the node at the read end of each edge; type[E] in [0, T).  kErrArgument if an index
    // is out of range.
    int build(const idx_t* end, const idx_t* type, idx_t E, idx_t T, idx_t N, bool compact_rows) {
        for (idx_t e = 0; e < E; ++e)
            if (end[e] < 0 || end[e] >= N || type[e] < 0 || type[e] >= T) return kErrArgument;
        compact = compact_rows;
        types = T, edge_count = E, node_count = N;
        // Edges by (type, node): sorted by node, then stably by type.
        std::vector<idx_t> by_node(static_cast<size_t>(E)), node_start(static_cast<size_t>(N + 1));
        edges.resize(size_t(E));
        std::vector<idx_t> edge_type_ptr(static_cast<size_t>(T + 1));
        et_detail::counting_sort(end, nullptr, E, N, by_node.data(), node_start.data());
        et_detail::counting_sort(type, by_node.data(), E, T, edges.data(), edge_type_ptr.data());
        // Rows: one per edge, or one per run of edges with the same (type, node).
        edge_ptr.clear();
        row_node.clear();
        type_ptr.assign(size_t(T + 1), 0);
        for (idx_t t = 0; t < T; ++t) {
            for (idx_t i = edge_type_ptr[size_t(t)]; i < edge_type_ptr[size_t(t + 1)]; ++i) {
                const idx_t node = end[edges[size_t(i)]];
                if (!compact || i == edge_type_ptr[size_t(t)] || node != end[edges[size_t(i - 1)]]) {
                    edge_ptr.push_back(i);
                    row_node.push_back(node);
                }
            }
            type_ptr[size_t(t + 1)] = idx_t(row_node.size());
        }
        rows = idx_t(row_node.size());
        edge_ptr.push_back(E);
        node_ptr.resize(size_t(N + 1));
        node_rows.resize(size_t(rows));
        et_detail::counting_sort(row_node.data(), nullptr, rows, N, node_rows.data(), node_ptr.data());
        tile_row.clear();      // tile starts, then the end of the last: tiles of a type are contiguous
        tile_type.clear();
        for (idx_t t = 0; t < T; ++t)
            for (idx_t r = type_ptr[size_t(t)]; r < type_ptr[size_t(t + 1)]; r += et_detail::kTileRows) {
                tile_row.push_back(r);
                tile_type.push_back(t);
            }
        tile_row.push_back(rows);
        return kOk;
    }
    idx_t tiles() const { return idx_t(tile_type.size()); }
    int64_t bytes() const {
        const size_t ints = type_ptr.size() + row_node.size() + edge_ptr.size() + edges.size() + node_ptr.size() +
                            node_rows.size() + tile_row.size() + tile_type.size();
        return int64_t(ints * sizeof(idx_t) + (scratch.size() + row_grad.size() + row_dx.size()) * sizeof(float));
    }
};

namespace et_detail {
inline void grow(std::vector<float>& v, idx_t n) {
    if (idx_t(v.size()) < n) v.resize(size_t(n));
}

inline bool fits_blas(idx_t a, idx_t b) { return a <= INT_MAX && b <= INT_MAX; }

// row_grad[r] = sum of G[e] over the edges of row r (a permuted copy in the edge layout).
inline void collapse(EdgeTypedRows& p, const float* G, idx_t M) {
    grow(p.row_grad, p.rows * M);
    float* out = p.row_grad.data();
#pragma omp parallel for schedule(dynamic, 256)
    for (idx_t r = 0; r < p.rows; ++r) {
        float* o = out + r * M;
        const idx_t* e = p.edges.data();
        const float* first = G + e[p.edge_ptr[size_t(r)]] * M;
#pragma omp simd
        for (idx_t j = 0; j < M; ++j) o[j] = first[j];
        for (idx_t i = p.edge_ptr[size_t(r)] + 1; i < p.edge_ptr[size_t(r + 1)]; ++i) {
            const float* g = G + e[i] * M;
#pragma omp simd
            for (idx_t j = 0; j < M; ++j) o[j] += g[j];
        }
    }
}
}  // namespace et_detail

// Y [E, M] = X[end(e)] · W[type(e)] for every edge.
inline int edge_typed_linear_fwd(EdgeTypedRows& p, const float* X, idx_t K, const float* W, idx_t M, float* Y) {
    if (!et_detail::fits_blas(K, M)) return kErrTooLarge;
    const idx_t tile_floats = et_detail::kTileRows * (K + M);
    et_detail::grow(p.scratch, idx_t(omp_get_max_threads()) * tile_floats);
#pragma omp parallel
    {
        float* xbuf = p.scratch.data() + idx_t(omp_get_thread_num()) * tile_floats;
        float* ybuf = xbuf + et_detail::kTileRows * K;
#pragma omp for schedule(dynamic, 1)
        for (idx_t i = 0; i < p.tiles(); ++i) {
            const idx_t r0 = p.tile_row[size_t(i)], n = p.tile_row[size_t(i + 1)] - r0;
            for (idx_t k = 0; k < n; ++k) {
                const float* s = X + p.row_node[size_t(r0 + k)] * K;
                std::copy(s, s + K, xbuf + k * K);
            }
            sgemm_block(false, false, n, M, K, xbuf, K, W + p.tile_type[size_t(i)] * K * M, M, 0.f, ybuf, M);
            for (idx_t k = 0; k < n; ++k) {
                const float* y = ybuf + k * M;
                for (idx_t j = p.edge_ptr[size_t(r0 + k)]; j < p.edge_ptr[size_t(r0 + k + 1)]; ++j)
                    std::copy(y, y + M, Y + p.edges[size_t(j)] * M);
            }
        }
    }
    return kOk;
}

// dW [T, K, M]: dW[t] = sum over the edges e of type t of X[end(e)]ᵀ G[e]; zero for a type
// without edges.  One work unit per (type, block of kGradCols of K): its rows' sums in row order.
inline int edge_typed_linear_weight_bwd(EdgeTypedRows& p, const float* X, idx_t K, const float* G, idx_t M,
                                         float* dW) {
    using et_detail::kGradChunk;
    using et_detail::kGradCols;
    if (!et_detail::fits_blas(K, M)) return kErrTooLarge;
    et_detail::collapse(p, G, M);
    const idx_t blocks = (K + kGradCols - 1) / kGradCols, chunk_floats = kGradChunk * kGradCols;
    et_detail::grow(p.scratch, idx_t(omp_get_max_threads()) * chunk_floats);
    const float* grad = p.row_grad.data();
#pragma omp parallel
    {
        float* xbuf = p.scratch.data() + idx_t(omp_get_thread_num()) * chunk_floats;
#pragma omp for schedule(dynamic, 1)
        for (idx_t u = 0; u < p.types * blocks; ++u) {
            const idx_t t = u / blocks, k0 = (u % blocks) * kGradCols, kw = std::min(kGradCols, K - k0);
            float* out = dW + t * K * M + k0 * M;
            if (p.type_ptr[size_t(t)] == p.type_ptr[size_t(t + 1)]) {
                std::fill(out, out + kw * M, 0.f);
                continue;
            }
            for (idx_t c0 = p.type_ptr[size_t(t)]; c0 < p.type_ptr[size_t(t + 1)]; c0 += kGradChunk) {
                const idx_t n = std::min(kGradChunk, p.type_ptr[size_t(t + 1)] - c0);
                for (idx_t k = 0; k < n; ++k) {
                    const float* s = X + p.row_node[size_t(c0 + k)] * K + k0;
                    std::copy(s, s + kw, xbuf + k * kw);
                }
                sgemm_block(true, false, kw, M, n, xbuf, kw, grad + c0 * M, M,
                            c0 == p.type_ptr[size_t(t)] ? 0.f : 1.f, out, M);
            }
        }
    }
    return kOk;
}

// dX [N, K]: dX[n] = sum over the edges e with end(e) = n of G[e] W[type(e)]ᵀ; zero for a node
// no edge reads.  Per row G_r W_tᵀ (one sgemm per tile), then each node sums its rows.
inline int edge_typed_linear_input_bwd(EdgeTypedRows& p, const float* G, idx_t M, const float* W, idx_t K,
                                        float* dX) {
    if (!et_detail::fits_blas(K, M)) return kErrTooLarge;
    et_detail::collapse(p, G, M);
    et_detail::grow(p.row_dx, p.rows * K);
    const float* grad = p.row_grad.data();
    float* dx_rows = p.row_dx.data();
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, 1)
        for (idx_t i = 0; i < p.tiles(); ++i) {
            const idx_t r0 = p.tile_row[size_t(i)], n = p.tile_row[size_t(i + 1)] - r0;
            sgemm_block(false, true, n, K, M, grad + r0 * M, M, W + p.tile_type[size_t(i)] * K * M, M, 0.f,
                        dx_rows + r0 * K, K);
        }
#pragma omp for schedule(dynamic, 256)
        for (idx_t v = 0; v < p.node_count; ++v) {
            float* d = dX + v * K;
            std::fill(d, d + K, 0.f);
            for (idx_t i = p.node_ptr[size_t(v)]; i < p.node_ptr[size_t(v + 1)]; ++i) {
                const float* s = dx_rows + p.node_rows[size_t(i)] * K;
#pragma omp simd
                for (idx_t k = 0; k < K; ++k) d[k] += s[k];
            }
        }
    }
    return kOk;
}

}  // namespace mg
