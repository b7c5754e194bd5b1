// extern "C" entry points over the part-A kernels, so the tests can drive them through cffi.
#include <cstdint>

#include "gemm.h"
#include "layout.h"
#include "sparse_features.h"
#include "spmm.h"
#include "tall_skinny.h"

using mg::idx_t;

namespace {
mg::AggSpec make_spec(int reduce, const float* w, const float* scale, int self_loop) {
    mg::AggSpec s;
    s.reduce = static_cast<mg::Reduce>(reduce);
    s.edge_weight = w;
    s.node_scale = scale;
    s.self_loop = self_loop != 0;
    return s;
}
mg::Epilogue make_epi(const float* bias, int act, float alpha) {
    mg::Epilogue e;
    e.bias = bias;
    e.act = static_cast<mg::Act>(act);
    e.alpha = alpha;
    return e;
}
template <int TILE, int LA>
int run_spmm(idx_t n, const idx_t* indptr, const idx_t* col, const float* X, idx_t F, float* Y,
             int reduce, const float* w, const float* scale, int self_loop, const float* bias, int act,
             float alpha, idx_t* argmax) {
    return mg::spmm<TILE, LA>(n, indptr, col, X, F, F, Y, F, make_spec(reduce, w, scale, self_loop),
                              make_epi(bias, act, alpha), argmax, F);
}
}  // namespace

extern "C" {

void mgt_set_threads(int n) { omp_set_num_threads(n); }
int mgt_max_threads() { return omp_get_max_threads(); }
int mgt_simd_lanes() { return MG_SIMD_LANES; }

int mgt_spmm(idx_t n, const idx_t* indptr, const idx_t* col, const float* X, idx_t F, float* Y,
             int reduce, const float* w, const float* scale, int self_loop, const float* bias, int act,
             float alpha, idx_t* argmax) {
    return run_spmm<MG_SPMM_TILE, MG_SPMM_LOOKAHEAD>(n, indptr, col, X, F, Y, reduce, w, scale, self_loop,
                                                     bias, act, alpha, argmax);
}

// The listed rows only (the MPI backend aggregates interior rows while its halo travels).
int mgt_spmm_rows(idx_t n, const idx_t* rows, idx_t count, const idx_t* indptr, const idx_t* col, const float* X,
                  idx_t F, float* Y, int reduce, const float* w, const float* scale, int self_loop, idx_t* argmax) {
    return mg::spmm_rows(n, rows, count, indptr, col, X, F, F, Y, F, make_spec(reduce, w, scale, self_loop),
                         mg::Epilogue{}, argmax, F);
}

// Other compile-time tile widths / lookaheads, for tests and for tuning the defaults.
int mgt_spmm_variant(int tile, int lookahead, idx_t n, const idx_t* indptr, const idx_t* col,
                     const float* X, idx_t F, float* Y, int reduce, const float* w, const float* scale,
                     int self_loop, const float* bias, int act, float alpha, idx_t* argmax) {
#define MGT_CASE(T, L)                                                                                \
    if (tile == T && lookahead == L)                                                                  \
        return run_spmm<T, L>(n, indptr, col, X, F, Y, reduce, w, scale, self_loop, bias, act, alpha, \
                              argmax);
    // The sanitizer build (MGT_DEFAULT_ONLY) keeps just the default instantiation: it is compiled
    // at -O1 with instrumentation, and the variants add nothing the default does not exercise.
#ifndef MGT_DEFAULT_ONLY
    MGT_CASE(32, 0) MGT_CASE(32, 16) MGT_CASE(16, 8) MGT_CASE(64, 8)
#endif
    MGT_CASE(MG_SPMM_TILE, MG_SPMM_LOOKAHEAD)
#undef MGT_CASE
    return -1;
}

// Forward and transposed aggregation with the tile generated code asks for rows of F floats
// (mg::spmm_tile_for(F): the width in whole vectors between 32 and 64), for the widths the tests
// use; -1 for any other width.
#define MGT_TILED_WIDTHS(X) X(33) X(40) X(47) X(56) X(63)
int mgt_spmm_tile_for(idx_t F) { return mg::spmm_tile_for(F); }
int mgt_spmm_width_tiled(idx_t n, const idx_t* indptr, const idx_t* col, const float* X, idx_t F, float* Y,
                         int reduce, const float* w, const float* scale, int self_loop, idx_t* argmax) {
#define MGT_FORWARD(W)                                                                                   \
    if (F == W)                                                                                          \
        return run_spmm<mg::spmm_tile_for(W), MG_SPMM_LOOKAHEAD>(n, indptr, col, X, F, Y, reduce, w, scale, \
                                                                 self_loop, nullptr, 0, 0.f, argmax);
    MGT_TILED_WIDTHS(MGT_FORWARD)
#undef MGT_FORWARD
    return -1;
}
int mgt_spmm_transpose_width_tiled(idx_t n_src, const idx_t* indptr, const idx_t* t_indptr, const idx_t* t_col,
                                   const idx_t* t_eid, const float* G, idx_t F, float* dX, int reduce,
                                   const float* w, const float* scale, int self_loop) {
#define MGT_TRANSPOSE(W)                                                                                 \
    if (F == W)                                                                                          \
        return mg::spmm_transpose<mg::spmm_tile_for(W)>(n_src, indptr, t_indptr, t_col, t_eid, G, F, F, dX, F, \
                                                        make_spec(reduce, w, scale, self_loop), false);
    MGT_TILED_WIDTHS(MGT_TRANSPOSE)
#undef MGT_TRANSPOSE
    return -1;
}
#undef MGT_TILED_WIDTHS

int mgt_spmm_transpose(idx_t n_src, const idx_t* indptr, const idx_t* t_indptr, const idx_t* t_col,
                       const idx_t* t_eid, const float* G, idx_t F, float* dX, int reduce, const float* w,
                       const float* scale, int self_loop, int accumulate) {
    return mg::spmm_transpose(n_src, indptr, t_indptr, t_col, t_eid, G, F, F, dX, F,
                              make_spec(reduce, w, scale, self_loop), accumulate != 0);
}

int mgt_spmm_max_backward(idx_t n_src, const idx_t* t_indptr, const idx_t* t_col, const idx_t* t_eid,
                          const idx_t* argmax, const float* G, idx_t F, float* dX, const float* w,
                          const float* scale, int self_loop, int accumulate) {
    return mg::spmm_max_backward(n_src, t_indptr, t_col, t_eid, argmax, F, G, F, F, dX, F,
                                 make_spec(2, w, scale, self_loop), accumulate != 0);
}

int mgt_spmm_edge_weight_grad(idx_t n, const idx_t* indptr, const idx_t* col, const float* X,
                              const float* G, idx_t F, float* dw, int reduce, const float* scale,
                              int self_loop) {
    return mg::spmm_edge_weight_grad(n, indptr, col, X, F, G, F, F, dw,
                                     make_spec(reduce, nullptr, scale, self_loop));
}

int mgt_transpose_csr(idx_t n_rows, idx_t n_cols, const idx_t* indptr, const idx_t* col, idx_t* t_indptr,
                      idx_t* t_row, idx_t* t_pos) {
    return mg::transpose_csr(n_rows, n_cols, indptr, col, t_indptr, t_row, t_pos);
}


void mgt_gcn_node_scale(idx_t n, const idx_t* indptr, int self_loop, float* scale) {
    mg::gcn_node_scale(n, indptr, self_loop != 0, scale);
}

int mgt_gemm(int ta, int tb, idx_t M, idx_t N, idx_t K, float alpha, const float* A, idx_t lda,
             const float* B, idx_t ldb, float beta, float* C, idx_t ldc) {
    return mg::gemm(ta != 0, tb != 0, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
int mgt_linear_forward(idx_t rows, idx_t in, idx_t out, const float* X, const float* W, float* Y, float beta) {
    return mg::linear_forward(rows, in, out, X, W, Y, beta);
}
int mgt_linear_weight_grad(idx_t rows, idx_t in, idx_t out, const float* X, const float* G, float* dW,
                           float beta) {
    return mg::linear_weight_grad(rows, in, out, X, G, dW, beta);
}
int mgt_linear_input_grad(idx_t rows, idx_t in, idx_t out, const float* G, const float* W, float* dX,
                          float beta) {
    return mg::linear_input_grad(rows, in, out, G, W, dX, beta);
}
// Calls gemm from inside a parallel region; must be refused with kErrInParallel by every thread.
int mgt_gemm_inside_parallel(const float* A, const float* B, float* C) {
    int worst = 0;
#pragma omp parallel reduction(max : worst) num_threads(2)
    {
        const int st = mg::gemm(false, false, 1, 1, 1, 1.f, A, 1, B, 1, 0.f, C, 1);
        worst = st > worst ? st : worst;
    }
    return worst;
}
void mgt_blas_set_threads(int n) { mg::blas_set_threads(n); }
int mgt_blas_threads() { return mg::blas_threads(); }

// The sparse-feature kernels over a column-blocked copy built with `block_cols` columns per
// block (small values exercise many blocks); p > 0 attaches a dropout.
void* mgt_sparse_blocks_build(idx_t rows, idx_t K, const int64_t* indptr, const int32_t* col, const float* val,
                              idx_t block_cols, int* status) {
    auto* X = new mg::SparseFeatureBlocks;
    *status = mg::build_feature_blocks(rows, K, indptr, col, val, block_cols, *X);
    if (*status != mg::kOk) {
        delete X;
        return nullptr;
    }
    return X;
}
void mgt_sparse_blocks_free(void* X) { delete static_cast<mg::SparseFeatureBlocks*>(X); }
int mgt_sparse_blocks_forward(void* X, idx_t F, const float* W, float* Y, float p, uint64_t seed, uint64_t epoch,
                              uint64_t site) {
    return mg::sparse_linear_forward(*static_cast<mg::SparseFeatureBlocks*>(X), W, F, Y,
                                     mg::FeatureDropout{p, mg::DropoutKey{seed, epoch, site}});
}
int mgt_sparse_blocks_grad(void* X, idx_t F, const float* G, float* dW, int accumulate, float p, uint64_t seed,
                           uint64_t epoch, uint64_t site) {
    return mg::sparse_weight_grad(*static_cast<mg::SparseFeatureBlocks*>(X), G, F, dW, accumulate != 0,
                                  mg::FeatureDropout{p, mg::DropoutKey{seed, epoch, site}});
}
int mgt_tall_skinny_nn(idx_t rows, idx_t K, idx_t M, const float* X, const float* W, float* Y) {
    return mg::tall_skinny_nn(rows, K, M, X, W, Y);
}
int mgt_gemm_rows_epilogue(idx_t rows, idx_t K, idx_t M, const float* X, const float* W, float* Y,
                           const float* bias, int act, float alpha, const float* residual) {
    mg::Epilogue epi = make_epi(bias, act, alpha);
    epi.residual = residual;
    return mg::gemm_rows(rows, M, K, X, W, false, Y, epi);
}
int mgt_tall_skinny_tn(idx_t rows, idx_t K, idx_t M, const float* X, const float* G, float* dW) {
    return mg::tall_skinny_tn(rows, K, M, X, G, dW);
}
// The instance a program whose G is `width` wide compiles (matmul_tn<width>), given M.
int mgt_tall_skinny_tn_width(int width, idx_t rows, idx_t K, idx_t M, const float* X, const float* G, float* dW) {
    switch (width) {
        case 1: return mg::tall_skinny_tn<1>(rows, K, M, X, G, dW);
        case 2: return mg::tall_skinny_tn<2>(rows, K, M, X, G, dW);
        case 3: return mg::tall_skinny_tn<3>(rows, K, M, X, G, dW);
        case 4: return mg::tall_skinny_tn<4>(rows, K, M, X, G, dW);
        case 5: return mg::tall_skinny_tn<5>(rows, K, M, X, G, dW);
        case 6: return mg::tall_skinny_tn<6>(rows, K, M, X, G, dW);
        case 7: return mg::tall_skinny_tn<7>(rows, K, M, X, G, dW);
        case 8: return mg::tall_skinny_tn<8>(rows, K, M, X, G, dW);
        default: return -100;
    }
}
int mgt_dropout_keep(uint64_t seed, uint64_t epoch, uint64_t site, float p, int64_t i) {
    return mg::dropout_keep(mg::DropoutKey{seed, epoch, site}, p, i) ? 1 : 0;
}

}  // extern "C"
