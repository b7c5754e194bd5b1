// The OpenMP backend's op layer, compiled once: the definitions of what ops.h declares.
//
// Generated code includes only ops.h and calls these functions; the toolchain compiles this file
// once per compiler and flags into an object that every generated library links
// (toolchain.compile_shared's `prebuilt_units`); the aggregations are in ops_aggregate.cpp, a
// second unit that compiles alongside this one.  The kernels behind the op layer are most of a
// library's machine code -- SpMM alone is instantiated for every tile, reduction and coefficient
// kind -- so a program's own source compiles in a fraction of the time it took when each program
// instantiated them again.
#include "ops.h"

namespace mg {
namespace op {

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

void set_threads(int threads) {
    omp_set_num_threads(threads);
    blas_set_threads(1);
}

void gemm_rows(idx_t rows, idx_t N, idx_t K, const float *A, const float *B, bool trans_b, float *C,
               const Epilogue &epi) {
    check(mg::gemm_rows(rows, N, K, A, B, trans_b, C, epi), "dense product (a dimension exceeds the BLAS interface)");
}

template <int WIDTH>
void gemm_tn_rows(idx_t rows, idx_t K, idx_t M, const float *X, const float *G, float *dW) {
    check(mg::gemm_tn_rows<WIDTH>(rows, K, M, X, G, dW),
          "dense weight gradient (a dimension exceeds the BLAS interface)");
}

void build_feature_blocks(const FeatureView &f, SparseFeatureBlocks &blocks) {
    if (f.kind != FeatureKind::Csr) return;
    check(build_feature_blocks(f.rows, f.cols, f.indptr, f.indices, f.data, feature_block_cols(), blocks),
          "sparse features (a row pointer decreases or a column index is out of range)");
}

void linear(const float *X, idx_t rows, idx_t K, const float *W, idx_t M, float *Y,
            const Epilogue &epi) {
    op::gemm_rows(rows, M, K, X, W, false, Y, epi);     // op::, not mg:: found through Epilogue
}

void matmul_nt(const float *G, idx_t rows, idx_t M, const float *W, idx_t K, float *dX,
               const Epilogue &epi) {
    op::gemm_rows(rows, K, M, G, W, true, dX, epi);
}

template <int WIDTH>
void matmul_tn(const float *X, idx_t rows, idx_t K, const float *G, idx_t M, float *dW) {
    gemm_tn_rows<WIDTH>(rows, K, M, X, G, dW);
}

FeatureDropout feature_dropout(const FeatureView &f) {
    return FeatureDropout{f.drop_p, DropoutKey{f.drop_seed, f.drop_epoch, f.drop_site}, f.drop_row_ids};
}

void linear_features(const FeatureView &f, const SparseFeatureBlocks &blocks, const float *W, idx_t M,
                     float *Y, const Epilogue &epi) {
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

void matmul_tn_features(const FeatureView &f, SparseFeatureBlocks &blocks, const float *G, idx_t M,
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

int64_t feature_values(const FeatureView &f) {
    switch (f.kind) {
        case FeatureKind::Dense: return f.rows * f.cols;
        case FeatureKind::Csr: return f.indptr[f.rows];
        default: return 0;
    }
}

int64_t dropped_feature_buffer(const FeatureView &f) {
    return f.kind == FeatureKind::Dense ? f.rows * f.cols : 0;
}

void dropout_features(bool training, const FeatureView &in, FeatureView &out, float *values, float p,
                      uint64_t seed, uint64_t epoch, uint64_t site) {
    dropout_feature_view(training, in, out, values, p, seed, epoch, site, [&](float *dropped) {
        dropout_rows_fwd(in.dense, dropped, in.rows, in.cols, in.drop_row_ids, p, DropoutKey{seed, epoch, site});
    });
}

void embedding_rows(const float *W, const idx_t *type, const idx_t *idx, idx_t R, idx_t rows_per_type,
                    idx_t M, float *Y) {
    embedding_lookup_fwd(W, type, idx, R, rows_per_type, M, Y);
}

void embedding_rows_grad(const EmbeddingPlan &plan, const float *G, idx_t table_rows, idx_t M, float *dW) {
    embedding_lookup_bwd(G, plan.order.data(), plan.key_ptr.data(), plan.keys.data(), plan.unique, table_rows, M, dW);
}

void embedding_rows_grad_rows(const EmbeddingPlan &plan, const float *G, idx_t M, float *dW) {
    embedding_lookup_bwd_rows(G, plan.order.data(), plan.key_ptr.data(), plan.keys.data(), plan.unique, M, dW);
}

void basis_lookup(const BasisLookupPlan &plan, const float *A, const float *V, idx_t B, idx_t P, idx_t M,
                  float *Y) {
    const EmbeddingPlan &p = plan.by_row;
    basis_lookup_fwd(A, V, p.order.data(), p.key_ptr.data(), p.keys.data(), p.unique, plan.types, B, P, M, Y);
}

void basis_lookup_coef_grad(const BasisLookupPlan &plan, const float *V, const float *G, idx_t B, idx_t P,
                            idx_t M, float *dA) {
    const EmbeddingPlan &p = plan.by_row;
    basis_lookup_coef_bwd(V, G, p.order.data(), p.key_ptr.data(), p.keys.data(), plan.row_start.data(),
                          plan.distinct_rows(), plan.types, B, P, M, dA);
}

void basis_lookup_bases_grad(const BasisLookupPlan &plan, const float *A, const float *G, idx_t B, idx_t P,
                             idx_t M, float *dV) {
    const EmbeddingPlan &p = plan.by_row;
    basis_lookup_bases_bwd(A, G, p.order.data(), p.key_ptr.data(), p.keys.data(), plan.row_start.data(),
                           plan.distinct_rows(), plan.types, B, P, M, dV);
}

void typed_linear(const TypeGroups &tg, const float *X, idx_t K, const float *W, idx_t M, float *Y,
                  const Epilogue &epi) {
    check(typed_linear_gather_fwd(X, W, Y, tg.perm.data(), tg.ptr.data(), tg.types, K, M, nullptr, nullptr, epi),
          "typed linear");
}

void typed_matmul_nt(const TypeGroups &tg, const float *G, idx_t M, const float *W, idx_t K, float *dX,
                     const Epilogue &epi) {
    check(typed_linear_gather_bwd(nullptr, W, G, tg.perm.data(), tg.ptr.data(), tg.types, K, M, dX, nullptr,
                                  nullptr, nullptr, epi),
          "typed linear input gradient");
}

void typed_matmul_tn(const TypeGroups &tg, const float *X, idx_t K, const float *G, idx_t M, float *dW) {
    check(typed_linear_gather_bwd(X, nullptr, G, tg.perm.data(), tg.ptr.data(), tg.types, K, M, nullptr, dW),
          "typed linear weight gradient");
}

void typed_row_sum(const TypeGroups &tg, const float *G, idx_t K, float *out) {
    segment_row_sums(tg.ptr.data(), tg.perm.data(), tg.types, G, K, out);
}

void build_masked_rows(MaskedRows &out, idx_t rows, const uint8_t *a, const uint8_t *b, const uint8_t *c) {
    std::vector<idx_t> selected;
    for (idx_t r = 0; r < rows; ++r)
        if ((a && a[r]) || (b && b[r]) || (c && c[r])) selected.push_back(r);
    TypeGroups &g = out.groups;
    g.types = 1;
    g.perm = std::move(selected);
    g.ptr = {0, idx_t(g.perm.size())};
    out.few = 4 * out.count() <= rows;
}

template <int WIDTH>
void matmul_tn_train_rows(const MaskedRows &train, const float *X, idx_t rows, idx_t K, const float *G, idx_t M,
                          float *dW) {
    if (!train.few) return matmul_tn<WIDTH>(X, rows, K, G, M, dW);
    typed_matmul_tn(train.groups, X, K, G, M, dW);
}

void row_sum_train_rows(const MaskedRows &train, const float *G, idx_t rows, idx_t M, float *out) {
    if (!train.few) return mg::row_sum(G, out, rows, M);
    typed_row_sum(train.groups, G, M, out);
}

void linear_masked_rows(const MaskedRows *only, const float *X, idx_t rows, idx_t K, const float *W, idx_t M,
                        float *Y, const Epilogue &epi) {
    if (!only || !only->few) return linear(X, rows, K, W, M, Y, epi);
    typed_linear(only->groups, X, K, W, M, Y, epi);
}

void build_blocked_groups(TypeGroups &groups, const idx_t *type, idx_t rows, idx_t num_types, idx_t blocks) {
    std::vector<idx_t> type_b;
    expand_block_types(type, rows, blocks, type_b);
    groups.build(type_b.data(), rows * blocks, num_types * blocks);
}

void build_edge_typed_rows(EdgeTypedRows &p, const idx_t *end, const idx_t *type, const GraphView &g,
                           bool compact, idx_t blocks, const idx_t *far,
                           bool store_rows, bool by_source) {
    check(p.build(end, type, g.num_edges, g.num_etypes, g.num_nodes, compact, blocks, far),
          "edge typed linear rows (a node or edge type index is out of range)");
    if (store_rows) p.layout.store_rows(by_source ? g.t_eid : nullptr);
}

void gathered_row_sums(EdgeTypedRows &p, const float *G, const float *w, idx_t w_div, idx_t M) {
    check(mg::gathered_row_sums(p, G, w, w_div, M), "edge typed linear gradient rows");
}

void edge_typed_linear(EdgeTypedRows &p, const float *X, idx_t K, const float *W, idx_t M, float *Y,
                       bool stored) {
    check(edge_typed_linear_fwd(p, X, K, W, M, Y, stored), "edge typed linear");
}

void edge_typed_linear_input_grad(EdgeTypedRows &p, const float *G, idx_t M, const float *W, idx_t K,
                                  float *dX, bool rows_summed) {
    check(edge_typed_linear_input_bwd(p, G, M, W, K, dX, rows_summed), "edge typed linear input gradient");
}

void edge_typed_linear_weight_grad(EdgeTypedRows &p, const float *X, idx_t K, const float *G, idx_t M,
                                   float *dW, bool rows_summed) {
    check(edge_typed_linear_weight_bwd(p, X, K, G, M, dW, rows_summed), "edge typed linear weight gradient");
}

void edge_typed_linear_features(EdgeTypedRows &p, const FeatureView &f, const float *W, idx_t M, float *Y,
                                bool stored) {
    if (f.kind == FeatureKind::Dense) return edge_typed_linear(p, f.dense, f.cols, W, M, Y, stored);
    if (f.kind != FeatureKind::Csr || f.drop_p != 0.f) throw Error("edge typed linear: features must be stored rows");
    check(edge_typed_linear_csr_fwd(p, f.indptr, f.indices, f.data, f.cols, W, M, Y, stored),
          "edge typed linear (sparse features)");
}

void edge_typed_linear_weight_grad_features(EdgeTypedRows &p, const FeatureView &f, const float *G, idx_t M,
                                            float *dW, bool rows_summed) {
    if (f.kind == FeatureKind::Dense) return edge_typed_linear_weight_grad(p, f.dense, f.cols, G, M, dW, rows_summed);
    if (f.kind != FeatureKind::Csr || f.drop_p != 0.f) throw Error("edge typed linear: features must be stored rows");
    check(edge_typed_linear_csr_weight_bwd(p, f.indptr, f.indices, f.data, f.cols, G, M, dW, rows_summed),
          "edge typed linear weight gradient (sparse features)");
}

void matvec(const float *W, const float *a, idx_t T, idx_t K, idx_t M, float *out) {
    for (idx_t t = 0; t < T; ++t)
        for (idx_t k = 0; k < K; ++k) {
            float acc = 0.f;
            for (idx_t j = 0; j < M; ++j) acc += W[(t * K + k) * M + j] * a[t * M + j];
            out[t * K + k] = acc;
        }
}

void matvec_t(const float *W, const float *g, idx_t T, idx_t K, idx_t M, float *out) {
    for (idx_t t = 0; t < T; ++t)
        for (idx_t j = 0; j < M; ++j) {
            float acc = 0.f;
            for (idx_t k = 0; k < K; ++k) acc += W[(t * K + k) * M + j] * g[t * K + k];
            out[t * M + j] = acc;
        }
}

void outer(const float *g, const float *a, idx_t T, idx_t K, idx_t M, float *out) {
    for (idx_t t = 0; t < T; ++t)
        for (idx_t k = 0; k < K; ++k)
            for (idx_t j = 0; j < M; ++j) out[(t * K + k) * M + j] = g[t * K + k] * a[t * M + j];
}

void row_concat(const float *const *parts, const idx_t *rows, int n, idx_t M, float *out) {
    for (int i = 0; i < n; ++i) {
        std::memcpy(out, parts[i], sizeof(float) * size_t(rows[i] * M));
        out += rows[i] * M;
    }
}

void weighted_in_degrees(const GraphView &g, idx_t rows, float *out) {
#pragma omp parallel for schedule(static)
    for (idx_t v = 0; v < rows; ++v) {
        float sum = 0.0f;
        for (idx_t e = g.indptr[v]; e < g.indptr[v + 1]; ++e) sum += g.weight[e];
        out[v] = sum;
    }
}

void Graph::build_weighted_gcn_scale(const float *weighted_in_degree) {
    const GraphView &g = *view;
    if (!g.weight) throw Error("the program's GCN layers weigh their edges, but the graph has no edge weights");
    std::vector<float> sums;
    if (!weighted_in_degree) {
        sums.resize(size_t(g.num_nodes));
        weighted_in_degrees(g, g.num_nodes, sums.data());
        weighted_in_degree = sums.data();
    }
    for (bool self : {true, false}) {
        std::vector<float> &scale = self ? weighted_scale_self : weighted_scale_plain;
        scale.resize(size_t(g.num_nodes));
        gcn_node_scale(g.num_nodes, g.indptr, self, scale.data(), weighted_in_degree);
    }
}

AggSpec agg_spec(const Graph &g, Reduce r, const float *edge_weight, int norm, bool self_loops,
                 const float *node_scale) {
    AggSpec s;
    s.reduce = r;
    s.edge_weight = edge_weight;
    s.node_scale = norm == kNormGcn           ? g.gcn_scale(self_loops)
                   : norm == kNormGcnWeighted ? g.weighted_gcn_scale(self_loops)
                   : norm == kNormNodeScale   ? node_scale
                                              : nullptr;
    s.self_loop = self_loops;
    s.inv_count = r == Reduce::Mean ? g.inv_count(self_loops) : nullptr;
    return s;
}

void in_degree(const Graph &g, float *out) {
    const GraphView &v = *g.view;
    for (idx_t n = 0; n < v.num_nodes; ++n) out[n] = float(v.indptr[n + 1] - v.indptr[n]);
}

void out_degree(const Graph &g, float *out) {
    const GraphView &v = *g.view;
    for (idx_t n = 0; n < v.num_nodes; ++n) out[n] = float(v.t_indptr[n + 1] - v.t_indptr[n]);
}

void rel_degree(const Graph &g, float *out) {
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

void edge_weight(const Graph &g, float *out) {
    const GraphView &v = *g.view;
    if (!v.weight) throw Error("the program reads e.edge_weight, but the graph has no edge weights");
    std::memcpy(out, v.weight, sizeof(float) * size_t(v.num_edges));
}

void gcn_norm(const Graph &g, bool self_loops, float *out) {
    const float *s = g.gcn_scale(self_loops);
    const GraphView &v = *g.view;
    for (idx_t e = 0; e < v.num_edges; ++e) out[e] = s[v.col[e]] * s[g.edge_dst[size_t(e)]];
}

void mean_norm(const Graph &g, bool self_loops, float *out) {
    const GraphView &v = *g.view;
    for (idx_t e = 0; e < v.num_edges; ++e) {
        const idx_t d = g.edge_dst[size_t(e)];
        out[e] = 1.0f / float(v.indptr[d + 1] - v.indptr[d] + (self_loops ? 1 : 0));
    }
}

void gather(const Graph &g, bool from_src, const float *X, idx_t F, float *out) {
    const GraphView &v = *g.view;
    if (from_src) gather_src(X, v.col, v.num_edges, F, out);
    else gather_dst(X, v.indptr, v.num_nodes, F, out);
}

void scatter(const Graph &g, bool to_dst, Reduce r, const float *m, idx_t F, float *out, idx_t *argmax) {
    const GraphView &v = *g.view;
    if (to_dst) scatter_dst(r, m, v.indptr, v.num_nodes, F, out, argmax);
    else scatter_src(r, m, v.t_indptr, v.t_eid, v.num_nodes, F, out, argmax, g.out_degree);
}

void weighted_gather_scatter(const Graph &g, bool to_dst, const float *X, const float *w, idx_t H, idx_t D,
                             float *out) {
    const GraphView &v = *g.view;
    if (to_dst) mg::weighted_gather_scatter(true, X, w, v.indptr, v.col, nullptr, v.num_nodes, H, D, out);
    else mg::weighted_gather_scatter(false, X, w, v.t_indptr, v.t_col, v.t_eid, v.num_nodes, H, D, out);
}

void weighted_edge_scatter(const Graph &g, bool to_dst, const float *X, const float *w, idx_t H, idx_t D,
                           float *out, const EdgeTypedRows *stored) {
    const GraphView &v = *g.view;
    const idx_t *rows = !stored ? nullptr : to_dst ? stored->layout.edge_row.data() : stored->layout.edge_row_by_src.data();
    if (stored && !to_dst && stored->layout.edge_row_by_src.empty()) throw Error("edge rows by source were not built");
    if (to_dst) mg::weighted_gather_scatter(true, X, w, v.indptr, rows, nullptr, v.num_nodes, H, D, out);
    else mg::weighted_gather_scatter(false, X, w, v.t_indptr, rows, v.t_eid, v.num_nodes, H, D, out);
}

void edge_dot(const Graph &g, const float *A, RowAt a_at, const float *B, RowAt b_at, idx_t H, idx_t D,
              float *out) {
    const GraphView &v = *g.view;
    mg::edge_dot(A, a_at, B, b_at, v.indptr, v.col, v.num_nodes, H, D, out);
}

void edge_dot_stored(const Graph &g, const EdgeTypedRows &stored, const float *A, const float *B, idx_t H,
                     idx_t D, float *out) {
    const GraphView &v = *g.view;
    mg::edge_dot(A, RowAt::Source, B, RowAt::Destination, v.indptr, stored.layout.edge_row.data(), v.num_nodes, H, D,
                 out);
}

void reciprocal(const float *x, float *out, idx_t n) {
    for (idx_t i = 0; i < n; ++i) out[i] = 1.0f / x[i];
}

void weighted_gather(const Graph &g, RowAt x_at, const float *X, const float *w, idx_t H, idx_t D,
                     float *out) {
    const GraphView &v = *g.view;
    mg::weighted_gather(x_at, X, w, v.indptr, v.col, v.num_nodes, H, D, out);
}

void scatter_max_grad(const Graph &g, bool to_dst, const float *G, idx_t F, const idx_t *argmax, float *gm) {
    const GraphView &v = *g.view;
    if (to_dst) scatter_dst_bwd(Reduce::Max, G, v.indptr, v.num_nodes, F, argmax, gm);
    else scatter_src_bwd(Reduce::Max, G, v.col, v.t_indptr, v.num_edges, F, argmax, gm);
}

void act_grad(ActKind act, float alpha, const float *G, const float *Y, idx_t n, float *dX) {
    detail::with_act_derivative(act, alpha, [&](auto d) { detail::act_grad_loop(G, Y, n, dX, d); });
}

void dropout_act_grad_rows(ActKind act, float alpha, const float *G, const float *Y, idx_t rows, idx_t cols,
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

void dropout_act_grad(ActKind act, float alpha, const float *G, const float *Y, idx_t n, float p,
                      uint64_t seed, uint64_t epoch, uint64_t site, float *dX) {
    dropout_act_grad_rows(act, alpha, G, Y, n, 1, nullptr, p, seed, epoch, site, dX);
}

void feature_sum(const float *G, idx_t rows, idx_t F, float *out) {
#pragma omp parallel for schedule(static) if (rows * F > (1 << 15))
    for (idx_t r = 0; r < rows; ++r) {
        float acc = 0.f;
        for (idx_t f = 0; f < F; ++f) acc += G[r * F + f];
        out[r] = acc;
    }
}

void copy(const float *x, float *y, idx_t n) {
    if (x != y && n > 0) std::memcpy(y, x, sizeof(float) * size_t(n));
}

void slice(const float *X, idx_t rows, idx_t cols, idx_t start, idx_t stop, float *Y) {
    slice_fwd(X, rows, cols, start, stop - start, Y);
}

void dropout(bool training, const float *X, float *Y, idx_t n, float p, uint64_t seed, uint64_t epoch,
             uint64_t site) {
    if (training && p > 0.f) dropout_fwd(X, Y, n, p, DropoutKey{seed, epoch, site});
    else if (X != Y) std::memcpy(Y, X, sizeof(float) * size_t(n));
}

void dropout_grad(const float *G, float *dX, idx_t n, float p, uint64_t seed, uint64_t epoch, uint64_t site) {
    if (p > 0.f) dropout_bwd(G, dX, n, p, DropoutKey{seed, epoch, site});
    else if (G != dX) std::memcpy(dX, G, sizeof(float) * size_t(n));
}

void cross_entropy(const float *logits, const int64_t *labels, const uint8_t *mask, idx_t rows, idx_t C,
                   float *loss) {
    loss[0] = softmax_cross_entropy(logits, labels, mask, rows, C, nullptr);
}

void cross_entropy_grad(const float *logits, const int64_t *labels, const uint8_t *mask, idx_t rows,
                        idx_t C, float *dlogits) {
    softmax_cross_entropy(logits, labels, mask, rows, C, dlogits);
}

void cross_entropy_train_rows(const MaskedRows &train, const float *logits, const int64_t *labels, const uint8_t *mask,
                              idx_t rows, idx_t C, float *loss) {
    if (!train.few) return cross_entropy(logits, labels, mask, rows, C, loss);
    loss[0] = softmax_cross_entropy(logits, labels, mask, rows, C, nullptr, train.count(), train.groups.perm.data(),
                                    train.count());
}

void cross_entropy_grad_train_rows(const MaskedRows &train, const float *logits, const int64_t *labels,
                                   const uint8_t *mask, idx_t rows, idx_t C, float *dlogits) {
    if (!train.few) return cross_entropy_grad(logits, labels, mask, rows, C, dlogits);
    softmax_cross_entropy(logits, labels, mask, rows, C, dlogits, train.count(), train.groups.perm.data(),
                          train.count());
}

void link_loss(const float *z, idx_t rows, const float *R, idx_t rel_rows, idx_t H, const int64_t *triples,
               idx_t count, float reg, float *loss) {
    require_triples(triples, count);
    loss[0] = distmult_loss(z, rows, R, rel_rows, H, triples, count, reg);
}

void link_loss_grad(const float *z, idx_t rows, const float *R, idx_t H, const int64_t *triples, idx_t count,
                    float reg, float *dz) {
    require_triples(triples, count);
    distmult_loss_grad(z, rows, R, 0, H, triples, count, reg, dz, nullptr);
}

void link_loss_rel_grad(const float *z, const float *R, idx_t rel_rows, idx_t H, const int64_t *triples,
                        idx_t count, float reg, float *dR) {
    require_triples(triples, count);
    distmult_loss_grad(z, 0, R, rel_rows, H, triples, count, reg, nullptr, dR);
}

double accuracy(const float *logits, const int64_t *labels, const uint8_t *mask, idx_t rows, idx_t C) {
    const int64_t n = mask_count(mask, rows);
    return n ? double(count_correct(logits, labels, mask, rows, C)) / double(n) : 0.0;
}

void adam(bool decoupled, float *p, const float *g, float *m, float *v, idx_t n, double lr, double b1,
          double b2, double eps, double wd, int64_t step) {
    AdamConfig c{lr, b1, b2, eps, wd};
    if (decoupled) adamw_step(p, g, m, v, n, c, step);
    else adam_step(p, g, m, v, n, c, step);
}

void adam_rows(bool decoupled, float *p, const float *g, float *m, float *v, idx_t rows, idx_t M,
               const EmbeddingPlan &plan, double lr, double b1, double b2, double eps, double wd, int64_t step) {
    AdamConfig c{lr, b1, b2, eps, wd};
    adam_rows_step(p, g, m, v, rows, M, plan.keys.data(), plan.unique, c, step, decoupled);
}

void sgd(float *p, const float *g, float *buf, idx_t n, double lr, double momentum, double wd, int64_t step) {
    SgdConfig c;
    c.lr = lr;
    c.momentum = momentum;
    c.weight_decay = wd;
    sgd_step(p, g, buf, n, c, step);
}

// ---- the instances generated code may name ------------------------------------------------------
// The emitter writes `matmul_tn<W>` for narrow gradients (W <= its NARROW_TN_MAX, 8): every
// width is instantiated here, and a missing one fails the library's link (-Wl,--no-undefined).
// (The aggregations' tiles: ops_aggregate.cpp.)
#define MG_WIDTH_INSTANCES(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)
#define MG_MATMUL_TN(W)                                                                              \
    template void gemm_tn_rows<W>(idx_t, idx_t, idx_t, const float *, const float *, float *);     \
    template void matmul_tn<W>(const float *, idx_t, idx_t, const float *, idx_t, float *);          \
    template void matmul_tn_train_rows<W>(const MaskedRows &, const float *, idx_t, idx_t, const float *, idx_t, \
                                          float *);
MG_WIDTH_INSTANCES(MG_MATMUL_TN)

}  // namespace op
}  // namespace mg
