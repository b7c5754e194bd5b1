// The OpenMP backend's op layer: one function per IR opcode (forward and backward), each a thin
// call into the kernel library of kernels/.  Generated code (templates/model.cpp.j2) calls only
// these functions, so the emitter stays a table from opcode to call and the kernels keep their
// own, more general signatures.  Shapes arrive as (rows, width) pairs; every array is row-major.
//
// This header declares the functions; ops.cpp defines them and is compiled once per compiler and
// flags into an object that every generated library links (toolchain.compile_shared's
// prebuilt_units), so a program's build compiles its own code, not the kernels again.  The kernel
// headers stay included here for the types the declarations and the generated code use, and for
// the few small kernels generated code calls directly (elementwise.h, math.h).
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
void set_threads(int threads);

// Dense products on the one pool (kernels/gemm.h: row blocks per OpenMP thread).
void gemm_rows(idx_t rows, idx_t N, idx_t K, const float *A, const float *B, bool trans_b, float *C,
               const Epilogue &epi = Epilogue{});
template <int WIDTH = 0>
void gemm_tn_rows(idx_t rows, idx_t K, idx_t M, const float *X, const float *G, float *dW);

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
    std::vector<float> weighted_scale_self, weighted_scale_plain;  // norm=gcn_weighted (build_weighted_gcn_scale)
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
    // GCN's scale 1/sqrt(d) with d the sum of the node's in-edge weights (+ 1 with the self loop):
    // norm=gcn_weighted, PyG's gcn_norm given edge weights.  weighted_in_degree: the sums, where
    // the CSR does not hold every in-edge of a row (a distributed rank's ghost rows).
    void build_weighted_gcn_scale(const float *weighted_in_degree = nullptr);
    const float *weighted_gcn_scale(bool self_loops) const {
        return self_loops ? weighted_scale_self.data() : weighted_scale_plain.data();
    }
    const float *inv_count(bool self_loops) const {
        return self_loops ? inv_count_self.data() : inv_count_plain.data();
    }
    int64_t bytes() const {
        return int64_t((edge_dst.size() + node_ids.size() + zero_etype.size() + zero_ntype.size()) * sizeof(idx_t) +
                       (gcn_scale_self.size() + gcn_scale_plain.size() + inv_count_self.size() +
                        inv_count_plain.size() + weighted_scale_self.size() + weighted_scale_plain.size()) *
                           sizeof(float)) +
               etypes.bytes() + ntypes.bytes();
    }
};

// The column-blocked copy of sparse input features (kernels/sparse_features.h), built once at
// prepare; both directions of every linear layer on the features run over it.
void build_feature_blocks(const FeatureView &f, SparseFeatureBlocks &blocks);

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
void linear(const float *X, idx_t rows, idx_t K, const float *W, idx_t M, float *Y,
            const Epilogue &epi = Epilogue{});
// dX = G W^T, then the epilogue (a residual: the other operand of an add, SAGE's backward).
void matmul_nt(const float *G, idx_t rows, idx_t M, const float *W, idx_t K, float *dX,
               const Epilogue &epi = Epilogue{});
// WIDTH: G's width where the generated code knows it and it is narrow (the emitter's
// narrow_tn_width), else 0.
template <int WIDTH = 0>
void matmul_tn(const float *X, idx_t rows, idx_t K, const float *G, idx_t M, float *dW);

// Input features through a weight: the dense path is a dense product (gemm_rows), the sparse path streams the
// blocked rows through W (Morphling IV-B), the identity is a copy of W.
FeatureDropout feature_dropout(const FeatureView &f);
// The epilogue (bias, activation, residual: SAGE's sum of its two products) runs inside the dense
// product; after the sparse blocks' product or the identity's copy, as one pass over Y.
void linear_features(const FeatureView &f, const SparseFeatureBlocks &blocks, const float *W, idx_t M,
                     float *Y, const Epilogue &epi = Epilogue{});
void matmul_tn_features(const FeatureView &f, SparseFeatureBlocks &blocks, const float *G, idx_t M,
                        float *dW);

// Stored feature values: what the kernels stream per pass (reported by the timers).
int64_t feature_values(const FeatureView &f);
// Size of the buffer a dropout on the input needs: dense features are dropped into it, sparse
// ones need none (the mask is applied inside the sparse kernels).
int64_t dropped_feature_buffer(const FeatureView &f);
// Dropout on the input features keeps their format (context.h: dropout_feature_view).
void dropout_features(bool training, const FeatureView &in, FeatureView &out, float *values, float p,
                      uint64_t seed, uint64_t epoch, uint64_t site);

// Identity rows selected by idx through a weight: Y[r] = W[idx[r]] (optionally per type).
void embedding_rows(const float *W, const idx_t *type, const idx_t *idx, idx_t R, idx_t rows_per_type,
                    idx_t M, float *Y);
void embedding_rows_grad(const EmbeddingPlan &plan, const float *G, idx_t table_rows, idx_t M, float *dW);
// The same gradient with only the rows the lookups read written (plan.keys); the others are
// left as they were, for an optimizer that reads those rows only (adam_rows).
void embedding_rows_grad_rows(const EmbeddingPlan &plan, const float *G, idx_t M, float *dW);

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
void basis_lookup(const BasisLookupPlan &plan, const float *A, const float *V, idx_t B, idx_t P, idx_t M,
                  float *Y);
void basis_lookup_coef_grad(const BasisLookupPlan &plan, const float *V, const float *G, idx_t B, idx_t P,
                            idx_t M, float *dA);
void basis_lookup_bases_grad(const BasisLookupPlan &plan, const float *A, const float *G, idx_t B, idx_t P,
                             idx_t M, float *dV);

// ---- typed linear (Hector) -----------------------------------------------------------------------
// The epilogues: a per-type bias (HGT's h K[t] + bK[t]), an activation, a residual (the other
// operand of an add, the backward's sum of two input gradients), on each row as it is written.
void typed_linear(const TypeGroups &tg, const float *X, idx_t K, const float *W, idx_t M, float *Y,
                  const Epilogue &epi = Epilogue{});
void typed_matmul_nt(const TypeGroups &tg, const float *G, idx_t M, const float *W, idx_t K, float *dX,
                     const Epilogue &epi = Epilogue{});
void typed_matmul_tn(const TypeGroups &tg, const float *X, idx_t K, const float *G, idx_t M, float *dW);
// out[t] = sum of the rows of type t (typed_param's gradient).
void typed_row_sum(const TypeGroups &tg, const float *G, idx_t K, float *out);

// The rows some masks select, as one group (a TypeGroups of one type).  The training rows: a weight
// or bias gradient whose G is zero on every other row (the cross entropy's gradient and what
// row-wise ops make of it: passes/train_rows.py) reads them alone.  The labelled rows (training,
// validation or test): an evaluation's logits.  `few`: at most a quarter of the rows; otherwise
// the plain kernels run, which are faster per row than the gathering ones.  Built once at load
// time from the masks.
struct MaskedRows {
    TypeGroups groups;
    bool few = false;
    idx_t count() const { return groups.ptr.empty() ? 0 : groups.ptr[1]; }
    int64_t bytes() const { return groups.bytes(); }
};
// The rows a kernel given `only` visits of `all` (the timers' cost): its rows when few, else all.
inline idx_t visited_rows(const MaskedRows *only, idx_t all) {
    return only && only->few ? only->count() : all;
}
// The rows where any of the masks given (null: none) is set.
void build_masked_rows(MaskedRows &out, idx_t rows, const uint8_t *a, const uint8_t *b = nullptr,
                       const uint8_t *c = nullptr);
// dW = X^T G and out = the sum of G's rows over the training rows (G zero elsewhere).
template <int WIDTH = 0>
void matmul_tn_train_rows(const MaskedRows &train, const float *X, idx_t rows, idx_t K, const float *G, idx_t M,
                          float *dW);
void row_sum_train_rows(const MaskedRows &train, const float *G, idx_t rows, idx_t M, float *out);
// Y = X W, then the epilogue, on the given rows alone when there are few (the other rows left as
// they are); on every row when `only` is null: the logits, which only the loss reads in a training
// epoch (its training rows) and the accuracies in an evaluation (the labelled rows).
void linear_masked_rows(const MaskedRows *only, const float *X, idx_t rows, idx_t K, const float *W, idx_t M,
                       float *Y, const Epilogue &epi = Epilogue{});
// The cross entropy over the training mask visiting the training rows alone when they are few; its
// gradient written on those rows alone (the others left as they are: for a gradient whose
// readers all reduce over the training rows).
void cross_entropy_train_rows(const MaskedRows &train, const float *logits, const int64_t *labels, const uint8_t *mask,
                              idx_t rows, idx_t C, float *loss);
void cross_entropy_grad_train_rows(const MaskedRows &train, const float *logits, const int64_t *labels,
                                   const uint8_t *mask, idx_t rows, idx_t C, float *dlogits);

// ---- typed linear of node rows read at edge ends (kernels/edge_typed_linear.h) -------------------
using mg::EdgeTypedRows;
// The rows of a typed product of B diagonal blocks per type, grouped by type: block b of row r
// is row r*B + b of type type[r]*B + b (runtime/edge_rows.h), so the typed kernels run it one
// block wide over B times the rows.
void build_blocked_groups(TypeGroups &groups, const idx_t *type, idx_t rows, idx_t num_types, idx_t blocks);

// end: the node each edge reads (the CSR's sources, or Graph::edge_dst).  blocks: the product's
// weights are block diagonal, B blocks per type (runtime/edge_rows.h); the kernels then take K
// and M of one block.  far: the node at each edge's other end, where a gradient's node rows are
// read by gathered_row_sums (nullptr: none is).  store_rows: the forward products are stored
// one per row and read by index (EdgeRowLayout::store_rows); by_source: also by a traversal over
// the sources.
void build_edge_typed_rows(EdgeTypedRows &p, const idx_t *end, const idx_t *type, const GraphView &g,
                           bool compact, idx_t blocks = 1, const idx_t *far = nullptr,
                           bool store_rows = false, bool by_source = false);
// The product rows' sums of the edge gradient w[e] * G[far(e)], which is never stored; the
// gradients of the product then run with rows_summed (the emitter's plan_gathered_row_sums).
void gathered_row_sums(EdgeTypedRows &p, const float *G, const float *w, idx_t w_div, idx_t M);
// stored: Y holds the products by row, read through the layout's edge_row (store_rows).
void edge_typed_linear(EdgeTypedRows &p, const float *X, idx_t K, const float *W, idx_t M, float *Y,
                       bool stored = false);
// rows_summed: the other gradient of the same product ran just before and left G's row sums
// (the emitter's plan_edge_typed_row_sums).
void edge_typed_linear_input_grad(EdgeTypedRows &p, const float *G, idx_t M, const float *W, idx_t K,
                                  float *dX, bool rows_summed = false);
void edge_typed_linear_weight_grad(EdgeTypedRows &p, const float *X, idx_t K, const float *G, idx_t M,
                                   float *dW, bool rows_summed = false);

// The same two products with x the input features, dense or CSR (never an N x F copy of CSR rows).
void edge_typed_linear_features(EdgeTypedRows &p, const FeatureView &f, const float *W, idx_t M, float *Y,
                                bool stored = false);
void edge_typed_linear_weight_grad_features(EdgeTypedRows &p, const FeatureView &f, const float *G, idx_t M,
                                            float *dW, bool rows_summed = false);

// ---- parameter algebra introduced by passes (tiny: weights only) ----------------------------------
// out[t] = W[t] a[t] for T types of [K,M] weights (T = 1: untyped).
void matvec(const float *W, const float *a, idx_t T, idx_t K, idx_t M, float *out);
void matvec_t(const float *W, const float *g, idx_t T, idx_t K, idx_t M, float *out);
void outer(const float *g, const float *a, idx_t T, idx_t K, idx_t M, float *out);
// Stack row blocks [rows_i, M] into one [sum rows_i, M] array (the gradient of row views).
void row_concat(const float *const *parts, const idx_t *rows, int n, idx_t M, float *out);

// ---- aggregation ----------------------------------------------------------------------------------
// norm: AggNorm (none, GCN's in-degree scale, the weighted degrees' scale, or the program's own
// scale: node_scale, one float per node row, read at both ends of every edge)
enum AggNorm : int { kNormNone = 0, kNormGcn = 1, kNormGcnWeighted = 2, kNormNodeScale = 3 };
AggSpec agg_spec(const Graph &g, Reduce r, const float *edge_weight, int norm, bool self_loops,
                 const float *node_scale = nullptr);
// The sums of the first `rows` rows' in-edge weights (g.weight must be set).
void weighted_in_degrees(const GraphView &g, idx_t rows, float *out);
// TILE: the feature tile of spmm.h, which the code generator widens for rows known to be wider
// than 32 (mg::spmm_tile_for: each neighbour list is then walked once per row instead of twice).
template <int TILE = MG_SPMM_TILE>
void aggregate(const Graph &g, const AggSpec &s, const float *X, idx_t F, float *Y, idx_t *argmax,
               const Epilogue &epi = Epilogue{});
// The aggregation of the listed rows only (the MPI backend's overlap with its halo exchange).
template <int TILE = MG_SPMM_TILE>
void aggregate_rows(const Graph &g, const AggSpec &s, const float *X, idx_t F, float *Y, idx_t *argmax,
                    const idx_t *rows, idx_t count, const Epilogue &epi = Epilogue{});
// The aggregation of the rows `only` lists when they are few (MaskedRows: the logits of a
// training epoch or an evaluation), else of every row.
template <int TILE = MG_SPMM_TILE>
void aggregate_masked_rows(const MaskedRows *only, const Graph &g, const AggSpec &s, const float *X, idx_t F,
                           float *Y, idx_t *argmax, const Epilogue &epi = Epilogue{});
template <int TILE = MG_SPMM_TILE>
void aggregate_transpose(const Graph &g, const AggSpec &s, const float *G, idx_t F, float *dX);
void aggregate_max_grad(const Graph &g, const AggSpec &s, const idx_t *argmax, const float *G, idx_t F,
                        float *dX);

// ---- invariant values (computed once, when the data is bound) ---------------------------------------
// P = A X for dense input features X [N x F]: an aggregation of the inputs the training loop would
// otherwise repeat every epoch (passes/hoist_invariant.py).  In place -- the caller donated the
// buffer and nothing else reads the raw features -- P overwrites X a block of columns at a time
// through an N x block scratch, so it costs no second N x F array; otherwise P goes into `own`.
// The block is as wide as a scratch of at most 1/8 of X allows (16 to 64 columns): every block is
// one more pass over the graph, and on 14M edges x 602 columns 16-column blocks took 3.7 s.
const float *aggregate_features_once(const Graph &g, const AggSpec &s, const FeatureView &x, bool in_place,
                                     Buffer &own, int64_t &accounted);

// ---- graph constants (computed once at load time) ----------------------------------------------------
void in_degree(const Graph &g, float *out);
void out_degree(const Graph &g, float *out);
// R-GCN's c_{i,r}: for edge e into v of type r, the number of v's in-edges of type r.
void rel_degree(const Graph &g, float *out);
// The dataset's edge weights (e.edge_weight), in the edge order of every per-edge value.
void edge_weight(const Graph &g, float *out);
void gcn_norm(const Graph &g, bool self_loops, float *out);
void mean_norm(const Graph &g, bool self_loops, float *out);

// ---- edges -----------------------------------------------------------------------------------------
void gather(const Graph &g, bool from_src, const float *X, idx_t F, float *out);
void scatter(const Graph &g, bool to_dst, Reduce r, const float *m, idx_t F, float *out, idx_t *argmax);
// scatter(sum) of gather(x) scaled by per-head edge weights w [E, H], the gather and the scatter at
// opposite ends (to_dst: x read at sources, summed at destinations; else the transpose).
void weighted_gather_scatter(const Graph &g, bool to_dst, const float *X, const float *w, idx_t H, idx_t D,
                             float *out);
// The same sum of an edge value X [E, F] scaled by per-head edge weights (HGT's messages times
// their attention), each edge's row read where it lies: no head_mul pass, no [E, F] product.
// stored: X holds the rows of an edge typed linear stored by row (EdgeRowLayout::store_rows), each
// edge's read through its index.
void weighted_edge_scatter(const Graph &g, bool to_dst, const float *X, const float *w, idx_t H, idx_t D,
                           float *out, const EdgeTypedRows *stored = nullptr);
// Per-head dot of two node values read at an end of every edge (src when *_src).
void edge_dot(const Graph &g, const float *A, RowAt a_at, const float *B, RowAt b_at, idx_t H, idx_t D,
              float *out);
// The same with A an edge typed linear's products stored by row and B read at destinations: A's
// row of the edge at CSR position e is edge_row[e], which the kernel reads as it reads a source
// index (and fetches ahead as it fetches source rows).
void edge_dot_stored(const Graph &g, const EdgeTypedRows &stored, const float *A, const float *B, idx_t H,
                     idx_t D, float *out);
// out = 1 / x: per-edge weights that traversals multiply by where the program divides by a graph
// constant (1 / e.rel_degree), computed once at load time.
void reciprocal(const float *x, float *out, idx_t n);
// head_mul(gather(X), w): the gathered rows scaled per head, written once as an edge value.
void weighted_gather(const Graph &g, RowAt x_at, const float *X, const float *w, idx_t H, idx_t D,
                     float *out);
void scatter_max_grad(const Graph &g, bool to_dst, const float *G, idx_t F, const idx_t *argmax, float *gm);

// ---- elementwise ------------------------------------------------------------------------------------
enum class ActKind { Relu, LeakyRelu, Elu, Exp, Sigmoid, Tanh };

// dX = G * act'(x), the derivative written with the forward output Y (ops.cpp: with_act_derivative).
void act_grad(ActKind act, float alpha, const float *G, const float *Y, idx_t n, float *dX);
// The backward of `act -> dropout` in one pass: act_grad(dropout_grad(G), Y) without the
// intermediate array (bit-identical: every derivative maps a dropped 0 to 0).  A [rows, cols]
// value whose row r is row row_ids[r] of a larger one keys its mask as that one does
// (dropout_rows_fwd); row_ids == nullptr: rows * cols consecutive elements.
void dropout_act_grad_rows(ActKind act, float alpha, const float *G, const float *Y, idx_t rows, idx_t cols,
                           const int64_t *row_ids, float p, uint64_t seed, uint64_t epoch, uint64_t site,
                           float *dX);
void dropout_act_grad(ActKind act, float alpha, const float *G, const float *Y, idx_t n, float p,
                      uint64_t seed, uint64_t epoch, uint64_t site, float *dX);
// out[r] = sum over the features of row r (a width-1 operand's gradient).
void feature_sum(const float *G, idx_t rows, idx_t F, float *out);
// y = x (n values; x == y: nothing) -- the rows of a featureless input through its weight.
void copy(const float *x, float *y, idx_t n);
void slice(const float *X, idx_t rows, idx_t cols, idx_t start, idx_t stop, float *Y);

// ---- dropout, loss, accuracy --------------------------------------------------------------------------
void dropout(bool training, const float *X, float *Y, idx_t n, float p, uint64_t seed, uint64_t epoch,
             uint64_t site);
void dropout_grad(const float *G, float *dX, idx_t n, float p, uint64_t seed, uint64_t epoch, uint64_t site);
void cross_entropy(const float *logits, const int64_t *labels, const uint8_t *mask, idx_t rows, idx_t C,
                   float *loss);
void cross_entropy_grad(const float *logits, const int64_t *labels, const uint8_t *mask, idx_t rows,
                        idx_t C, float *dlogits);
// link prediction (kernels/link.h): the triples are the context's, set for each epoch
void link_loss(const float *z, idx_t rows, const float *R, idx_t rel_rows, idx_t H, const int64_t *triples,
               idx_t count, float reg, float *loss);
void link_loss_grad(const float *z, idx_t rows, const float *R, idx_t H, const int64_t *triples, idx_t count,
                    float reg, float *dz);
void link_loss_rel_grad(const float *z, const float *R, idx_t rel_rows, idx_t H, const int64_t *triples,
                        idx_t count, float reg, float *dR);

double accuracy(const float *logits, const int64_t *labels, const uint8_t *mask, idx_t rows, idx_t C);

// ---- optimizers ------------------------------------------------------------------------------------
void adam(bool decoupled, float *p, const float *g, float *m, float *v, idx_t n, double lr, double b1,
          double b2, double eps, double wd, int64_t step);
// Adam / AdamW on a [rows, M] table whose gradient holds only plan.keys' rows (embedding_rows_grad_rows).
void adam_rows(bool decoupled, float *p, const float *g, float *m, float *v, idx_t rows, idx_t M,
               const EmbeddingPlan &plan, double lr, double b1, double b2, double eps, double wd, int64_t step);
void sgd(float *p, const float *g, float *buf, idx_t n, double lr, double momentum, double wd, int64_t step);

}  // namespace op
}  // namespace mg
#endif
