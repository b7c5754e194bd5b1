// Edge gather/scatter kernels over the destination-sorted CSR, with their backward.
//
// Graph layout (fixed across the kernel library): edges are stored sorted by destination.
//   indptr[N+1], col[E]      CSR by destination; col[e] is the source of the edge at position e.
//   t_indptr[N+1], t_col[E], t_eid[E]
//                            transpose CSR by source; t_col[k] is the destination and t_eid[k]
//                            the CSR position of the k-th outgoing edge.
// Edge tensors are [E, F] indexed by CSR position; node tensors are [N, F].
// Every loop writes each output row from exactly one thread, so no atomics are needed.
// Backward kernels overwrite their outputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common.h"  // mg::Reduce

namespace mg {

namespace edge_detail {
inline constexpr int64_t kParallelMin = 1 << 14;
}

// out[e, :] = x[col[e], :]   (message from the source)
inline void gather_src(const float* x, const int64_t* col, int64_t num_edges, int64_t F, float* out) {
#pragma omp parallel for schedule(static) if (num_edges * F > edge_detail::kParallelMin)
    for (int64_t e = 0; e < num_edges; ++e) {
        const float* s = x + col[e] * F;
        float* d = out + e * F;
#pragma omp simd
        for (int64_t f = 0; f < F; ++f) d[f] = s[f];
    }
}

// out[e, :] = x[v, :] for every edge e in v's CSR segment   (the destination's row)
inline void gather_dst(const float* x, const int64_t* indptr, int64_t num_nodes, int64_t F, float* out) {
#pragma omp parallel for schedule(dynamic, 64) if (indptr[num_nodes] * F > edge_detail::kParallelMin)
    for (int64_t v = 0; v < num_nodes; ++v) {
        const float* s = x + v * F;
        for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
            float* d = out + e * F;
#pragma omp simd
            for (int64_t f = 0; f < F; ++f) d[f] = s[f];
        }
    }
}

namespace edge_detail {

// Reduces the edge rows m[eid(k)] for k in [begin, end) into one node row.  `argmax` (only for
// Max) receives the CSR edge position of the maximum per feature, -1 for an empty segment whose
// output is 0.  Ties keep the first edge in segment order.
template <Reduce R, class EdgeOf>
inline void reduce_segment(const float* m, int64_t begin, int64_t end, int64_t F, EdgeOf eid, float* out,
                           int64_t* argmax) {
    if constexpr (R == Reduce::Max) {
        if (begin == end) {
            for (int64_t f = 0; f < F; ++f) { out[f] = 0.0f; argmax[f] = -1; }
            return;
        }
        const int64_t e0 = eid(begin);
        for (int64_t f = 0; f < F; ++f) { out[f] = m[e0 * F + f]; argmax[f] = e0; }
        for (int64_t k = begin + 1; k < end; ++k) {
            const int64_t e = eid(k);
            const float* r = m + e * F;
#pragma omp simd
            for (int64_t f = 0; f < F; ++f) {
                const bool bigger = r[f] > out[f];
                out[f] = bigger ? r[f] : out[f];
                argmax[f] = bigger ? e : argmax[f];
            }
        }
    } else if (F == 1) {            // one number per edge (degrees, weights): no vector loop per edge
        float sum = 0.0f;
        for (int64_t k = begin; k < end; ++k) sum += m[eid(k)];
        out[0] = R == Reduce::Mean && end > begin ? sum * (1.0f / static_cast<float>(end - begin)) : sum;
    } else {
#pragma omp simd
        for (int64_t f = 0; f < F; ++f) out[f] = 0.0f;
        for (int64_t k = begin; k < end; ++k) {
            const float* r = m + eid(k) * F;
#pragma omp simd
            for (int64_t f = 0; f < F; ++f) out[f] += r[f];
        }
        if constexpr (R == Reduce::Mean) {
            if (end > begin) {
                const float inv = 1.0f / static_cast<float>(end - begin);
#pragma omp simd
                for (int64_t f = 0; f < F; ++f) out[f] *= inv;
            }
        }
    }
}

}  // namespace edge_detail

// out[v, :] = reduce over v's incoming edges e of m[e, :]  (segment reduce over the CSR).
// argmax [N, F] is required for Max and ignored otherwise.
template <Reduce R>
inline void scatter_dst(const float* m, const int64_t* indptr, int64_t num_nodes, int64_t F, float* out,
                        int64_t* argmax = nullptr) {
#pragma omp parallel for schedule(dynamic, 64) if (indptr[num_nodes] * F > edge_detail::kParallelMin)
    for (int64_t v = 0; v < num_nodes; ++v) {
        edge_detail::reduce_segment<R>(m, indptr[v], indptr[v + 1], F, [](int64_t k) { return k; }, out + v * F,
                                       argmax ? argmax + v * F : nullptr);
    }
}

// out[u, :] = reduce over u's outgoing edges of m[e, :], through the transpose CSR.  A mean
// divides by counts[u] when given (a node's out-degree when the CSR holds only part of its
// out-edges: a distributed rank's share, whose owner adds the ranks' shares).
template <Reduce R>
inline void scatter_src(const float* m, const int64_t* t_indptr, const int64_t* t_eid, int64_t num_nodes,
                        int64_t F, float* out, int64_t* argmax = nullptr, const float* counts = nullptr) {
    constexpr Reduce kSegment = R == Reduce::Mean ? Reduce::Sum : R;
#pragma omp parallel for schedule(dynamic, 64) if (t_indptr[num_nodes] * F > edge_detail::kParallelMin)
    for (int64_t u = 0; u < num_nodes; ++u) {
        float* o = out + u * F;
        if (R == Reduce::Mean && counts == nullptr) {
            edge_detail::reduce_segment<R>(m, t_indptr[u], t_indptr[u + 1], F, [t_eid](int64_t k) { return t_eid[k]; },
                                           o, nullptr);
            continue;
        }
        edge_detail::reduce_segment<kSegment>(m, t_indptr[u], t_indptr[u + 1], F,
                                              [t_eid](int64_t k) { return t_eid[k]; }, o,
                                              argmax ? argmax + u * F : nullptr);
        if (R == Reduce::Mean && counts[u] > 0.0f) {
            const float inv = 1.0f / counts[u];
#pragma omp simd
            for (int64_t f = 0; f < F; ++f) o[f] *= inv;
        }
    }
}

// Gradient of scatter_dst: gm[e, :] from g[v, :] of e's destination v.
template <Reduce R>
inline void scatter_dst_bwd(const float* g, const int64_t* indptr, int64_t num_nodes, int64_t F,
                            const int64_t* argmax, float* gm) {
#pragma omp parallel for schedule(dynamic, 64) if (indptr[num_nodes] * F > edge_detail::kParallelMin)
    for (int64_t v = 0; v < num_nodes; ++v) {
        const float* gv = g + v * F;
        const int64_t deg = indptr[v + 1] - indptr[v];
        const float w = (R == Reduce::Mean && deg > 0) ? 1.0f / static_cast<float>(deg) : 1.0f;
        for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
            float* d = gm + e * F;
            if constexpr (R == Reduce::Max) {
                const int64_t* a = argmax + v * F;
#pragma omp simd
                for (int64_t f = 0; f < F; ++f) d[f] = a[f] == e ? gv[f] : 0.0f;
            } else {
#pragma omp simd
                for (int64_t f = 0; f < F; ++f) d[f] = w * gv[f];
            }
        }
    }
}

// Gradient of scatter_src: gm[e, :] from g[u, :] of e's source u = col[e].  Parallel over
// edges: each edge has exactly one source, so every gm row has one writer.
template <Reduce R>
inline void scatter_src_bwd(const float* g, const int64_t* col, const int64_t* t_indptr, int64_t num_edges,
                            int64_t F, const int64_t* argmax, float* gm) {
#pragma omp parallel for schedule(static) if (num_edges * F > edge_detail::kParallelMin)
    for (int64_t e = 0; e < num_edges; ++e) {
        const int64_t u = col[e];
        const float* gu = g + u * F;
        float* d = gm + e * F;
        if constexpr (R == Reduce::Max) {
            const int64_t* a = argmax + u * F;
#pragma omp simd
            for (int64_t f = 0; f < F; ++f) d[f] = a[f] == e ? gu[f] : 0.0f;
        } else {
            const int64_t deg = t_indptr[u + 1] - t_indptr[u];  // >= 1: e itself leaves u
            const float w = R == Reduce::Mean ? 1.0f / static_cast<float>(deg) : 1.0f;
#pragma omp simd
            for (int64_t f = 0; f < F; ++f) d[f] = w * gu[f];
        }
    }
}

// Gradient of gather_src: gx[u, :] = sum of g[e, :] over u's outgoing edges (a scatter-sum to
// the source through the transpose CSR).
inline void gather_src_bwd(const float* g, const int64_t* t_indptr, const int64_t* t_eid, int64_t num_nodes,
                           int64_t F, float* gx) {
    scatter_src<Reduce::Sum>(g, t_indptr, t_eid, num_nodes, F, gx);
}

// Gradient of gather_dst: gx[v, :] = sum of g[e, :] over v's incoming edges.
inline void gather_dst_bwd(const float* g, const int64_t* indptr, int64_t num_nodes, int64_t F, float* gx) {
    scatter_dst<Reduce::Sum>(g, indptr, num_nodes, F, gx);
}

// Runtime-dispatched forms for callers that hold the reduction as data.
inline void scatter_dst(Reduce r, const float* m, const int64_t* indptr, int64_t N, int64_t F, float* out,
                        int64_t* argmax) {
    switch (r) {
        case Reduce::Sum: scatter_dst<Reduce::Sum>(m, indptr, N, F, out); break;
        case Reduce::Mean: scatter_dst<Reduce::Mean>(m, indptr, N, F, out); break;
        case Reduce::Max: scatter_dst<Reduce::Max>(m, indptr, N, F, out, argmax); break;
    }
}
inline void scatter_dst_bwd(Reduce r, const float* g, const int64_t* indptr, int64_t N, int64_t F,
                            const int64_t* argmax, float* gm) {
    switch (r) {
        case Reduce::Sum: scatter_dst_bwd<Reduce::Sum>(g, indptr, N, F, argmax, gm); break;
        case Reduce::Mean: scatter_dst_bwd<Reduce::Mean>(g, indptr, N, F, argmax, gm); break;
        case Reduce::Max: scatter_dst_bwd<Reduce::Max>(g, indptr, N, F, argmax, gm); break;
    }
}
inline void scatter_src(Reduce r, const float* m, const int64_t* t_indptr, const int64_t* t_eid, int64_t N,
                        int64_t F, float* out, int64_t* argmax, const float* counts = nullptr) {
    switch (r) {
        case Reduce::Sum: scatter_src<Reduce::Sum>(m, t_indptr, t_eid, N, F, out); break;
        case Reduce::Mean: scatter_src<Reduce::Mean>(m, t_indptr, t_eid, N, F, out, nullptr, counts); break;
        case Reduce::Max: scatter_src<Reduce::Max>(m, t_indptr, t_eid, N, F, out, argmax); break;
    }
}
inline void scatter_src_bwd(Reduce r, const float* g, const int64_t* col, const int64_t* t_indptr, int64_t E,
                            int64_t F, const int64_t* argmax, float* gm) {
    switch (r) {
        case Reduce::Sum: scatter_src_bwd<Reduce::Sum>(g, col, t_indptr, E, F, argmax, gm); break;
        case Reduce::Mean: scatter_src_bwd<Reduce::Mean>(g, col, t_indptr, E, F, argmax, gm); break;
        case Reduce::Max: scatter_src_bwd<Reduce::Max>(g, col, t_indptr, E, F, argmax, gm); break;
    }
}

// ---------------------------------------------------------------------------------------
// Edge traversals that read node rows in place (no E x F gathered copy).
// ---------------------------------------------------------------------------------------

namespace edge_detail {

inline constexpr int kTraversalLookahead = 8;  // edges ahead whose node row is prefetched (as spmm.h)

#if MG_HAVE_SIMD
// How a tile's vectors get their per-head weights.
enum class HeadLanes {
    Broadcast,  // each vector lies within one head (H == 1, or D a multiple of the vector width)
    Permuted,   // heads narrower than a vector (D < kLanes), H <= kLanes: the edge's H weights
                // are loaded as one vector and spread to the lanes by a permutation
};

// The row of x that CSR position k reads: the node at its other end, or (other == nullptr) the
// edge itself, for edge rows stored in CSR order.
MG_INLINE int64_t traversal_row(const int64_t* other, const int64_t* eid, int64_t k) {
    return other ? other[k] : eid ? eid[k] : k;
}

// What a tile of NV vectors starting at column f0 needs to know of the heads: its lane masks (the
// row's last tile may be narrower), the head of each vector (Broadcast) or of each lane
// (Permuted).  The same for every output row, so built once per call: per row, its integer
// divisions cost more than a cora-sized row's few edges.
template <int NV, HeadLanes HL>
struct TileHeads {
    int64_t f0;
    bool masked;
    simd::mask m[NV];
    int64_t head[NV];   // Broadcast: the head of vector j
    simd::vi lane_head[NV];   // Permuted: the head of every lane of vector j

    TileHeads(int64_t H, int64_t D, int64_t F, int64_t f0_) : f0(f0_), masked(f0_ + NV * simd::kLanes > F) {
        using simd::kLanes;
        for (int j = 0; j < NV; ++j) {
            m[j] = simd::lanes(masked ? F - f0 - kLanes * j : kLanes);
            head[j] = H == 1 ? 0 : std::min(H - 1, (f0 + kLanes * j) / D);
            alignas(64) std::int32_t h[kLanes];
            for (int l = 0; l < kLanes; ++l) h[l] = std::int32_t(std::min(H - 1, (f0 + kLanes * j + l) / D));
            lane_head[j] = simd::load_i32(h);
        }
    }
};

// One tile of a weighted_gather_scatter output row: o[f0, f0 + NV vectors) = sum over the CSR
// positions k in [k0, k1) of w[e(k), head] * x[traversal_row(k), f], accumulated in registers.
// Rows LA positions ahead (up to `avail`, possibly in the next output rows) are prefetched.
// MASKED: the tile is the row's narrower last one.
template <int NV, bool MASKED, HeadLanes HL>
MG_INLINE void weighted_tile(const int64_t* MG_RESTRICT other, const int64_t* eid, int64_t k0, int64_t k1,
                             int64_t avail, const float* MG_RESTRICT x, const float* MG_RESTRICT w, int64_t H,
                             int64_t F, const TileHeads<NV, HL>& t, float* MG_RESTRICT o) {
    using namespace simd;
    const int64_t f0 = t.f0;
    vf acc[NV];
    mask m[NV];            // the tile's constants in registers, not read through t per edge
    int64_t head[NV];
    vi lane_head[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
        acc[j] = zero();
        m[j] = t.m[j];
        head[j] = t.head[j];
        if constexpr (HL == HeadLanes::Permuted) lane_head[j] = t.lane_head[j];
    }
    const mask heads = lanes(H);
    constexpr int LA = kTraversalLookahead;
    for (int64_t k = k0; k < k1; ++k) {
        if (k + LA < avail) prefetch_l1<NV * kLanes * 4>(x + traversal_row(other, eid, k + LA) * F + f0);
        const float* MG_RESTRICT s = x + traversal_row(other, eid, k) * F + f0;
        const float* we = w + (eid ? eid[k] : k) * H;
        vf edge_weights = zero();
        if constexpr (HL == HeadLanes::Permuted) edge_weights = load(heads, we);
#pragma GCC unroll 16
        for (int j = 0; j < NV; ++j) {
            const vf v = MASKED ? load(m[j], s + kLanes * j) : load(s + kLanes * j);
            const vf c = HL == HeadLanes::Permuted ? permute(edge_weights, lane_head[j]) : set1(we[head[j]]);
            acc[j] = fmadd(c, v, acc[j]);
        }
    }
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
        if (MASKED) store(m[j], o + f0 + kLanes * j, acc[j]);
        else store(o + f0 + kLanes * j, acc[j]);
    }
}

// Every output row of weighted_gather_scatter in tiles of NV vectors.
template <int NV, HeadLanes HL>
void weighted_rows(bool to_dst, const float* x, const float* w, const int64_t* indptr, const int64_t* other,
                   const int64_t* eid, int64_t num_nodes, int64_t H, int64_t D, float* out) {
    constexpr int64_t T = NV * simd::kLanes;
    const int64_t F = H * D, E = indptr[num_nodes];
    const int64_t* e = to_dst ? nullptr : eid;
    std::vector<TileHeads<NV, HL>> tiles;
    for (int64_t f0 = 0; f0 < F; f0 += T) tiles.emplace_back(H, D, F, f0);
    if (tiles.size() == 1 && !tiles[0].masked) {  // the common row of one full tile: no loop over tiles
        const TileHeads<NV, HL> t = tiles[0];
#pragma omp parallel for schedule(dynamic, 64) if (E * F > kParallelMin)
        for (int64_t v = 0; v < num_nodes; ++v)
            weighted_tile<NV, false, HL>(other, e, indptr[v], indptr[v + 1], E, x, w, H, F, t, out + v * F);
        return;
    }
#pragma omp parallel for schedule(dynamic, 64) if (E * F > kParallelMin)
    for (int64_t v = 0; v < num_nodes; ++v) {
        for (const TileHeads<NV, HL>& t : tiles) {
            if (t.masked) weighted_tile<NV, true, HL>(other, e, indptr[v], indptr[v + 1], E, x, w, H, F, t, out + v * F);
            else weighted_tile<NV, false, HL>(other, e, indptr[v], indptr[v + 1], E, x, w, H, F, t, out + v * F);
        }
    }
}

// weighted_rows with tiles of up to 64 floats, no wider than the row needs (a 7-wide row is
// one vector).
template <HeadLanes HL>
void weighted_rows_by_width(bool to_dst, const float* x, const float* w, const int64_t* indptr,
                            const int64_t* other, const int64_t* eid, int64_t num_nodes, int64_t H, int64_t D,
                            float* out) {
    using simd::kLanes;
    const int64_t need = (std::min<int64_t>(H * D, 64) + kLanes - 1) / kLanes;
    if (need <= 1) weighted_rows<1, HL>(to_dst, x, w, indptr, other, eid, num_nodes, H, D, out);
    else if (need <= 2) weighted_rows<2, HL>(to_dst, x, w, indptr, other, eid, num_nodes, H, D, out);
    else if (need <= 4) weighted_rows<4, HL>(to_dst, x, w, indptr, other, eid, num_nodes, H, D, out);
    else weighted_rows<64 / kLanes, HL>(to_dst, x, w, indptr, other, eid, num_nodes, H, D, out);
}
#endif

}  // namespace edge_detail

// out[v, h*D + d] = sum over the edges e whose `to` end is v of w[e, h] * x[other end of e, h*D + d]:
// the fused scatter(sum) of a gathered node value scaled per head (GAT's attention-weighted sum,
// H = 1 for one weight per edge).  to_dst: over the in-edges of each destination (CSR by
// destination), reading x at sources; otherwise over the out-edges of each source (the transpose),
// reading x at destinations.  other == nullptr: x is an edge value instead, [E, F] in CSR order
// (HGT's per-edge messages), read at each edge's own row.  Each output row is written by one
// thread; edges in the order of their CSR, as scatter_dst / scatter_src sum them.
//
// With vectors (simd.h), the row goes in tiles of 64 floats whose accumulators stay in registers,
// with the rows of edges 8 positions ahead prefetched (as the SpMM of spmm.h), when each vector
// lies inside one head or the heads fit one vector; other shapes take the portable loop.
inline void weighted_gather_scatter(bool to_dst, const float* x, const float* w, const int64_t* indptr,
                                    const int64_t* other, const int64_t* eid, int64_t num_nodes, int64_t H,
                                    int64_t D, float* out) {
    const int64_t F = H * D;
    const int64_t E = indptr[num_nodes];
#if MG_HAVE_SIMD
    using simd::kLanes;
    using edge_detail::HeadLanes;
    if (H == 1 || D % kLanes == 0) {
        edge_detail::weighted_rows_by_width<HeadLanes::Broadcast>(to_dst, x, w, indptr, other, eid, num_nodes, H, D, out);
        return;
    }
    if (H <= kLanes) {  // heads narrower than a vector (GAT's 8 x 8 on 16 lanes)
        edge_detail::weighted_rows_by_width<HeadLanes::Permuted>(to_dst, x, w, indptr, other, eid, num_nodes, H, D, out);
        return;
    }
#endif
#pragma omp parallel for schedule(dynamic, 64) if (E * F > edge_detail::kParallelMin)
    for (int64_t v = 0; v < num_nodes; ++v) {
        float* MG_RESTRICT o = out + v * F;
        for (int64_t f = 0; f < F; ++f) o[f] = 0.f;
        for (int64_t k = indptr[v]; k < indptr[v + 1]; ++k) {
            const int64_t e = to_dst ? k : eid[k];
            const float* MG_RESTRICT s = x + (other ? other[k] : e) * F;
            const float* we = w + e * H;
            for (int64_t h = 0; h < H; ++h) {
                const float c = we[h];
#pragma omp simd
                for (int64_t d = 0; d < D; ++d) o[h * D + d] += c * s[h * D + d];
            }
        }
    }
}

namespace edge_detail {

// sum_d a[d] * b[d] over one head's D features.  WHOLE: D is whole vectors, summed in one register
// with one reduction; else the portable loop.
template <bool WHOLE>
MG_INLINE float head_dot(const float* MG_RESTRICT a, const float* MG_RESTRICT b, int64_t D) {
#if MG_HAVE_SIMD
    if constexpr (WHOLE) {
        using namespace simd;
        vf acc = zero();
        for (int64_t d = 0; d < D; d += kLanes) acc = fmadd(load(a + d), load(b + d), acc);
        return reduce_add(acc);
    }
#endif
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t d = 0; d < D; ++d) s += a[d] * b[d];
    return s;
}

// Calls body(e, ra, rb) for every edge e, destination by destination (CSR order), with ra and rb
// the F-wide rows of a and b at e's ends (its source col[e] when *_src, else its destination v);
// the source rows of edges LA positions ahead are prefetched.
// The row of an operand that the edge at CSR position e (destination v) reads: its destination's,
// its source's or, for an edge value stored in CSR order, its own.
MG_INLINE int64_t end_row(RowAt at, const int64_t* col, int64_t v, int64_t e) {
    return at == RowAt::Source ? col[e] : at == RowAt::Edge ? e : v;
}

template <class Body>
void for_each_edge_rows(const float* a, RowAt a_at, const float* b, RowAt b_at, const int64_t* indptr,
                        const int64_t* col, int64_t num_nodes, int64_t F, const Body& body) {
    const int64_t E = indptr[num_nodes];
    constexpr int LA = kTraversalLookahead;
#pragma omp parallel for schedule(dynamic, 64) if (E * F > kParallelMin)
    for (int64_t v = 0; v < num_nodes; ++v) {
        for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
            if (e + LA < E) {
                if (a_at == RowAt::Source) prefetch_l1<64>(a + col[e + LA] * F);
                if (b_at == RowAt::Source) prefetch_l1<64>(b + col[e + LA] * F);
            }
            body(e, a + end_row(a_at, col, v, e) * F, b + end_row(b_at, col, v, e) * F);
        }
    }
}

// edge_dot with head_dot<WHOLE> per head.
template <bool WHOLE>
void edge_dot_rows(const float* a, RowAt a_at, const float* b, RowAt b_at, const int64_t* indptr,
                   const int64_t* col, int64_t num_nodes, int64_t H, int64_t D, float* out) {
    for_each_edge_rows(a, a_at, b, b_at, indptr, col, num_nodes, H * D,
                       [&](int64_t e, const float* ra, const float* rb) {
                           for (int64_t h = 0; h < H; ++h) out[e * H + h] = head_dot<WHOLE>(ra + h * D, rb + h * D, D);
                       });
}

#if MG_HAVE_SIMD
// run(std::integral_constant<int, n>) for a vector count n in [1, 8].
template <class Run>
MG_INLINE void with_vector_count(int n, Run run) {
    switch (n) {
        case 1: return run(std::integral_constant<int, 1>{});
        case 2: return run(std::integral_constant<int, 2>{});
        case 3: return run(std::integral_constant<int, 3>{});
        case 4: return run(std::integral_constant<int, 4>{});
        case 5: return run(std::integral_constant<int, 5>{});
        case 6: return run(std::integral_constant<int, 6>{});
        case 7: return run(std::integral_constant<int, 7>{});
        default: return run(std::integral_constant<int, 8>{});
    }
}

// The per-head sums of one edge's products p[0..nv) when heads are narrower than a vector (D a
// power of two below the width, H <= kLanes, nv <= 8): pairs of vectors fold into one by two
// two-source permutes and an add (each group of D lanes of both becomes D/2 lanes: nv - 1 folds
// in all), the last vector's groups are summed by butterfly steps, and one permute puts head h's
// sum in lane h.  GAT's 8 heads of 8 on 16 lanes: 3 folds, 1 butterfly step, 1 permute per edge,
// where a butterfly of 3 steps in each of the 4 vectors and a pick of each head through memory
// took twice as long (edge_dot on a Flickr-shaped graph, 990,000 edges: 24.4 -> 12.3 ms, AMD EPYC
// with AVX-512, 2 threads).  fold() is unrolled for a fixed vector count so p stays in registers:
// a loop over a run-time count kept it in memory and gained nothing.
class NarrowHeadSums {
  public:
    static bool handles(int64_t H, int64_t D) {
        return H <= simd::kLanes && D < simd::kLanes && simd::kLanes % D == 0 && H * D <= 8 * simd::kLanes;
    }
    NarrowHeadSums(int64_t heads, int64_t D) : H_(heads), nv_(int((heads * D + simd::kLanes - 1) / simd::kLanes)) {
        using namespace simd;
        // label[j][q]: the head whose lanes group q of vector j holds (-1: none)
        std::vector<std::vector<int>> label(static_cast<size_t>(nv_));
        for (int j = 0; j < nv_; ++j)
            for (int64_t q = 0; q < kLanes / D; ++q) {
                const int64_t h = (j * kLanes) / D + q;
                label[size_t(j)].push_back(h < H_ ? int(h) : -1);
            }
        int64_t width = D;                                  // lanes per group
        int folds = 0;
        // Level by level, vectors 2i and 2i + 1 (zeros past the end) fold into vector i (fold()).
        while (label.size() > 1) {
            const int64_t groups = kLanes / width, half = width / 2;
            std::vector<std::vector<int>> next;
            for (size_t i = 0; i < label.size(); i += 2) {
                alignas(64) std::int32_t lo[kLanes], hi[kLanes];
                std::vector<int> merged;
                for (int64_t q = 0; q < 2 * groups; ++q) {
                    const int64_t base = (q < groups ? 0 : kLanes) + (q % groups) * width;
                    for (int64_t t = 0; t < half; ++t) {
                        lo[q * half + t] = std::int32_t(base + t);
                        hi[q * half + t] = std::int32_t(base + half + t);
                    }
                    merged.push_back(q < groups ? label[i][size_t(q)]
                                                : i + 1 < label.size() ? label[i + 1][size_t(q - groups)] : -1);
                }
                lo_[folds] = load_i32(lo);
                hi_[folds] = load_i32(hi);
                ++folds;
                next.push_back(merged);
            }
            label = next;
            width /= 2;
        }
        for (int64_t s = 1; s < width; s *= 2) {
            alignas(64) std::int32_t idx[kLanes];
            for (int l = 0; l < kLanes; ++l) idx[l] = std::int32_t(l ^ s);
            partner_[steps_++] = load_i32(idx);
        }
        alignas(64) std::int32_t pick[kLanes] = {};
        for (size_t q = 0; q < label[0].size(); ++q)
            if (label[0][q] >= 0) pick[label[0][q]] = std::int32_t(q * size_t(width));
        pick_ = load_i32(pick);
    }
    int vectors() const { return nv_; }
    // dot[0..H) = the heads' sums of p[0..NV), NV == vectors() (p is overwritten).
    template <int NV>
    MG_INLINE void sum(simd::vf* p, float* dot) const {
        using namespace simd;
        fold<NV>(p, lo_, hi_);
        vf q = p[0];
        for (int t = 0; t < steps_; ++t) q = add(q, permute(q, partner_[t]));
        alignas(64) float sums[kLanes];
        store_aligned(sums, permute(q, pick_));
        for (int64_t h = 0; h < H_; ++h) dot[h] = sums[h];
    }

  private:
    // Vectors 2i and 2i + 1 into vector i, level after level, unrolled so p stays in registers.
    template <int N>
    static MG_INLINE void fold(simd::vf* p, const simd::vi* lo, const simd::vi* hi) {
        using namespace simd;
        if constexpr (N > 1) {
            constexpr int M = (N + 1) / 2;
#pragma GCC unroll 8
            for (int i = 0; i < M; ++i) {
                const vf a = p[2 * i], b = 2 * i + 1 < N ? p[2 * i + 1] : zero();
                p[i] = add(permute2(a, b, lo[i]), permute2(a, b, hi[i]));
            }
            fold<M>(p, lo + M, hi + M);
        }
    }
    int64_t H_;
    int nv_, steps_ = 0;
    simd::vi lo_[8], hi_[8], partner_[4], pick_;
};
#endif

#if MG_HAVE_SIMD
// edge_dot with heads narrower than a vector: D divides the vector width, H * D <= 8 vectors.
// Each vector of a*b is summed within its groups of D lanes by log2(D) butterfly steps (lane l
// adds lane l ^ s), after which lane h*D holds head h's dot; the row's vectors go through a
// small buffer from which the H sums are picked.
inline void edge_dot_rows_narrow(const float* a, RowAt a_at, const float* b, RowAt b_at, const int64_t* indptr,
                                 const int64_t* col, int64_t num_nodes, int64_t H, int64_t D, float* out) {
    using namespace simd;
    constexpr int kMaxVectors = 8;
    const int64_t F = H * D;
    const int nv = int((F + kLanes - 1) / kLanes);
    vi partner[4];  // lane l ^ s for s = 1, 2, 4, 8
    int steps = 0;
    for (int64_t s = 1; s < D; s *= 2, ++steps) {
        alignas(64) std::int32_t idx[kLanes];
        for (int l = 0; l < kLanes; ++l) idx[l] = std::int32_t(l ^ s);
        partner[steps] = load_i32(idx);
    }
    if (NarrowHeadSums::handles(H, D)) {
        const NarrowHeadSums head_sums(H, D);
        auto run = [&](auto vectors) {
            constexpr int NV = decltype(vectors)::value;
            const bool full = F == NV * kLanes;   // a masked load costs more than a load on AMD cores
            for_each_edge_rows(a, a_at, b, b_at, indptr, col, num_nodes, F,
                               [&](int64_t e, const float* ra, const float* rb) {
                                   vf p[NV];
#pragma GCC unroll 8
                                   for (int j = 0; j < NV; ++j) {
                                       const mask m = lanes(F - int64_t(kLanes) * j);
                                       p[j] = full ? mul(load(ra + kLanes * j), load(rb + kLanes * j))
                                                   : mul(load(m, ra + kLanes * j), load(m, rb + kLanes * j));
                                   }
                                   head_sums.template sum<NV>(p, out + e * H);
                               });
        };
        with_vector_count(head_sums.vectors(), run);
        return;
    }
    for_each_edge_rows(a, a_at, b, b_at, indptr, col, num_nodes, F, [&](int64_t e, const float* ra, const float* rb) {
        alignas(64) float sums[kMaxVectors * kLanes];
        for (int j = 0; j < nv; ++j) {
            const mask m = lanes(F - int64_t(kLanes) * j);
            vf p = mul(load(m, ra + kLanes * j), load(m, rb + kLanes * j));
            for (int t = 0; t < steps; ++t) p = add(p, permute(p, partner[t]));
            store_aligned(sums + kLanes * j, p);
        }
        for (int64_t h = 0; h < H; ++h) out[e * H + h] = sums[h * D];
    });
}

// edge_dot with one head of any width: masked vectors summed in one register, one reduction.
inline void edge_dot_rows_one_head(const float* a, RowAt a_at, const float* b, RowAt b_at, const int64_t* indptr,
                                   const int64_t* col, int64_t num_nodes, int64_t D, float* out) {
    using namespace simd;
    for_each_edge_rows(a, a_at, b, b_at, indptr, col, num_nodes, D, [&](int64_t e, const float* ra, const float* rb) {
        vf acc = zero();
        for (int64_t d = 0; d < D; d += kLanes) {
            const mask m = lanes(D - d);
            acc = fmadd(load(m, ra + d), load(m, rb + d), acc);
        }
        out[e] = reduce_add(acc);
    });
}
#endif

}  // namespace edge_detail

// out[e, h] = sum_d a[row of e, h*D + d] * b[row of e, h*D + d] for every edge (each operand's row
// where *_at says: its source's, its destination's, or the edge's own for an edge value): the
// per-head dot of gathered node values (GAT's attention gradient, HGT's attention scores and
// their gradient) without gathering them.  Edges go destination by
// destination, so the destination of the edge at CSR position e is the row v being walked; the
// source rows of edges 8 positions ahead are prefetched.  Heads of whole vectors sum one register
// per head, one head of any width masked vectors; heads narrower than a vector sum within lane
// groups (edge_dot_rows_narrow).
inline void edge_dot(const float* a, RowAt a_at, const float* b, RowAt b_at, const int64_t* indptr,
                     const int64_t* col, int64_t num_nodes, int64_t H, int64_t D, float* out) {
#if MG_HAVE_SIMD
    if (D % simd::kLanes == 0)
        return edge_detail::edge_dot_rows<true>(a, a_at, b, b_at, indptr, col, num_nodes, H, D, out);
    if (H == 1) return edge_detail::edge_dot_rows_one_head(a, a_at, b, b_at, indptr, col, num_nodes, D, out);
    if (simd::kLanes % D == 0 && H * D <= 8 * simd::kLanes)  // D a power of two below the width
        return edge_detail::edge_dot_rows_narrow(a, a_at, b, b_at, indptr, col, num_nodes, H, D, out);
#endif
    edge_detail::edge_dot_rows<false>(a, a_at, b, b_at, indptr, col, num_nodes, H, D, out);
}

// out[e, h*D + d] = w[e, h] * x[row of e, h*D + d] for every edge, in CSR order: a gathered node
// value scaled per head or per edge (HGT's gradient of its messages, head_mul(gather(g), alpha);
// R-GCN's gradient through / e.rel_degree, w its reciprocal) without the gathered copy.  x_at:
// RowAt::Source or RowAt::Destination.
inline void weighted_gather(RowAt x_at, const float* x, const float* w, const int64_t* indptr, const int64_t* col,
                            int64_t num_nodes, int64_t H, int64_t D, float* out) {
    const int64_t F = H * D, E = indptr[num_nodes];
#pragma omp parallel for schedule(dynamic, 64) if (E * F > edge_detail::kParallelMin)
    for (int64_t v = 0; v < num_nodes; ++v) {
        for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
            const float* MG_RESTRICT s = x + edge_detail::end_row(x_at, col, v, e) * F;
            float* MG_RESTRICT o = out + e * F;
            for (int64_t h = 0; h < H; ++h) {
                const float c = w[e * H + h];
#pragma omp simd
                for (int64_t d = 0; d < D; ++d) o[h * D + d] = c * s[h * D + d];
            }
        }
    }
}

}  // namespace mg
