// The OpenMP backend's op layer: one function per IR opcode (forward and backward), each a thin
// call into the kernel library of kernels/.  Generated code (templates/model.cpp.j2) calls only
// these functions, so the emitter stays a table from opcode to call and the kernels keep their
// own, more general signatures.  Shapes arrive as (rows, width) pairs; every array is row-major.
#ifndef MORPHGEN_OPENMP_OPS_H
#define MORPHGEN_OPENMP_OPS_H

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "context.h"
#include "host_buffer.h"
#include "kernels/common.h"
#include "kernels/dropout.h"
#include "kernels/edge_ops.h"
#include "kernels/edge_softmax.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/layout.h"
#include "kernels/link.h"
#include "kernels/loss.h"
#include "kernels/math.h"
#include "kernels/norm.h"
#include "kernels/optim.h"
#include "kernels/sparse_features.h"
#include "kernels/spmm.h"
#include "kernels/edge_typed_linear.h"
#include "kernels/typed_linear.h"

namespace mg {
namespace op {

inline void check(int status, const char *what) {
    if (status != kOk) throw Error(std::string(what) + " failed (kernel status " + std::to_string(status) + ")");
}

// One thread pool: OpenBLAS runs single-threaded and the dense products are split over the
// OpenMP threads by row blocks (below).  Two pools -- OpenBLAS's pthreads spinning after each
// call while OpenMP's workers run the sparse kernels -- would fight for the same cores.
inline void set_threads(int threads) {
    omp_set_num_threads(threads);
    blas_set_threads(1);
}

// Dense products on the one pool (kernels/gemm.h: row blocks per OpenMP thread).
inline void gemm_rows(idx_t rows, idx_t N, idx_t K, const float *A, const float *B, bool trans_b, float *C,
                      const Epilogue &epi = Epilogue{}) {
    check(mg::gemm_rows(rows, N, K, A, B, trans_b, C, epi), "dense product (a dimension exceeds the BLAS interface)");
}
template <int WIDTH = 0>
inline void gemm_tn_rows(idx_t rows, idx_t K, idx_t M, const float *X, const float *G, float *dW) {
    check(mg::gemm_tn_rows<WIDTH>(rows, K, M, X, G, dW),
          "dense weight gradient (a dimension exceeds the BLAS interface)");
}

// Rows grouped by type, for typed linear and typed reductions (Hector's gather/scatter GEMM).
struct TypeGroups {
    std::vector<idx_t> perm, ptr;
    idx_t types = 0;
    void build(const idx_t *type, idx_t rows, idx_t num_types) {
        types = num_types;
        perm.assign(size_t(rows), 0);
        ptr.assign(size_t(num_types + 1), 0);
        if (type) {
            check(group_rows_by_type(type, rows, num_types, perm.data(), ptr.data()), "group rows by type");
        } else {  // one type: the identity order
            std::iota(perm.begin(), perm.end(), idx_t(0));
            ptr[1] = rows;
            for (idx_t t = 2; t <= num_types; ++t) ptr[size_t(t)] = rows;
        }
    }
    int64_t bytes() const { return int64_t((perm.size() + ptr.size()) * sizeof(idx_t)); }
};

// Everything derived from the graph once at load time.  Only what the program uses is built
// (the emitter asks for it): a GCN needs none of the per-edge arrays, which cost 8 bytes per edge.
struct Graph {
    const GraphView *view = nullptr;
    std::vector<idx_t> edge_dst;           // destination of each edge (CSR position)
    std::vector<idx_t> node_ids;           // 0..N-1: identity rows of featureless input
    std::vector<float> gcn_scale_self, gcn_scale_plain;
    std::vector<float> inv_count_self, inv_count_plain;  // 1 / (in-degree (+1)): transposed means
    std::vector<idx_t> zero_etype, zero_ntype;
    TypeGroups etypes, ntypes;

    const float *out_degree = nullptr;     // see build()

    // in_degree, out_degree: the nodes' degrees when the CSR does not hold all their edges
    // (distributed runs: a rank holds the in-edges of its own nodes, part of their out-edges).
    void build(const GraphView &g, const float *in_degree = nullptr, const float *out_degree_of = nullptr) {
        view = &g;
        out_degree = out_degree_of;
        gcn_scale_self.resize(size_t(g.num_nodes));
        gcn_scale_plain.resize(size_t(g.num_nodes));
        gcn_node_scale(g.num_nodes, g.indptr, true, gcn_scale_self.data(), in_degree);
        gcn_node_scale(g.num_nodes, g.indptr, false, gcn_scale_plain.data(), in_degree);
        inv_count_self.resize(size_t(g.num_nodes));
        inv_count_plain.resize(size_t(g.num_nodes));
        inverse_in_counts(g.num_nodes, g.indptr, true, inv_count_self.data());
        inverse_in_counts(g.num_nodes, g.indptr, false, inv_count_plain.data());
    }
    void build_edge_dst() {
        const GraphView &g = *view;
        edge_dst.resize(size_t(g.num_edges));
#pragma omp parallel for schedule(dynamic, 256)
        for (idx_t v = 0; v < g.num_nodes; ++v)
            for (idx_t e = g.indptr[v]; e < g.indptr[v + 1]; ++e) edge_dst[size_t(e)] = v;
    }
    void build_node_ids() {
        node_ids.resize(size_t(view->num_nodes));
        std::iota(node_ids.begin(), node_ids.end(), idx_t(0));
    }
    void build_etypes() {
        if (!view->etype) zero_etype.assign(size_t(view->num_edges), 0);
        etypes.build(etype(), view->num_edges, view->num_etypes);
    }
    void build_ntypes() {
        if (!view->ntype) zero_ntype.assign(size_t(view->num_nodes), 0);
        ntypes.build(ntype(), view->num_nodes, view->num_ntypes);
    }
    const idx_t *etype() const { return view->etype ? view->etype : zero_etype.data(); }
    const idx_t *ntype() const { return view->ntype ? view->ntype : zero_ntype.data(); }
    const float *gcn_scale(bool self_loops) const {
        return self_loops ? gcn_scale_self.data() : gcn_scale_plain.data();
    }
    const float *inv_count(bool self_loops) const {
        return self_loops ? inv_count_self.data() : inv_count_plain.data();
    }
    int64_t bytes() const {
        return int64_t((edge_dst.size() + node_ids.size() + zero_etype.size() + zero_ntype.size()) * sizeof(idx_t) +
                       (gcn_scale_self.size() + gcn_scale_plain.size() + inv_count_self.size() +
                        inv_count_plain.size()) * sizeof(float)) +
               etypes.bytes() + ntypes.bytes();
    }
};

// The column-blocked copy of sparse input features (kernels/sparse_features.h), built once at
// prepare; both directions of every linear layer on the features run over it.
inline void build_feature_blocks(const FeatureView &f, SparseFeatureBlocks &blocks) {
    if (f.kind != FeatureKind::Csr) return;
    check(build_feature_blocks(f.rows, f.cols, f.indptr, f.indices, f.data, feature_block_cols(), blocks),
          "sparse features (a row pointer decreases or a column index is out of range)");
}

// Rows of a featureless (identity) input: row r of the value is the one-hot of node idx[r]
// (idx == nullptr: of node r).  Never materialised; linear layers on it are row lookups.
struct EmbeddingPlan {
    std::vector<idx_t> order, key_ptr, keys;
    idx_t unique = 0;
    void build(const idx_t *type, const idx_t *rows, idx_t R, idx_t num_types, idx_t rows_per_type) {
        order.resize(size_t(R));
        key_ptr.resize(size_t(R + 1));
        keys.resize(size_t(R));
        unique = embedding_grad_plan(type, rows, R, num_types, rows_per_type, order.data(), key_ptr.data(),
                                     keys.data());
        if (unique < 0) throw Error("embedding plan: a type or row index is out of range");
    }
};

// ---- dense linear algebra --------------------------------------------------------------------
// Y = act(X W + bias): a fused linear epilogue (passes/fusion.py), none by default.
inline void linear(const float *X, idx_t rows, idx_t K, const float *W, idx_t M, float *Y,
                   const Epilogue &epi = Epilogue{}) {
    op::gemm_rows(rows, M, K, X, W, false, Y, epi);     // op::, not mg:: found through Epilogue
}
// dX = G W^T, then the epilogue (a residual: the other operand of an add, SAGE's backward).
inline void matmul_nt(const float *G, idx_t rows, idx_t M, const float *W, idx_t K, float *dX,
                      const Epilogue &epi = Epilogue{}) {
    op::gemm_rows(rows, K, M, G, W, true, dX, epi);
}
// WIDTH: G's width where the generated code knows it and it is narrow (the emitter's
// narrow_tn_width), else 0.
template <int WIDTH = 0>
inline void matmul_tn(const float *X, idx_t rows, idx_t K, const float *G, idx_t M, float *dW) {
    gemm_tn_rows<WIDTH>(rows, K, M, X, G, dW);
}

// Input features through a weight: the dense path is a dense product (gemm_rows), the sparse path streams the
// blocked rows through W (Morphling IV-B), the identity is a copy of W.
inline FeatureDropout feature_dropout(const FeatureView &f) {
    return FeatureDropout{f.drop_p, DropoutKey{f.drop_seed, f.drop_epoch, f.drop_site}, f.drop_row_ids};
}
// The epilogue (bias, activation, residual: SAGE's sum of its two products) runs inside the dense
// product; after the sparse blocks' product or the identity's copy, as one pass over Y.
inline void linear_features(const FeatureView &f, const SparseFeatureBlocks &blocks, const float *W, idx_t M,
                            float *Y, const Epilogue &epi = Epilogue{}) {
    switch (f.kind) {
        case FeatureKind::Dense: return linear(f.dense, f.rows, f.cols, W, M, Y, epi);
        case FeatureKind::Csr:
            check(sparse_linear_forward(blocks, W, M, Y, feature_dropout(f)), "sparse feature linear");
            break;
        case FeatureKind::Identity: std::memcpy(Y, W, sizeof(float) * size_t(f.rows * M)); break;
        default: throw Error("features are not set");
    }
    if (!has_epilogue(epi)) return;
    const idx_t rows = f.rows;
#pragma omp parallel for schedule(static)
    for (idx_t r0 = 0; r0 < rows; r0 += 64) apply_epilogue_rows(epi, Y, M, r0, std::min(rows, r0 + 64));
}
inline void matmul_tn_features(const FeatureView &f, SparseFeatureBlocks &blocks, const float *G, idx_t M,
                               float *dW) {
    switch (f.kind) {
        case FeatureKind::Dense: matmul_tn(f.dense, f.rows, f.cols, G, M, dW); break;
        case FeatureKind::Csr:
            check(sparse_weight_grad(blocks, G, M, dW, false, feature_dropout(f)), "sparse feature weight gradient");
            break;
        case FeatureKind::Identity: std::memcpy(dW, G, sizeof(float) * size_t(f.rows * M)); break;
        default: throw Error("features are not set");
    }
}

// Stored feature values: what the kernels stream per pass (reported by the timers).
inline int64_t feature_values(const FeatureView &f) {
    switch (f.kind) {
        case FeatureKind::Dense: return f.rows * f.cols;
        case FeatureKind::Csr: return f.indptr[f.rows];
        default: return 0;
    }
}
// Size of the buffer a dropout on the input needs: dense features are dropped into it, sparse
// ones need none (the mask is applied inside the sparse kernels).
inline int64_t dropped_feature_buffer(const FeatureView &f) {
    return f.kind == FeatureKind::Dense ? f.rows * f.cols : 0;
}
// Dropout on the input features keeps their format (context.h: dropout_feature_view).
inline void dropout_features(bool training, const FeatureView &in, FeatureView &out, float *values, float p,
                             uint64_t seed, uint64_t epoch, uint64_t site) {
    dropout_feature_view(training, in, out, values, p, seed, epoch, site, [&](float *dropped) {
        dropout_rows_fwd(in.dense, dropped, in.rows, in.cols, in.drop_row_ids, p, DropoutKey{seed, epoch, site});
    });
}

// Identity rows selected by idx through a weight: Y[r] = W[idx[r]] (optionally per type).
inline void embedding_rows(const float *W, const idx_t *type, const idx_t *idx, idx_t R, idx_t rows_per_type,
                           idx_t M, float *Y) {
    embedding_lookup_fwd(W, type, idx, R, rows_per_type, M, Y);
}
inline void embedding_rows_grad(const EmbeddingPlan &plan, const float *G, idx_t table_rows, idx_t M, float *dW) {
    embedding_lookup_bwd(G, plan.order.data(), plan.key_ptr.data(), plan.keys.data(), plan.unique, table_rows, M, dW);
}
// The same gradient with only the rows the lookups read written (plan.keys); the others are
// left as they were, for an optimizer that reads those rows only (adam_rows).
inline void embedding_rows_grad_rows(const EmbeddingPlan &plan, const float *G, idx_t M, float *dW) {
    embedding_lookup_bwd_rows(G, plan.order.data(), plan.key_ptr.data(), plan.keys.data(), plan.unique, M, dW);
}

// The lookups of a typed linear with bases on featureless input (typed_linear.h), grouped at load
// time by (row, type), in row order (row_start: each distinct row's first segment).
struct BasisLookupPlan {
    EmbeddingPlan by_row;
    std::vector<idx_t> row_start;
    idx_t types = 0;
    void build(const idx_t *type, const idx_t *rows, idx_t R, idx_t num_types, idx_t num_rows) {
        by_row.build(rows, type, R, num_rows, num_types);
        types = num_types;
        row_start.clear();
        for (idx_t k = 0; k < by_row.unique; ++k)
            if (k == 0 || by_row.keys[size_t(k)] / num_types != by_row.keys[size_t(k - 1)] / num_types)
                row_start.push_back(k);
        row_start.push_back(by_row.unique);
    }
    idx_t distinct_rows() const { return idx_t(row_start.size()) - 1; }
};
inline void basis_lookup(const BasisLookupPlan &plan, const float *A, const float *V, idx_t B, idx_t P, idx_t M,
                         float *Y) {
    const EmbeddingPlan &p = plan.by_row;
    basis_lookup_fwd(A, V, p.order.data(), p.key_ptr.data(), p.keys.data(), p.unique, plan.types, B, P, M, Y);
}
inline void basis_lookup_coef_grad(const BasisLookupPlan &plan, const float *V, const float *G, idx_t B, idx_t P,
                                   idx_t M, float *dA) {
    const EmbeddingPlan &p = plan.by_row;
    basis_lookup_coef_bwd(V, G, p.order.data(), p.key_ptr.data(), p.keys.data(), plan.row_start.data(),
                          plan.distinct_rows(), plan.types, B, P, M, dA);
}
inline void basis_lookup_bases_grad(const BasisLookupPlan &plan, const float *A, const float *G, idx_t B, idx_t P,
                                    idx_t M, float *dV) {
    const EmbeddingPlan &p = plan.by_row;
    basis_lookup_bases_bwd(A, G, p.order.data(), p.key_ptr.data(), p.keys.data(), plan.row_start.data(),
                           plan.distinct_rows(), plan.types, B, P, M, dV);
}

// ---- typed linear (Hector) -----------------------------------------------------------------------
// The epilogues: a per-type bias (HGT's h K[t] + bK[t]), an activation, a residual (the other
// operand of an add, the backward's sum of two input gradients), on each row as it is written.
inline void typed_linear(const TypeGroups &tg, const float *X, idx_t K, const float *W, idx_t M, float *Y,
                         const Epilogue &epi = Epilogue{}) {
    check(typed_linear_gather_fwd(X, W, Y, tg.perm.data(), tg.ptr.data(), tg.types, K, M, nullptr, nullptr, epi),
          "typed linear");
}
inline void typed_matmul_nt(const TypeGroups &tg, const float *G, idx_t M, const float *W, idx_t K, float *dX,
                            const Epilogue &epi = Epilogue{}) {
    check(typed_linear_gather_bwd(nullptr, W, G, tg.perm.data(), tg.ptr.data(), tg.types, K, M, dX, nullptr,
                                  nullptr, nullptr, epi),
          "typed linear input gradient");
}
inline void typed_matmul_tn(const TypeGroups &tg, const float *X, idx_t K, const float *G, idx_t M, float *dW) {
    check(typed_linear_gather_bwd(X, nullptr, G, tg.perm.data(), tg.ptr.data(), tg.types, K, M, nullptr, dW),
          "typed linear weight gradient");
}
// out[t] = sum of the rows of type t (typed_param's gradient).
inline void typed_row_sum(const TypeGroups &tg, const float *G, idx_t K, float *out) {
    segment_row_sums(tg.ptr.data(), tg.perm.data(), tg.types, G, K, out);
}

// ---- typed linear of node rows read at edge ends (kernels/edge_typed_linear.h) -------------------
using mg::EdgeTypedRows;
// The rows of a typed product of B diagonal blocks per type, grouped by type: block b of row r
// is row r*B + b of type type[r]*B + b (runtime/edge_rows.h), so the typed kernels run it one
// block wide over B times the rows.
inline void build_blocked_groups(TypeGroups &groups, const idx_t *type, idx_t rows, idx_t num_types, idx_t blocks) {
    std::vector<idx_t> type_b;
    expand_block_types(type, rows, blocks, type_b);
    groups.build(type_b.data(), rows * blocks, num_types * blocks);
}

// end: the node each edge reads (the CSR's sources, or Graph::edge_dst).  blocks: the product's
// weights are block diagonal, B blocks per type (runtime/edge_rows.h); the kernels then take K
// and M of one block.  far: the node at each edge's other end, where a gradient's node rows are
// read by gathered_row_sums (nullptr: none is).  store_rows: the forward products are stored
// one per row and read by index (EdgeRowLayout::store_rows); by_source: also by a traversal over
// the sources.
inline void build_edge_typed_rows(EdgeTypedRows &p, const idx_t *end, const idx_t *type, const GraphView &g,
                                  bool compact, idx_t blocks = 1, const idx_t *far = nullptr,
                                  bool store_rows = false, bool by_source = false) {
    check(p.build(end, type, g.num_edges, g.num_etypes, g.num_nodes, compact, blocks, far),
          "edge typed linear rows (a node or edge type index is out of range)");
    if (store_rows) p.layout.store_rows(by_source ? g.t_eid : nullptr);
}
// The product rows' sums of the edge gradient w[e] * G[far(e)], which is never stored; the
// gradients of the product then run with rows_summed (the emitter's plan_gathered_row_sums).
inline void gathered_row_sums(EdgeTypedRows &p, const float *G, const float *w, idx_t w_div, idx_t M) {
    check(mg::gathered_row_sums(p, G, w, w_div, M), "edge typed linear gradient rows");
}
// stored: Y holds the products by row, read through the layout's edge_row (store_rows).
inline void edge_typed_linear(EdgeTypedRows &p, const float *X, idx_t K, const float *W, idx_t M, float *Y,
                              bool stored = false) {
    check(edge_typed_linear_fwd(p, X, K, W, M, Y, stored), "edge typed linear");
}
// rows_summed: the other gradient of the same product ran just before and left G's row sums
// (the emitter's plan_edge_typed_row_sums).
inline void edge_typed_linear_input_grad(EdgeTypedRows &p, const float *G, idx_t M, const float *W, idx_t K,
                                         float *dX, bool rows_summed = false) {
    check(edge_typed_linear_input_bwd(p, G, M, W, K, dX, rows_summed), "edge typed linear input gradient");
}
inline void edge_typed_linear_weight_grad(EdgeTypedRows &p, const float *X, idx_t K, const float *G, idx_t M,
                                          float *dW, bool rows_summed = false) {
    check(edge_typed_linear_weight_bwd(p, X, K, G, M, dW, rows_summed), "edge typed linear weight gradient");
}

// The same two products with x the input features, dense or CSR (never an N x F copy of CSR rows).
inline void edge_typed_linear_features(EdgeTypedRows &p, const FeatureView &f, const float *W, idx_t M, float *Y,
                                       bool stored = false) {
    if (f.kind == FeatureKind::Dense) return edge_typed_linear(p, f.dense, f.cols, W, M, Y, stored);
    if (f.kind != FeatureKind::Csr || f.drop_p != 0.f) throw Error("edge typed linear: features must be stored rows");
    check(edge_typed_linear_csr_fwd(p, f.indptr, f.indices, f.data, f.cols, W, M, Y, stored),
          "edge typed linear (sparse features)");
}
inline void edge_typed_linear_weight_grad_features(EdgeTypedRows &p, const FeatureView &f, const float *G, idx_t M,
                                                   float *dW, bool rows_summed = false) {
    if (f.kind == FeatureKind::Dense) return edge_typed_linear_weight_grad(p, f.dense, f.cols, G, M, dW, rows_summed);
    if (f.kind != FeatureKind::Csr || f.drop_p != 0.f) throw Error("edge typed linear: features must be stored rows");
    check(edge_typed_linear_csr_weight_bwd(p, f.indptr, f.indices, f.data, f.cols, G, M, dW, rows_summed),
          "edge typed linear weight gradient (sparse features)");
}

// ---- parameter algebra introduced by passes (tiny: weights only) ----------------------------------
// out[t] = W[t] a[t] for T types of [K,M] weights (T = 1: untyped).
inline void matvec(const float *W, const float *a, idx_t T, idx_t K, idx_t M, float *out) {
    for (idx_t t = 0; t < T; ++t)
        for (idx_t k = 0; k < K; ++k) {
            float acc = 0.f;
            for (idx_t j = 0; j < M; ++j) acc += W[(t * K + k) * M + j] * a[t * M + j];
            out[t * K + k] = acc;
        }
}
inline void matvec_t(const float *W, const float *g, idx_t T, idx_t K, idx_t M, float *out) {
    for (idx_t t = 0; t < T; ++t)
        for (idx_t j = 0; j < M; ++j) {
            float acc = 0.f;
            for (idx_t k = 0; k < K; ++k) acc += W[(t * K + k) * M + j] * g[t * K + k];
            out[t * M + j] = acc;
        }
}
inline void outer(const float *g, const float *a, idx_t T, idx_t K, idx_t M, float *out) {
    for (idx_t t = 0; t < T; ++t)
        for (idx_t k = 0; k < K; ++k)
            for (idx_t j = 0; j < M; ++j) out[(t * K + k) * M + j] = g[t * K + k] * a[t * M + j];
}
// Stack row blocks [rows_i, M] into one [sum rows_i, M] array (the gradient of row views).
inline void row_concat(const float *const *parts, const idx_t *rows, int n, idx_t M, float *out) {
    for (int i = 0; i < n; ++i) {
        std::memcpy(out, parts[i], sizeof(float) * size_t(rows[i] * M));
        out += rows[i] * M;
    }
}

// ---- aggregation ----------------------------------------------------------------------------------
inline AggSpec agg_spec(const Graph &g, Reduce r, const float *edge_weight, bool gcn, bool self_loops) {
    AggSpec s;
    s.reduce = r;
    s.edge_weight = edge_weight;
    s.node_scale = gcn ? g.gcn_scale(self_loops) : nullptr;
    s.self_loop = self_loops;
    s.inv_count = r == Reduce::Mean ? g.inv_count(self_loops) : nullptr;
    return s;
}
// TILE: the feature tile of spmm.h, which the code generator widens for rows known to be wider
// than 32 (mg::spmm_tile_for: each neighbour list is then walked once per row instead of twice).
template <int TILE = MG_SPMM_TILE>
inline void aggregate(const Graph &g, const AggSpec &s, const float *X, idx_t F, float *Y, idx_t *argmax,
                      const Epilogue &epi = Epilogue{}) {
    const GraphView &v = *g.view;
    check(spmm<TILE>(v.num_nodes, v.indptr, v.col, X, F, F, Y, F, s, epi, argmax, F), "aggregate (spmm)");
}
// The aggregation of the listed rows only (the MPI backend's overlap with its halo exchange).
template <int TILE = MG_SPMM_TILE>
inline void aggregate_rows(const Graph &g, const AggSpec &s, const float *X, idx_t F, float *Y, idx_t *argmax,
                           const idx_t *rows, idx_t count, const Epilogue &epi = Epilogue{}) {
    const GraphView &v = *g.view;
    check(spmm_rows<TILE>(v.num_nodes, rows, count, v.indptr, v.col, X, F, F, Y, F, s, epi, argmax, F),
          "aggregate (spmm)");
}
template <int TILE = MG_SPMM_TILE>
inline void aggregate_transpose(const Graph &g, const AggSpec &s, const float *G, idx_t F, float *dX) {
    const GraphView &v = *g.view;
    check(spmm_transpose<TILE>(v.num_nodes, v.indptr, v.t_indptr, v.t_col, v.t_eid, G, F, F, dX, F, s),
          "transposed aggregate (spmm)");
}
inline void aggregate_max_grad(const Graph &g, const AggSpec &s, const idx_t *argmax, const float *G, idx_t F,
                               float *dX) {
    const GraphView &v = *g.view;
    check(spmm_max_backward(v.num_nodes, v.t_indptr, v.t_col, v.t_eid, argmax, F, G, F, F, dX, F, s),
          "max aggregate backward");
}

// ---- invariant values (computed once, when the data is bound) ---------------------------------------
// P = A X for dense input features X [N x F]: an aggregation of the inputs the training loop would
// otherwise repeat every epoch (passes/hoist_invariant.py).  In place -- the caller donated the
// buffer and nothing else reads the raw features -- P overwrites X a block of columns at a time
// through an N x block scratch, so it costs no second N x F array; otherwise P goes into `own`.
// The block is as wide as a scratch of at most 1/8 of X allows (16 to 64 columns): every block is
// one more pass over the graph, and on 14M edges x 602 columns 16-column blocks took 3.7 s.
inline const float *aggregate_features_once(const Graph &g, const AggSpec &s, const FeatureView &x, bool in_place,
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

// ---- graph constants (computed once at load time) ----------------------------------------------------
inline void in_degree(const Graph &g, float *out) {
    const GraphView &v = *g.view;
    for (idx_t n = 0; n < v.num_nodes; ++n) out[n] = float(v.indptr[n + 1] - v.indptr[n]);
}
inline void out_degree(const Graph &g, float *out) {
    const GraphView &v = *g.view;
    for (idx_t n = 0; n < v.num_nodes; ++n) out[n] = float(v.t_indptr[n + 1] - v.t_indptr[n]);
}
// R-GCN's c_{i,r}: for edge e into v of type r, the number of v's in-edges of type r.
inline void rel_degree(const Graph &g, float *out) {
    const GraphView &v = *g.view;
    const idx_t *type = g.etype();
#pragma omp parallel
    {
        std::vector<idx_t> seen;
#pragma omp for schedule(dynamic, 256)
        for (idx_t n = 0; n < v.num_nodes; ++n) {
            seen.assign(type + v.indptr[n], type + v.indptr[n + 1]);
            std::sort(seen.begin(), seen.end());
            for (idx_t e = v.indptr[n]; e < v.indptr[n + 1]; ++e) {
                auto range = std::equal_range(seen.begin(), seen.end(), type[e]);
                out[e] = float(range.second - range.first);
            }
        }
    }
}
inline void gcn_norm(const Graph &g, bool self_loops, float *out) {
    const float *s = g.gcn_scale(self_loops);
    const GraphView &v = *g.view;
    for (idx_t e = 0; e < v.num_edges; ++e) out[e] = s[v.col[e]] * s[g.edge_dst[size_t(e)]];
}
inline void mean_norm(const Graph &g, bool self_loops, float *out) {
    const GraphView &v = *g.view;
    for (idx_t e = 0; e < v.num_edges; ++e) {
        const idx_t d = g.edge_dst[size_t(e)];
        out[e] = 1.0f / float(v.indptr[d + 1] - v.indptr[d] + (self_loops ? 1 : 0));
    }
}

// ---- edges -----------------------------------------------------------------------------------------
inline void gather(const Graph &g, bool from_src, const float *X, idx_t F, float *out) {
    const GraphView &v = *g.view;
    if (from_src) gather_src(X, v.col, v.num_edges, F, out);
    else gather_dst(X, v.indptr, v.num_nodes, F, out);
}
inline void scatter(const Graph &g, bool to_dst, Reduce r, const float *m, idx_t F, float *out, idx_t *argmax) {
    const GraphView &v = *g.view;
    if (to_dst) scatter_dst(r, m, v.indptr, v.num_nodes, F, out, argmax);
    else scatter_src(r, m, v.t_indptr, v.t_eid, v.num_nodes, F, out, argmax, g.out_degree);
}
// scatter(sum) of gather(x) scaled by per-head edge weights w [E, H], the gather and the scatter at
// opposite ends (to_dst: x read at sources, summed at destinations; else the transpose).
inline void weighted_gather_scatter(const Graph &g, bool to_dst, const float *X, const float *w, idx_t H, idx_t D,
                                    float *out) {
    const GraphView &v = *g.view;
    if (to_dst) mg::weighted_gather_scatter(true, X, w, v.indptr, v.col, nullptr, v.num_nodes, H, D, out);
    else mg::weighted_gather_scatter(false, X, w, v.t_indptr, v.t_col, v.t_eid, v.num_nodes, H, D, out);
}
// The same sum of an edge value X [E, F] scaled by per-head edge weights (HGT's messages times
// their attention), each edge's row read where it lies: no head_mul pass, no [E, F] product.
// stored: X holds the rows of an edge typed linear stored by row (EdgeRowLayout::store_rows), each
// edge's read through its index.
inline void weighted_edge_scatter(const Graph &g, bool to_dst, const float *X, const float *w, idx_t H, idx_t D,
                                  float *out, const EdgeTypedRows *stored = nullptr) {
    const GraphView &v = *g.view;
    const idx_t *rows = !stored ? nullptr : to_dst ? stored->layout.edge_row.data() : stored->layout.edge_row_by_src.data();
    if (stored && !to_dst && stored->layout.edge_row_by_src.empty()) throw Error("edge rows by source were not built");
    if (to_dst) mg::weighted_gather_scatter(true, X, w, v.indptr, rows, nullptr, v.num_nodes, H, D, out);
    else mg::weighted_gather_scatter(false, X, w, v.t_indptr, rows, v.t_eid, v.num_nodes, H, D, out);
}
// Per-head dot of two node values read at an end of every edge (src when *_src).
inline void edge_dot(const Graph &g, const float *A, RowAt a_at, const float *B, RowAt b_at, idx_t H, idx_t D,
                     float *out) {
    const GraphView &v = *g.view;
    mg::edge_dot(A, a_at, B, b_at, v.indptr, v.col, v.num_nodes, H, D, out);
}
// The same with A an edge typed linear's products stored by row and B read at destinations: A's
// row of the edge at CSR position e is edge_row[e], which the kernel reads as it reads a source
// index (and fetches ahead as it fetches source rows).
inline void edge_dot_stored(const Graph &g, const EdgeTypedRows &stored, const float *A, const float *B, idx_t H,
                            idx_t D, float *out) {
    const GraphView &v = *g.view;
    mg::edge_dot(A, RowAt::Source, B, RowAt::Destination, v.indptr, stored.layout.edge_row.data(), v.num_nodes, H, D,
                 out);
}
// out = 1 / x: per-edge weights that traversals multiply by where the program divides by a graph
// constant (1 / e.rel_degree), computed once at load time.
inline void reciprocal(const float *x, float *out, idx_t n) {
    for (idx_t i = 0; i < n; ++i) out[i] = 1.0f / x[i];
}
// head_mul(gather(X), w): the gathered rows scaled per head, written once as an edge value.
inline void weighted_gather(const Graph &g, RowAt x_at, const float *X, const float *w, idx_t H, idx_t D,
                            float *out) {
    const GraphView &v = *g.view;
    mg::weighted_gather(x_at, X, w, v.indptr, v.col, v.num_nodes, H, D, out);
}
inline void scatter_max_grad(const Graph &g, bool to_dst, const float *G, idx_t F, const idx_t *argmax, float *gm) {
    const GraphView &v = *g.view;
    if (to_dst) scatter_dst_bwd(Reduce::Max, G, v.indptr, v.num_nodes, F, argmax, gm);
    else scatter_src_bwd(Reduce::Max, G, v.col, v.t_indptr, v.num_edges, F, argmax, gm);
}

// ---- elementwise ------------------------------------------------------------------------------------
enum class ActKind { Relu, LeakyRelu, Elu, Exp, Sigmoid, Tanh };

namespace detail {
template <class D>
inline void act_grad_loop(const float *G, const float *Y, idx_t n, float *dX, D d) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 15))
    for (idx_t i = 0; i < n; ++i) dX[i] = d(G[i], Y[i]);
}
// dX[i] = d(dropout_grad(G)[i], Y[i]), the mask regenerated from (base, thr) as dropout_bwd does.
template <class D>
inline void dropout_act_grad_loop(const float *G, const float *Y, idx_t rows, idx_t cols, const int64_t *row_ids,
                                  float *dX, uint64_t base, uint64_t thr, float s, D d) {
    dropout_detail::for_keep_rows(rows, cols, row_ids, base, thr, [&](int64_t i, const uint32_t *k, int64_t m) {
#pragma omp simd
        for (int64_t j = 0; j < m; ++j) dX[i + j] = d(keep_bits(k[j], G[i + j] * s), Y[i + j]);
    });}
// Calls run(d) with d(g, y) = g * act'(x), written with the forward output y: for alpha > 0,
// y > 0 exactly when x > 0, and for elu alpha * exp(x) = y + alpha on the negative side.  One
// loop per kind: a switch inside the loop keeps it from vectorising.
template <class Run>
inline void with_act_derivative(ActKind act, float alpha, Run run) {
    switch (act) {
        // select_bits, not `?:`: g is often computed in the loop (dropout's mask), see simd.h.
        case ActKind::Relu: run([](float g, float y) { return select_bits(y > 0.f, g, 0.f); }); break;
        case ActKind::LeakyRelu: run([alpha](float g, float y) { return select_bits(y > 0.f, g, alpha * g); }); break;
        case ActKind::Elu: run([alpha](float g, float y) { return select_bits(y > 0.f, g, g * (y + alpha)); }); break;
        case ActKind::Exp: run([](float g, float y) { return g * y; }); break;
        case ActKind::Sigmoid: run([](float g, float y) { return g * y * (1.f - y); }); break;
        default: run([](float g, float y) { return g * (1.f - y * y); }); break;
    }
}
}  // namespace detail

inline void act_grad(ActKind act, float alpha, const float *G, const float *Y, idx_t n, float *dX) {
    detail::with_act_derivative(act, alpha, [&](auto d) { detail::act_grad_loop(G, Y, n, dX, d); });
}
// The backward of `act -> dropout` in one pass: act_grad(dropout_grad(G), Y) without the
// intermediate array (bit-identical: every derivative maps a dropped 0 to 0).  A [rows, cols]
// value whose row r is row row_ids[r] of a larger one keys its mask as that one does
// (dropout_rows_fwd); row_ids == nullptr: rows * cols consecutive elements.
inline void dropout_act_grad_rows(ActKind act, float alpha, const float *G, const float *Y, idx_t rows, idx_t cols,
                                  const int64_t *row_ids, float p, uint64_t seed, uint64_t epoch, uint64_t site,
                                  float *dX) {
    if (p <= 0.f) return act_grad(act, alpha, G, Y, rows * cols, dX);
    const uint64_t base = dropout_detail::stream_base(DropoutKey{seed, epoch, site});
    const uint64_t thr = dropout_detail::drop_threshold(p);
    const float s = 1.0f / (1.0f - p);
    detail::with_act_derivative(act, alpha, [&](auto d) {
        detail::dropout_act_grad_loop(G, Y, rows, cols, row_ids, dX, base, thr, s, d);
    });
}
inline void dropout_act_grad(ActKind act, float alpha, const float *G, const float *Y, idx_t n, float p,
                             uint64_t seed, uint64_t epoch, uint64_t site, float *dX) {
    dropout_act_grad_rows(act, alpha, G, Y, n, 1, nullptr, p, seed, epoch, site, dX);
}
// out[r] = sum over the features of row r (a width-1 operand's gradient).
inline void feature_sum(const float *G, idx_t rows, idx_t F, float *out) {
#pragma omp parallel for schedule(static) if (rows * F > (1 << 15))
    for (idx_t r = 0; r < rows; ++r) {
        float acc = 0.f;
        for (idx_t f = 0; f < F; ++f) acc += G[r * F + f];
        out[r] = acc;
    }
}
// y = x (n values; x == y: nothing) -- the rows of a featureless input through its weight.
inline void copy(const float *x, float *y, idx_t n) {
    if (x != y && n > 0) std::memcpy(y, x, sizeof(float) * size_t(n));
}
inline void slice(const float *X, idx_t rows, idx_t cols, idx_t start, idx_t stop, float *Y) {
    slice_fwd(X, rows, cols, start, stop - start, Y);
}

// ---- dropout, loss, accuracy --------------------------------------------------------------------------
inline void dropout(bool training, const float *X, float *Y, idx_t n, float p, uint64_t seed, uint64_t epoch,
                    uint64_t site) {
    if (training && p > 0.f) dropout_fwd(X, Y, n, p, DropoutKey{seed, epoch, site});
    else if (X != Y) std::memcpy(Y, X, sizeof(float) * size_t(n));
}
inline void dropout_grad(const float *G, float *dX, idx_t n, float p, uint64_t seed, uint64_t epoch, uint64_t site) {
    if (p > 0.f) dropout_bwd(G, dX, n, p, DropoutKey{seed, epoch, site});
    else if (G != dX) std::memcpy(dX, G, sizeof(float) * size_t(n));
}
inline void cross_entropy(const float *logits, const int64_t *labels, const uint8_t *mask, idx_t rows, idx_t C,
                          float *loss) {
    loss[0] = softmax_cross_entropy(logits, labels, mask, rows, C, nullptr);
}
inline void cross_entropy_grad(const float *logits, const int64_t *labels, const uint8_t *mask, idx_t rows,
                               idx_t C, float *dlogits) {
    softmax_cross_entropy(logits, labels, mask, rows, C, dlogits);
}
// link prediction (kernels/link.h): the triples are the context's, set for each epoch
inline void link_loss(const float *z, idx_t rows, const float *R, idx_t rel_rows, idx_t H, const int64_t *triples,
                      idx_t count, float reg, float *loss) {
    require_triples(triples, count);
    loss[0] = distmult_loss(z, rows, R, rel_rows, H, triples, count, reg);
}
inline void link_loss_grad(const float *z, idx_t rows, const float *R, idx_t H, const int64_t *triples, idx_t count,
                           float reg, float *dz) {
    require_triples(triples, count);
    distmult_loss_grad(z, rows, R, 0, H, triples, count, reg, dz, nullptr);
}
inline void link_loss_rel_grad(const float *z, const float *R, idx_t rel_rows, idx_t H, const int64_t *triples,
                               idx_t count, float reg, float *dR) {
    require_triples(triples, count);
    distmult_loss_grad(z, 0, R, rel_rows, H, triples, count, reg, nullptr, dR);
}

inline double accuracy(const float *logits, const int64_t *labels, const uint8_t *mask, idx_t rows, idx_t C) {
    const int64_t n = mask_count(mask, rows);
    return n ? double(count_correct(logits, labels, mask, rows, C)) / double(n) : 0.0;
}

// ---- optimizers ------------------------------------------------------------------------------------
inline void adam(bool decoupled, float *p, const float *g, float *m, float *v, idx_t n, double lr, double b1,
                 double b2, double eps, double wd, int64_t step) {
    AdamConfig c{lr, b1, b2, eps, wd};
    if (decoupled) adamw_step(p, g, m, v, n, c, step);
    else adam_step(p, g, m, v, n, c, step);
}
// Adam / AdamW on a [rows, M] table whose gradient holds only plan.keys' rows (embedding_rows_grad_rows).
inline void adam_rows(bool decoupled, float *p, const float *g, float *m, float *v, idx_t rows, idx_t M,
                      const EmbeddingPlan &plan, double lr, double b1, double b2, double eps, double wd, int64_t step) {
    AdamConfig c{lr, b1, b2, eps, wd};
    adam_rows_step(p, g, m, v, rows, M, plan.keys.data(), plan.unique, c, step, decoupled);
}
inline void sgd(float *p, const float *g, float *buf, idx_t n, double lr, double momentum, double wd, int64_t step) {
    SgdConfig c;
    c.lr = lr;
    c.momentum = momentum;
    c.weight_decay = wd;
    sgd_step(p, g, buf, n, c, step);
}

}  // namespace op
}  // namespace mg
#endif
