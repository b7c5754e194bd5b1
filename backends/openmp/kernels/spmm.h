// Feature-tiled CSR SpMM: neighbourhood aggregation over incoming edges and its backward.
//
//   Y[v] = epilogue( rowf(v) * ( reduce_{e in in(v)} c_e * X[col[e]]  (+ selfc(v) * X[v]) ) )
//
// with c_e = w_e * s[col[e]] (w_e the optional edge weight, s the optional GCN scale vector),
// rowf(v) = (mean ? 1/cnt(v) : 1) * s[v], selfc(v) = s[v] when the self loop is on, and
// cnt(v) = in_degree(v) + self_loop. With s = 1/sqrt(deg+1) this is GCN's D^-1/2 (A+I) D^-1/2.
// For max the reduce is the element-wise maximum over the candidates c_e*X[u] (and the self
// term), and the argmax is recorded per output element as the source node id (v itself for the
// self term, -1 for a row without candidates, whose value is 0).
//
// Schedule (Morphling IV-C): rows are distributed with schedule(dynamic, 64); the feature axis
// is cut into tiles of TILE floats (compile-time, default 32 = two 512-bit or four 256-bit
// registers, simd.h); for each (row, tile) the accumulators stay in vector registers while the neighbour loop issues one FMA per
// register, and the tile of the neighbour LOOKAHEAD edges ahead in the CSR (possibly in a later
// row) is prefetched into L1. A masked path handles a last tile narrower than TILE, so
// any width (1, 3, 7, 33, ...) works. The epilogue (bias + activation) runs on the finished tile
// before its single store.
#pragma once

#include <cstdint>
#include <limits>

#include "common.h"

#ifndef MG_SPMM_TILE
#define MG_SPMM_TILE 32
#endif
#ifndef MG_SPMM_LOOKAHEAD
#define MG_SPMM_LOOKAHEAD 8  // measured on the 100k-node / 2M-edge graph, see README.md
#endif

namespace mg {

struct AggSpec {
    Reduce reduce = Reduce::Sum;
    const float* edge_weight = nullptr;  // [E] indexed by dst-sorted CSR position, or nullptr
    const float* node_scale = nullptr;   // [N] GCN scale s (see gcn_node_scale), or nullptr
    bool self_loop = false;              // the node's own row joins its neighbourhood
    // [N] 1 / (in-degree + self loop) per node, or nullptr.  The transposed mean without weights
    // or scales reads its coefficient here instead of dividing by a count from indptr: for each
    // edge, in random order, one 4-byte load from an array half the size of indptr instead of
    // two 8-byte row pointers and a division.
    const float* inv_count = nullptr;
};

// The inv_count of AggSpec: 1 / (in-degree(v) + self_loop), as the kernels would divide.
inline void inverse_in_counts(idx_t n, const idx_t* indptr, bool self_loop, float* out) {
#pragma omp parallel for schedule(static)
    for (idx_t v = 0; v < n; ++v)
        out[v] = 1.f / static_cast<float>(indptr[v + 1] - indptr[v] + (self_loop ? 1 : 0));
}

// The feature tile for rows of `width` floats (the code generator's choice, `emitter.spmm_tile`):
// rows wider than 32 and narrower than 64 get a tile of their width rounded up to whole vectors,
// walked once per row without a second, mostly empty pass (40 floats: one tile of 40 with AVX2,
// 48 with AVX-512, not 64 of which 24 are masked off), whose prefetch of the tile's lines no
// longer pulls in a line of the next row.  A mean aggregation of 40-wide rows on the arxiv-shaped
// graph (169,343 nodes, 1.17 M edges), 2 threads, three alternations: AVX2 10.8-11.5 -> 7.8-8.0
// ms, AVX-512 9.2-9.8 -> 8.2-9.1 ms (in SAGE's epoch, AVX2: 10.0 -> 7.5 ms, forward and transposed
// alike).  Rows of 32 or fewer keep the default tile (one vector measured no faster for 7 and 16
// columns) and rows of 64 or more the 64-float tile.  (Prefetching only the lines a masked row
// touches, by a run-time loop, made the 7-wide aggregations twice as slow: its trip count, 1 or
// 2 by the row's alignment, is a branch mispredicted at random rows.)  Without vectors (the
// portable build) there are no whole vectors to round to: rows wider than 32 take the 64 tile,
// so that the op layer (ops.cpp) instantiates two tiles, not one per width.
constexpr int spmm_tile_for(long width) {
    return width <= 32   ? MG_SPMM_TILE
           : width >= 64 || !MG_HAVE_SIMD ? 64
                                          : int((width + simd::kLanes - 1) / simd::kLanes * simd::kLanes);
}

namespace spmm_detail {

// out[0:TILE) = sum_k coef(k) * X[nbr[k], f0 : f0+width).  MASKED: width < TILE.  The index
// type is idx_t for graph neighbours and uint16_t for the column-blocked sparse features.
//
// Prefetching runs across row boundaries: `avail` (>= deg) is how many index entries may be read
// from nbr on (the rest of the CSR), and entry k prefetches the row of entry k + LA even when
// that belongs to the next rows. Rows shorter than LA (the common case at average degrees of
// 5-10) are then prefetched by the rows before them instead of not at all.
template <int TILE, int LA, bool MASKED, class Coef, class Index>
MG_INLINE void gather_sum(const Index* MG_RESTRICT nbr, idx_t deg, idx_t avail, const Coef& coef,
                          const float* MG_RESTRICT X, idx_t ldx, idx_t f0, int width,
                          float* MG_RESTRICT out) {
    idx_t k = 0;
    const idx_t prefetch_end = LA > 0 ? (avail - LA < deg ? (avail - LA > 0 ? avail - LA : 0) : deg) : 0;
#if MG_HAVE_SIMD
    using namespace simd;
    static_assert(TILE % kLanes == 0, "the tile width must be a multiple of the vector width");
    constexpr int NV = TILE / kLanes;
    vf acc[NV];
    mask m[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
        acc[j] = zero();
        m[j] = lanes(MASKED ? width - kLanes * j : kLanes);
    }
    auto step = [&](idx_t kk) {
        const float* xr = X + nbr[kk] * ldx + f0;
        const vf c = set1(coef(kk));
#pragma GCC unroll 16
        for (int j = 0; j < NV; ++j) {
            const vf x = MASKED ? load(m[j], xr + kLanes * j) : load(xr + kLanes * j);
            acc[j] = fmadd(c, x, acc[j]);
        }
    };
    for (; k < prefetch_end; ++k) {
        prefetch_l1<TILE * 4>(X + nbr[k + LA] * ldx + f0);
        step(k);
    }
    for (; k < deg; ++k) step(k);
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) store(out + kLanes * j, acc[j]);
#else
    float acc[TILE];
    const int w = MASKED ? width : TILE;
#pragma omp simd
    for (int f = 0; f < TILE; ++f) acc[f] = 0.f;
    auto step = [&](idx_t kk) {
        const float* xr = X + nbr[kk] * ldx + f0;
        const float c = coef(kk);
#pragma omp simd
        for (int f = 0; f < w; ++f) acc[f] += c * xr[f];
    };
    for (; k < prefetch_end; ++k) {
        prefetch_l1<TILE * 4>(X + nbr[k + LA] * ldx + f0);
        step(k);
    }
    for (; k < deg; ++k) step(k);
#pragma omp simd
    for (int f = 0; f < TILE; ++f) out[f] = acc[f];
#endif
}

// out = max over candidates; arg[f] = index k of the winning neighbour, `deg` for the self term,
// -1 when there is no candidate. The first maximum wins (self term first, then CSR order).
template <int TILE, int LA, bool MASKED, class Coef>
MG_INLINE void gather_max(const idx_t* MG_RESTRICT nbr, idx_t deg, const Coef& coef,
                          const float* MG_RESTRICT X, idx_t ldx, idx_t f0, int width,
                          const float* self_row, float self_coef, float* MG_RESTRICT out,
                          std::int32_t* MG_RESTRICT arg) {
    idx_t k = 0;
    const idx_t prefetch_end = (LA > 0 && deg > LA) ? deg - LA : 0;
    const float ninf = -std::numeric_limits<float>::infinity();
#if MG_HAVE_SIMD
    using namespace simd;
    static_assert(TILE % kLanes == 0, "the tile width must be a multiple of the vector width");
    constexpr int NV = TILE / kLanes;
    vf best[NV];
    vi barg[NV];
    mask m[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
        best[j] = set1(ninf);
        barg[j] = set1_i32(-1);
        m[j] = lanes(MASKED ? width - kLanes * j : kLanes);
    }
    auto consider = [&](const float* xr, float c, std::int32_t id) {
        const vf cv = set1(c);
        const vi idv = set1_i32(id);
#pragma GCC unroll 16
        for (int j = 0; j < NV; ++j) {
            const vf x = mul(cv, MASKED ? load(m[j], xr + kLanes * j) : load(xr + kLanes * j));
            // Ordered compare: a NaN candidate never replaces the current best.
            const mask gt = greater(m[j], x, best[j]);
            best[j] = select(gt, x, best[j]);
            barg[j] = select(gt, idv, barg[j]);
        }
    };
    if (self_row) consider(self_row, self_coef, static_cast<std::int32_t>(deg));
    for (; k < prefetch_end; ++k) {
        prefetch_l1<TILE * 4>(X + nbr[k + LA] * ldx + f0);
        consider(X + nbr[k] * ldx + f0, coef(k), static_cast<std::int32_t>(k));
    }
    for (; k < deg; ++k) consider(X + nbr[k] * ldx + f0, coef(k), static_cast<std::int32_t>(k));
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) {
        store(out + kLanes * j, best[j]);
        store_i32(arg + kLanes * j, barg[j]);
    }
#else
    const int w = MASKED ? width : TILE;
    for (int f = 0; f < TILE; ++f) {
        out[f] = ninf;
        arg[f] = -1;
    }
    auto consider = [&](const float* xr, float c, std::int32_t id) {
#pragma omp simd
        for (int f = 0; f < w; ++f) {
            const float x = c * xr[f];
            const bool gt = x > out[f];
            out[f] = gt ? x : out[f];
            arg[f] = gt ? id : arg[f];
        }
    };
    if (self_row) consider(self_row, self_coef, static_cast<std::int32_t>(deg));
    for (; k < prefetch_end; ++k) {
        prefetch_l1<TILE * 4>(X + nbr[k + LA] * ldx + f0);
        consider(X + nbr[k] * ldx + f0, coef(k), static_cast<std::int32_t>(k));
    }
    for (; k < deg; ++k) consider(X + nbr[k] * ldx + f0, coef(k), static_cast<std::int32_t>(k));
#endif
}

// y[f] = act((vals[f] + selfc*self_row[f]) * rowf + residual[f] + bias[f]) (residual and bias
// may be nullptr); accumulate adds to y instead.
MG_INLINE void finish_tile(const float* MG_RESTRICT vals, int width, float rowf,
                           const float* self_row, float selfc, const Epilogue& epi,
                           const float* bias, bool accumulate, float* MG_RESTRICT y,
                           const float* residual = nullptr) {
#if MG_HAVE_SIMD
    // The common epilogues in vector registers, masked to the width: scalar loops of a run-time
    // width cost more than the gather itself on narrow rows.
    if (epi.act == Act::None || epi.act == Act::Relu) {
        using namespace simd;
        const vf scale = set1(rowf), self_scale = set1(selfc);
        const bool relu_on = epi.act == Act::Relu;
        for (int f = 0; f < width; f += kLanes) {
            const mask m = lanes(width - f);
            vf t = load(m, vals + f);
            if (self_row) t = fmadd(self_scale, load(m, self_row + f), t);
            t = mul(t, scale);
            if (residual) t = add(t, load(m, residual + f));
            if (bias) t = add(t, load(m, bias + f));
            if (relu_on) t = relu(t);
            if (accumulate) t = add(load(m, y + f), t);
            store(m, y + f, t);
        }
        return;
    }
#endif
    float t[256];  // width <= TILE <= 256 (checked by the callers' static_assert)
#pragma omp simd
    for (int f = 0; f < width; ++f) t[f] = vals[f];
    if (self_row) {
#pragma omp simd
        for (int f = 0; f < width; ++f) t[f] += selfc * self_row[f];
    }
#pragma omp simd
    for (int f = 0; f < width; ++f) t[f] *= rowf;
    add_residual(residual, t, width);
    apply_epilogue(epi.act, epi.alpha, bias, t, width);
    if (accumulate) {
#pragma omp simd
        for (int f = 0; f < width; ++f) y[f] += t[f];
    } else {
#pragma omp simd
        for (int f = 0; f < width; ++f) y[f] = t[f];
    }
}

// rows: the CSR rows to compute (count of them), or nullptr for rows 0 .. n_rows - 1.
template <int TILE, int LA, bool HAS_W, bool HAS_S>
void forward_impl(idx_t n_rows, const idx_t* rows, idx_t count, const idx_t* indptr, const idx_t* col,
                  const float* X, idx_t ldx, idx_t F, float* Y, idx_t ldy, const AggSpec& spec,
                  const Epilogue& epi, idx_t* argmax, idx_t ld_arg) {
    static_assert(TILE > 0 && TILE <= 256, "tile width must lie in (0, 256]");
    const float* w_all = spec.edge_weight;
    const float* s = spec.node_scale;
    const bool is_max = spec.reduce == Reduce::Max;
    const bool is_mean = spec.reduce == Reduce::Mean;
    const bool self = spec.self_loop;
#pragma omp parallel for schedule(dynamic, 64)
    for (idx_t i = 0; i < count; ++i) {
        const idx_t v = rows ? rows[i] : i;
        const idx_t start = indptr[v];
        const idx_t deg = indptr[v + 1] - start;
        const idx_t avail = indptr[n_rows] - start;
        const idx_t* nbr = col + start;
        const float* w = HAS_W ? w_all + start : nullptr;
        auto coef = [&](idx_t k) -> float {
            float c = 1.f;
            if constexpr (HAS_W) c = w[k];
            if constexpr (HAS_S) c *= s[nbr[k]];
            return c;
        };
        const float sv = HAS_S ? s[v] : 1.f;
        const idx_t cnt = deg + (self ? 1 : 0);
        float* yrow = Y + v * ldy;
        const float* xself = X + v * ldx;
        alignas(64) float vals[TILE];
        alignas(64) std::int32_t arg[TILE];
        for (idx_t f0 = 0; f0 < F; f0 += TILE) {
            const int width = static_cast<int>(F - f0 < TILE ? F - f0 : TILE);
            const float* bias = epi.bias ? epi.bias + f0 : nullptr;
            const float* residual = epi.residual ? epi.residual + v * ldy + f0 : nullptr;
            if (!is_max) {
                if (width == TILE)
                    gather_sum<TILE, LA, false>(nbr, deg, avail, coef, X, ldx, f0, width, vals);
                else
                    gather_sum<TILE, LA, true>(nbr, deg, avail, coef, X, ldx, f0, width, vals);
                const float rowf = (is_mean && cnt > 0 ? 1.f / static_cast<float>(cnt) : 1.f) * sv;
                finish_tile(vals, width, rowf, self ? xself + f0 : nullptr, sv, epi, bias, false, yrow + f0,
                            residual);
            } else {
                const float* self_row = self ? xself + f0 : nullptr;
                if (width == TILE)
                    gather_max<TILE, LA, false>(nbr, deg, coef, X, ldx, f0, width, self_row, sv, vals, arg);
                else
                    gather_max<TILE, LA, true>(nbr, deg, coef, X, ldx, f0, width, self_row, sv, vals, arg);
                for (int f = 0; f < width; ++f)
                    if (arg[f] < 0) vals[f] = 0.f;  // no candidate: defined as 0, not -inf
                finish_tile(vals, width, sv, nullptr, 0.f, epi, bias, false, yrow + f0, residual);
                if (argmax) {
                    idx_t* arow = argmax + v * ld_arg + f0;
                    for (int f = 0; f < width; ++f) {
                        const std::int32_t a = arg[f];
                        arow[f] = a < 0 ? -1 : (a == deg ? v : nbr[a]);
                    }
                }
            }
        }
    }
}

template <int TILE, int LA, bool HAS_W, bool HAS_S>
void transpose_impl(idx_t n_src, const idx_t* indptr, const idx_t* t_indptr, const idx_t* t_col,
                    const idx_t* t_eid, const float* G, idx_t ldg, idx_t F, float* dX, idx_t lddx,
                    const AggSpec& spec, bool accumulate) {
    static_assert(TILE > 0 && TILE <= 256, "tile width must lie in (0, 256]");
    const float* w_all = spec.edge_weight;
    const float* s = spec.node_scale;
    const bool is_mean = spec.reduce == Reduce::Mean;
    const float* inv_count = is_mean ? spec.inv_count : nullptr;
    const bool self = spec.self_loop;
    const idx_t self_cnt = self ? 1 : 0;
    const Epilogue none{};
#pragma omp parallel for schedule(dynamic, 64)
    for (idx_t u = 0; u < n_src; ++u) {
        const idx_t start = t_indptr[u];
        const idx_t deg = t_indptr[u + 1] - start;
        const idx_t avail = t_indptr[n_src] - start;
        const idx_t* nbr = t_col + start;
        const idx_t* eid = t_eid + start;
        auto coef = [&](idx_t k) -> float {
            const idx_t v = nbr[k];
            if constexpr (!HAS_W && !HAS_S) {
                if (inv_count) return inv_count[v];      // the same bits as 1.f / count
            }
            float c = 1.f;
            if constexpr (HAS_W) c = w_all[eid[k]];
            if constexpr (HAS_S) c *= s[v];
            if (is_mean) c /= static_cast<float>(indptr[v + 1] - indptr[v] + self_cnt);
            return c;
        };
        const float su = HAS_S ? s[u] : 1.f;
        float selfc = su;
        if (self && is_mean) selfc /= static_cast<float>(indptr[u + 1] - indptr[u] + 1);
        float* xrow = dX + u * lddx;
        const float* gself = G + u * ldg;
        alignas(64) float vals[TILE];
        for (idx_t f0 = 0; f0 < F; f0 += TILE) {
            const int width = static_cast<int>(F - f0 < TILE ? F - f0 : TILE);
            if (width == TILE)
                gather_sum<TILE, LA, false>(nbr, deg, avail, coef, G, ldg, f0, width, vals);
            else
                gather_sum<TILE, LA, true>(nbr, deg, avail, coef, G, ldg, f0, width, vals);
            finish_tile(vals, width, su, self ? gself + f0 : nullptr, selfc, none, nullptr, accumulate,
                        xrow + f0);
        }
    }
}

}  // namespace spmm_detail

// The forward aggregation of the listed rows only (`rows`: `count` CSR row ids; nullptr: all
// rows), each computed as spmm computes it.  The MPI backend aggregates the rows that read no
// ghost while the halo travels, then the others.
template <int TILE = MG_SPMM_TILE, int LOOKAHEAD = MG_SPMM_LOOKAHEAD>
int spmm_rows(idx_t n_rows, const idx_t* rows, idx_t count, const idx_t* indptr, const idx_t* col, const float* X,
              idx_t ldx, idx_t F, float* Y, idx_t ldy, const AggSpec& spec = AggSpec{},
              const Epilogue& epi = Epilogue{}, idx_t* argmax = nullptr, idx_t ld_arg = -1) {
    if (n_rows < 0 || count < 0 || F < 0 || ldx < F || ldy < F || !indptr) return kErrArgument;
    if (ld_arg < 0) ld_arg = F;
    using namespace spmm_detail;
    const bool w = spec.edge_weight != nullptr, s = spec.node_scale != nullptr;
    if (w && s) forward_impl<TILE, LOOKAHEAD, true, true>(n_rows, rows, count, indptr, col, X, ldx, F, Y, ldy, spec, epi, argmax, ld_arg);
    else if (w) forward_impl<TILE, LOOKAHEAD, true, false>(n_rows, rows, count, indptr, col, X, ldx, F, Y, ldy, spec, epi, argmax, ld_arg);
    else if (s) forward_impl<TILE, LOOKAHEAD, false, true>(n_rows, rows, count, indptr, col, X, ldx, F, Y, ldy, spec, epi, argmax, ld_arg);
    else forward_impl<TILE, LOOKAHEAD, false, false>(n_rows, rows, count, indptr, col, X, ldx, F, Y, ldy, spec, epi, argmax, ld_arg);
    return kOk;
}

// Forward aggregation (see the file comment). X has at least n_rows rows when self_loop is on.
// argmax (max only, may be nullptr): [n_rows x F] with leading dimension ld_arg.
template <int TILE = MG_SPMM_TILE, int LOOKAHEAD = MG_SPMM_LOOKAHEAD>
int spmm(idx_t n_rows, const idx_t* indptr, const idx_t* col, const float* X, idx_t ldx, idx_t F,
         float* Y, idx_t ldy, const AggSpec& spec = AggSpec{}, const Epilogue& epi = Epilogue{},
         idx_t* argmax = nullptr, idx_t ld_arg = -1) {
    return spmm_rows<TILE, LOOKAHEAD>(n_rows, nullptr, n_rows, indptr, col, X, ldx, F, Y, ldy, spec, epi, argmax,
                                      ld_arg);
}

// Backward of sum/mean (and GCN-normalised) aggregation with respect to X, without atomics:
// dX[u] (+)= sum over out-edges e=(u->v) of c_e * G[v] (+ self term), walking the by-source CSR.
// G is the gradient of the aggregation output before any epilogue (undo bias/activation first).
// indptr (forward, n_dst+1 entries) supplies the mean's degrees.
template <int TILE = MG_SPMM_TILE, int LOOKAHEAD = MG_SPMM_LOOKAHEAD>
int spmm_transpose(idx_t n_src, const idx_t* indptr, const idx_t* t_indptr, const idx_t* t_col,
                   const idx_t* t_eid, const float* G, idx_t ldg, idx_t F, float* dX, idx_t lddx,
                   const AggSpec& spec = AggSpec{}, bool accumulate = false) {
    if (spec.reduce == Reduce::Max) return kErrArgument;  // use spmm_max_backward
    if (n_src < 0 || F < 0 || ldg < F || lddx < F || !t_indptr) return kErrArgument;
    if ((spec.reduce == Reduce::Mean || spec.self_loop) && !indptr) return kErrArgument;
    if (spec.edge_weight && !t_eid) return kErrArgument;
    using namespace spmm_detail;
    const bool w = spec.edge_weight != nullptr, s = spec.node_scale != nullptr;
    if (w && s) transpose_impl<TILE, LOOKAHEAD, true, true>(n_src, indptr, t_indptr, t_col, t_eid, G, ldg, F, dX, lddx, spec, accumulate);
    else if (w) transpose_impl<TILE, LOOKAHEAD, true, false>(n_src, indptr, t_indptr, t_col, t_eid, G, ldg, F, dX, lddx, spec, accumulate);
    else if (s) transpose_impl<TILE, LOOKAHEAD, false, true>(n_src, indptr, t_indptr, t_col, t_eid, G, ldg, F, dX, lddx, spec, accumulate);
    else transpose_impl<TILE, LOOKAHEAD, false, false>(n_src, indptr, t_indptr, t_col, t_eid, G, ldg, F, dX, lddx, spec, accumulate);
    return kOk;
}

// Backward of max aggregation: dX[u,f] (+)= c_(u,v) * G[v,f] for every out-neighbour v whose
// argmax[v,f] == u (and the self term when argmax[u,f] == u). Runs over the by-source CSR, so each
// thread owns its output rows: no atomics, no thread-local copies. Parallel edges u->v share one
// argmax entry, so a group of parallel edges (adjacent in the stable transpose of layout.h) passes
// the gradient once, with the coefficient of its first edge; exact whenever parallel edges carry
// equal coefficients (unweighted or GCN-scaled graphs). With self_loop on, argmax == u denotes the
// self term and a stored edge u->u is folded into it.
inline int spmm_max_backward(idx_t n_src, const idx_t* t_indptr, const idx_t* t_col, const idx_t* t_eid,
                             const idx_t* argmax, idx_t ld_arg, const float* G, idx_t ldg, idx_t F,
                             float* dX, idx_t lddx, const AggSpec& spec = AggSpec{},
                             bool accumulate = false) {
    if (n_src < 0 || F < 0 || ldg < F || lddx < F || ld_arg < F || !t_indptr || !argmax) return kErrArgument;
    if (spec.edge_weight && !t_eid) return kErrArgument;
    const float* w_all = spec.edge_weight;
    const float* s = spec.node_scale;
    const bool self = spec.self_loop;
#pragma omp parallel for schedule(dynamic, 64)
    for (idx_t u = 0; u < n_src; ++u) {
        float* MG_RESTRICT xrow = dX + u * lddx;
        if (!accumulate) {
#pragma omp simd
            for (idx_t f = 0; f < F; ++f) xrow[f] = 0.f;
        }
        const float su = s ? s[u] : 1.f;
        for (idx_t k = t_indptr[u]; k < t_indptr[u + 1]; ++k) {
            const idx_t v = t_col[k];
            if (k > t_indptr[u] && t_col[k - 1] == v) continue;  // parallel edge: counted once
            if (self && v == u) continue;                        // folded into the self term
            float c = w_all ? w_all[t_eid[k]] : 1.f;
            if (s) c *= su * s[v];
            const idx_t* MG_RESTRICT am = argmax + v * ld_arg;
            const float* MG_RESTRICT g = G + v * ldg;
#pragma omp simd
            for (idx_t f = 0; f < F; ++f) xrow[f] += am[f] == u ? c * g[f] : 0.f;
        }
        if (self) {
            const float c = su * su;
            const idx_t* MG_RESTRICT am = argmax + u * ld_arg;
            const float* MG_RESTRICT g = G + u * ldg;
#pragma omp simd
            for (idx_t f = 0; f < F; ++f) xrow[f] += am[f] == u ? c * g[f] : 0.f;
        }
    }
    return kOk;
}

// Gradient of sum/mean aggregation with respect to the edge weights (SDDMM over the CSR):
// dw[e] = (mean ? 1/cnt(v) : 1) * s[u] * s[v] * <G[v], X[u]>  for e = (u -> v).
inline int spmm_edge_weight_grad(idx_t n_rows, const idx_t* indptr, const idx_t* col, const float* X,
                                 idx_t ldx, const float* G, idx_t ldg, idx_t F, float* dw,
                                 const AggSpec& spec = AggSpec{}) {
    if (spec.reduce == Reduce::Max) return kErrArgument;
    if (n_rows < 0 || F < 0 || ldx < F || ldg < F || !indptr) return kErrArgument;
    const float* s = spec.node_scale;
    const bool is_mean = spec.reduce == Reduce::Mean;
    const idx_t self_cnt = spec.self_loop ? 1 : 0;
#pragma omp parallel for schedule(dynamic, 64)
    for (idx_t v = 0; v < n_rows; ++v) {
        const idx_t start = indptr[v], end = indptr[v + 1];
        float rowf = s ? s[v] : 1.f;
        if (is_mean && end - start + self_cnt > 0) rowf /= static_cast<float>(end - start + self_cnt);
        const float* MG_RESTRICT g = G + v * ldg;
        for (idx_t e = start; e < end; ++e) {
            const idx_t u = col[e];
            const float* MG_RESTRICT x = X + u * ldx;
            float acc = 0.f;
#pragma omp simd reduction(+ : acc)
            for (idx_t f = 0; f < F; ++f) acc += g[f] * x[f];
            dw[e] = acc * rowf * (s ? s[u] : 1.f);
        }
    }
    return kOk;
}

}  // namespace mg
