// The op layer's aggregations (SpMM and its transpose): half of the op layer's machine code, in
// a unit of its own so that the two compile side by side on a first build (ops.cpp).
#include "ops.h"

namespace mg {
namespace op {

template <int TILE>
void aggregate(const Graph &g, const AggSpec &s, const float *X, idx_t F, float *Y, idx_t *argmax,
               const Epilogue &epi) {
    const GraphView &v = *g.view;
    check(spmm<TILE>(v.num_nodes, v.indptr, v.col, X, F, F, Y, F, s, epi, argmax, F), "aggregate (spmm)");
}

template <int TILE>
void aggregate_rows(const Graph &g, const AggSpec &s, const float *X, idx_t F, float *Y, idx_t *argmax,
                    const idx_t *rows, idx_t count, const Epilogue &epi) {
    const GraphView &v = *g.view;
    check(spmm_rows<TILE>(v.num_nodes, rows, count, v.indptr, v.col, X, F, F, Y, F, s, epi, argmax, F),
          "aggregate (spmm)");
}

template <int TILE>
void aggregate_masked_rows(const MaskedRows *only, const Graph &g, const AggSpec &s, const float *X, idx_t F,
                           float *Y, idx_t *argmax, const Epilogue &epi) {
    if (!only || !only->few) return aggregate<TILE>(g, s, X, F, Y, argmax, epi);
    aggregate_rows<TILE>(g, s, X, F, Y, argmax, only->groups.perm.data(), only->count(), epi);
}

template <int TILE>
void aggregate_transpose(const Graph &g, const AggSpec &s, const float *G, idx_t F, float *dX) {
    const GraphView &v = *g.view;
    check(spmm_transpose<TILE>(v.num_nodes, v.indptr, v.t_indptr, v.t_col, v.t_eid, G, F, F, dX, F, s),
          "transposed aggregate (spmm)");
}

void aggregate_max_grad(const Graph &g, const AggSpec &s, const idx_t *argmax, const float *G, idx_t F,
                        float *dX) {
    const GraphView &v = *g.view;
    check(spmm_max_backward(v.num_nodes, v.t_indptr, v.t_col, v.t_eid, argmax, F, G, F, F, dX, F, s),
          "max aggregate backward");
}

const float *aggregate_features_once(const Graph &g, const AggSpec &s, const FeatureView &x, bool in_place,
                                     Buffer &own, int64_t &accounted) {
    if (x.kind != FeatureKind::Dense) throw Error("an aggregation of the input features needs dense features");
    const GraphView &v = *g.view;
    const idx_t F = x.cols;
    if (!in_place) {
        own.allocate(v.num_nodes * F, accounted);
        check(spmm(v.num_nodes, v.indptr, v.col, x.dense, F, F, own.data, F, s), "invariant aggregate (spmm)");
        return own.data;
    }
    const idx_t cols = std::max<idx_t>(16, std::min<idx_t>(64, F / 8 / 16 * 16));
    float *P = const_cast<float *>(x.dense);
    std::vector<float> scratch(size_t(v.num_nodes) * size_t(std::min(cols, F)));
    for (idx_t f0 = 0; f0 < F; f0 += cols) {
        const idx_t w = std::min(cols, F - f0);
        check(spmm(v.num_nodes, v.indptr, v.col, P + f0, F, w, scratch.data(), w, s), "invariant aggregate (spmm)");
#pragma omp parallel for schedule(static)
        for (idx_t r = 0; r < v.num_nodes; ++r)
            std::memcpy(P + r * F + f0, scratch.data() + r * w, sizeof(float) * size_t(w));
    }
    return P;
}

// ---- the tiles generated code may name -----------------------------------------------------------
// The emitter writes `aggregate*<mg::spmm_tile_for(F)>` for rows wider than 32: every tile that
// can return on this build's vector width is instantiated here, and a missing one fails the
// library's link (-Wl,--no-undefined).
#if MG_SIMD_LANES == 16
#define MG_TILE_INSTANCES(X) X(32) X(48) X(64)
#elif MG_SIMD_LANES == 8
#define MG_TILE_INSTANCES(X) X(32) X(40) X(48) X(56) X(64)
#else
#define MG_TILE_INSTANCES(X) X(32) X(64)
#endif
#define MG_AGGREGATE(T)                                                                              \
    static_assert(T == MG_SPMM_TILE || T > 32, "a tile spmm_tile_for cannot return");              \
    template void aggregate<T>(const Graph &, const AggSpec &, const float *, idx_t, float *, idx_t *, \
                               const Epilogue &);                                                   \
    template void aggregate_rows<T>(const Graph &, const AggSpec &, const float *, idx_t, float *,     \
                                    idx_t *, const idx_t *, idx_t, const Epilogue &);               \
    template void aggregate_masked_rows<T>(const MaskedRows *, const Graph &, const AggSpec &, const float *,  \
                                           idx_t, float *, idx_t *, const Epilogue &);              \
    template void aggregate_transpose<T>(const Graph &, const AggSpec &, const float *, idx_t, float *);
MG_TILE_INSTANCES(MG_AGGREGATE)

}  // namespace op
}  // namespace mg
