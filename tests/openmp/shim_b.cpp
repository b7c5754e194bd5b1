// extern "C" wrappers that expose the part-B kernels (elementwise, edge ops, dropout, loss,
// edge softmax, optimizers, typed linear) to the cffi tests.  Enums travel as ints; every
// wrapper only converts arguments and forwards to the mg:: kernel.
#include <cstdint>

#include "dropout.h"
#include "edge_ops.h"
#include "edge_softmax.h"
#include "elementwise.h"
#include "loss.h"
#include "math.h"
#include "optim.h"
#include "typed_linear.h"

using std::int64_t;

extern "C" {

void mgb_set_threads(int n) { omp_set_num_threads(n); }
int mgb_max_threads(void) { return omp_get_max_threads(); }

// ---- elementwise ------------------------------------------------------------------------
// kind: 0 relu, 1 leaky_relu, 2 elu, 3 exp, 4 sigmoid, 5 tanh, 6 neg, 7 scale (alpha = factor)
int mgb_unary_fwd(int kind, const float* x, float* y, int64_t n, float alpha) {
    switch (kind) {
        case 0: mg::relu_fwd(x, y, n); return 0;
        case 1: mg::leaky_relu_fwd(x, y, n, alpha); return 0;
        case 2: mg::elu_fwd(x, y, n, alpha); return 0;
        case 3: mg::exp_fwd(x, y, n); return 0;
        case 4: mg::sigmoid_fwd(x, y, n); return 0;
        case 5: mg::tanh_fwd(x, y, n); return 0;
        case 6: mg::neg_fwd(x, y, n); return 0;
        case 7: mg::scale(x, y, n, alpha); return 0;
    }
    return 1;
}

// Passes x or y to the kernel according to what its backward is defined on.
int mgb_unary_bwd(int kind, const float* x, const float* y, const float* gy, float* gx, int64_t n, float alpha) {
    switch (kind) {
        case 0: mg::relu_bwd(y, gy, gx, n); return 0;
        case 1: mg::leaky_relu_bwd(x, gy, gx, n, alpha); return 0;
        case 2: mg::elu_bwd(x, gy, gx, n, alpha); return 0;
        case 3: mg::exp_bwd(y, gy, gx, n); return 0;
        case 4: mg::sigmoid_bwd(y, gy, gx, n); return 0;
        case 5: mg::tanh_bwd(y, gy, gx, n); return 0;
        case 6: mg::neg_fwd(gy, gx, n); return 0;
        case 7: mg::scale(gy, gx, n, alpha); return 0;
    }
    return 1;
}

// fn: the order of mg::MathFn (0 sqrt, 1 rsqrt, 2 log, 3 abs, 4 pow, 5 gelu, 6 softplus, 7 shift).
void mgb_math_fwd(int fn, float c, const float* x, float* y, int64_t n) {
    mg::math_fwd(static_cast<mg::MathFn>(fn), c, x, y, n);
}
void mgb_math_bwd(int fn, float c, const float* gy, const float* x, float* gx, int64_t n) {
    mg::math_bwd(static_cast<mg::MathFn>(fn), c, gy, x, gx, n);
}

void mgb_binary_fwd(int op, const float* a, int sa, const float* b, int sb, float* out, int64_t rows,
                    int64_t cols) {
    mg::binary_fwd(static_cast<mg::BinOp>(op), a, static_cast<mg::Bcast>(sa), b, static_cast<mg::Bcast>(sb), out,
                   rows, cols);
}
void mgb_binary_bwd(int op, const float* a, int sa, const float* b, int sb, const float* g, float* ga, float* gb,
                    int64_t rows, int64_t cols) {
    mg::binary_bwd(static_cast<mg::BinOp>(op), a, static_cast<mg::Bcast>(sa), b, static_cast<mg::Bcast>(sb), g,
                   ga, gb, rows, cols);
}
void mgb_scaled_add(float ca, const float* a, float cb, const float* b, float* out, int64_t rows, int64_t cols,
                    const float* bias, int act, float alpha) {
    mg::scaled_add(ca, a, cb, b, out, rows, cols, mg::Epilogue{bias, static_cast<mg::Act>(act), alpha});
}
void mgb_bias_add(const float* x, const float* b, float* y, int64_t rows, int64_t cols) {
    mg::bias_add(x, b, y, rows, cols);
}
void mgb_row_sum(const float* x, float* out, int64_t rows, int64_t cols) { mg::row_sum(x, out, rows, cols); }
void mgb_accumulate(const float* x, float* y, int64_t n) { mg::accumulate(x, y, n); }
void mgb_rowwise_dot_fwd(const float* a, const float* b, int b_is_row, float* out, int64_t rows, int64_t heads,
                         int64_t dim) {
    mg::rowwise_dot_fwd(a, b, b_is_row != 0, out, rows, heads, dim);
}
void mgb_rowwise_dot_bwd(const float* a, const float* b, int b_is_row, const float* g, float* ga, float* gb,
                         int64_t rows, int64_t heads, int64_t dim) {
    mg::rowwise_dot_bwd(a, b, b_is_row != 0, g, ga, gb, rows, heads, dim);
}
void mgb_concat_fwd(const float* const* parts, const int64_t* widths, int64_t nparts, float* out, int64_t rows) {
    mg::concat_fwd(parts, widths, nparts, out, rows);
}
void mgb_concat_bwd(const float* g, const int64_t* widths, int64_t nparts, float* const* grads, int64_t rows) {
    mg::concat_bwd(g, widths, nparts, grads, rows);
}
void mgb_slice_fwd(const float* x, int64_t rows, int64_t cols, int64_t start, int64_t width, float* y) {
    mg::slice_fwd(x, rows, cols, start, width, y);
}
void mgb_slice_bwd(const float* gy, int64_t rows, int64_t cols, int64_t start, int64_t width, float* gx) {
    mg::slice_bwd(gy, rows, cols, start, width, gx);
}

// ---- edge gather / scatter --------------------------------------------------------------
void mgb_gather_src(const float* x, const int64_t* col, int64_t E, int64_t F, float* out) {
    mg::gather_src(x, col, E, F, out);
}
void mgb_gather_dst(const float* x, const int64_t* indptr, int64_t N, int64_t F, float* out) {
    mg::gather_dst(x, indptr, N, F, out);
}
void mgb_gather_src_bwd(const float* g, const int64_t* t_indptr, const int64_t* t_eid, int64_t N, int64_t F,
                        float* gx) {
    mg::gather_src_bwd(g, t_indptr, t_eid, N, F, gx);
}
void mgb_gather_dst_bwd(const float* g, const int64_t* indptr, int64_t N, int64_t F, float* gx) {
    mg::gather_dst_bwd(g, indptr, N, F, gx);
}
void mgb_scatter_dst(int r, const float* m, const int64_t* indptr, int64_t N, int64_t F, float* out,
                     int64_t* argmax) {
    mg::scatter_dst(static_cast<mg::Reduce>(r), m, indptr, N, F, out, argmax);
}
void mgb_scatter_dst_bwd(int r, const float* g, const int64_t* indptr, int64_t N, int64_t F,
                         const int64_t* argmax, float* gm) {
    mg::scatter_dst_bwd(static_cast<mg::Reduce>(r), g, indptr, N, F, argmax, gm);
}
void mgb_scatter_src(int r, const float* m, const int64_t* t_indptr, const int64_t* t_eid, int64_t N, int64_t F,
                     float* out, int64_t* argmax) {
    mg::scatter_src(static_cast<mg::Reduce>(r), m, t_indptr, t_eid, N, F, out, argmax);
}
void mgb_weighted_gather_scatter(int to_dst, const float* x, const float* w, const int64_t* indptr,
                                 const int64_t* other, const int64_t* eid, int64_t N, int64_t H, int64_t D,
                                 float* out) {
    mg::weighted_gather_scatter(to_dst != 0, x, w, indptr, other, eid, N, H, D, out);
}
// a_at, b_at, x_at: mg::RowAt (0 destination, 1 source, 2 the edge's own row).
void mgb_edge_dot(const float* a, int a_at, const float* b, int b_at, const int64_t* indptr, const int64_t* col,
                  int64_t N, int64_t H, int64_t D, float* out) {
    mg::edge_dot(a, static_cast<mg::RowAt>(a_at), b, static_cast<mg::RowAt>(b_at), indptr, col, N, H, D, out);
}
void mgb_weighted_gather(int x_at, const float* x, const float* w, const int64_t* indptr, const int64_t* col,
                         int64_t N, int64_t H, int64_t D, float* out) {
    mg::weighted_gather(static_cast<mg::RowAt>(x_at), x, w, indptr, col, N, H, D, out);
}
void mgb_scatter_src_bwd(int r, const float* g, const int64_t* col, const int64_t* t_indptr, int64_t E, int64_t F,
                         const int64_t* argmax, float* gm) {
    mg::scatter_src_bwd(static_cast<mg::Reduce>(r), g, col, t_indptr, E, F, argmax, gm);
}

// ---- dropout ----------------------------------------------------------------------------
void mgb_dropout_fwd(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t epoch, uint64_t op) {
    mg::dropout_fwd(x, y, n, p, mg::DropoutKey{seed, epoch, op});
}
void mgb_dropout_bwd(const float* gy, float* gx, int64_t n, float p, uint64_t seed, uint64_t epoch, uint64_t op) {
    mg::dropout_bwd(gy, gx, n, p, mg::DropoutKey{seed, epoch, op});
}
int64_t mgb_dropout_mask_words(int64_t n) { return mg::dropout_mask_words(n); }
void mgb_dropout_fwd_mask(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t epoch, uint64_t op,
                          uint64_t* bits) {
    mg::dropout_fwd_mask(x, y, n, p, mg::DropoutKey{seed, epoch, op}, bits);
}
void mgb_dropout_bwd_mask(const float* gy, float* gx, int64_t n, float p, const uint64_t* bits) {
    mg::dropout_bwd_mask(gy, gx, n, p, bits);
}

// ---- loss -------------------------------------------------------------------------------
float mgb_softmax_cross_entropy(const float* logits, const int64_t* labels, const uint8_t* mask, int64_t rows,
                                int64_t classes, float* dlogits) {
    return mg::softmax_cross_entropy(logits, labels, mask, rows, classes, dlogits);
}
int64_t mgb_count_correct(const float* logits, const int64_t* labels, const uint8_t* mask, int64_t rows,
                          int64_t classes) {
    return mg::count_correct(logits, labels, mask, rows, classes);
}

// ---- edge softmax -----------------------------------------------------------------------
void mgb_edge_softmax_fwd(const float* s, const int64_t* indptr, int64_t N, int64_t H, float* alpha) {
    mg::edge_softmax_fwd(s, indptr, N, H, alpha);
}
void mgb_edge_softmax_bwd(const float* alpha, const float* g, const int64_t* indptr, int64_t N, int64_t H,
                          float* ds) {
    mg::edge_softmax_bwd(alpha, g, indptr, N, H, ds);
}

// ---- optimizers -------------------------------------------------------------------------
void mgb_adam_step(float* p, const float* g, float* m, float* v, int64_t n, double lr, double b1, double b2,
                   double eps, double wd, int64_t step, int decoupled) {
    const mg::AdamConfig c{lr, b1, b2, eps, wd};
    if (decoupled) mg::adamw_step(p, g, m, v, n, c, step);
    else mg::adam_step(p, g, m, v, n, c, step);
}
void mgb_sgd_step(float* p, const float* g, float* buf, int64_t n, double lr, double momentum, double dampening,
                  double wd, int nesterov, int64_t step) {
    const mg::SgdConfig c{lr, momentum, dampening, wd, nesterov != 0};
    mg::sgd_step(p, g, buf, n, c, step);
}

// ---- typed linear -----------------------------------------------------------------------
void mgb_segment_row_sums(const int64_t* ptr, const int64_t* idx, int64_t segments, const float* src,
                          int64_t width, float* out) {
    mg::segment_row_sums(ptr, idx, segments, src, width, out);
}
int mgb_group_rows_by_type(const int64_t* type, int64_t R, int64_t T, int64_t* perm, int64_t* type_ptr) {
    return mg::group_rows_by_type(type, R, T, perm, type_ptr);
}
int mgb_tl_segment_fwd(const float* X, const float* W, float* Y, const int64_t* type_ptr, int64_t T, int64_t K,
                       int64_t M) {
    return mg::typed_linear_segment_fwd(X, W, Y, type_ptr, T, K, M);
}
int mgb_tl_segment_bwd(const float* X, const float* W, const float* G, const int64_t* type_ptr, int64_t T,
                       int64_t K, int64_t M, float* dX, float* dW) {
    return mg::typed_linear_segment_bwd(X, W, G, type_ptr, T, K, M, dX, dW);
}
int64_t mgb_tl_workspace_floats(const int64_t* type_ptr, int64_t T, int64_t K, int64_t M) {
    return mg::typed_linear_workspace_floats(type_ptr, T, K, M);
}
int mgb_tl_gather_fwd(const float* X, const float* W, float* Y, const int64_t* perm, const int64_t* type_ptr,
                      int64_t T, int64_t K, int64_t M, float* workspace, const int64_t* x_rows) {
    return mg::typed_linear_gather_fwd(X, W, Y, perm, type_ptr, T, K, M, workspace, x_rows);
}
int mgb_tl_gather_bwd(const float* X, const float* W, const float* G, const int64_t* perm, const int64_t* type_ptr,
                      int64_t T, int64_t K, int64_t M, float* dX, float* dW, float* workspace,
                      const int64_t* x_rows) {
    return mg::typed_linear_gather_bwd(X, W, G, perm, type_ptr, T, K, M, dX, dW, workspace, x_rows);
}
void mgb_embedding_fwd(const float* table, const int64_t* type, const int64_t* src_row, int64_t R,
                       int64_t rows_per_type, int64_t M, float* Y) {
    mg::embedding_lookup_fwd(table, type, src_row, R, rows_per_type, M, Y);
}
int64_t mgb_embedding_grad_plan(const int64_t* type, const int64_t* src_row, int64_t R, int64_t T,
                                int64_t rows_per_type, int64_t* order, int64_t* key_ptr, int64_t* keys) {
    return mg::embedding_grad_plan(type, src_row, R, T, rows_per_type, order, key_ptr, keys);
}
void mgb_embedding_bwd(const float* G, const int64_t* order, const int64_t* key_ptr, const int64_t* keys,
                       int64_t num_keys, int64_t table_rows, int64_t M, float* dtable) {
    mg::embedding_lookup_bwd(G, order, key_ptr, keys, num_keys, table_rows, M, dtable);
}
void mgb_embedding_bwd_rows(const float* G, const int64_t* order, const int64_t* key_ptr, const int64_t* keys,
                            int64_t num_keys, int64_t M, float* dtable) {
    mg::embedding_lookup_bwd_rows(G, order, key_ptr, keys, num_keys, M, dtable);
}
// The basis lookups' kernels over a plan keyed row * T + type (mgb_embedding_grad_plan with
// type = the rows, src_row = the types, T = P, rows_per_type = T) and its row starts.
void mgb_basis_fwd(const float* A, const float* V, const int64_t* order, const int64_t* key_ptr, const int64_t* keys,
                   int64_t num_keys, int64_t T, int64_t B, int64_t P, int64_t M, float* Y) {
    mg::basis_lookup_fwd(A, V, order, key_ptr, keys, num_keys, T, B, P, M, Y);
}
void mgb_basis_coef_bwd(const float* V, const float* G, const int64_t* order, const int64_t* key_ptr,
                        const int64_t* keys, const int64_t* row_start, int64_t num_rows, int64_t T, int64_t B,
                        int64_t P, int64_t M, float* dA) {
    mg::basis_lookup_coef_bwd(V, G, order, key_ptr, keys, row_start, num_rows, T, B, P, M, dA);
}
void mgb_basis_bases_bwd(const float* A, const float* G, const int64_t* order, const int64_t* key_ptr,
                         const int64_t* keys, const int64_t* row_start, int64_t num_rows, int64_t T, int64_t B,
                         int64_t P, int64_t M, float* dV) {
    mg::basis_lookup_bases_bwd(A, G, order, key_ptr, keys, row_start, num_rows, T, B, P, M, dV);
}
void mgb_adam_rows_step(float* p, const float* g, float* m, float* v, int64_t rows, int64_t width,
                        const int64_t* keys, int64_t num_keys, double lr, double b1, double b2, double eps, double wd,
                        int64_t step, int decoupled) {
    const mg::AdamConfig c{lr, b1, b2, eps, wd};
    mg::adam_rows_step(p, g, m, v, rows, width, keys, num_keys, c, step, decoupled != 0);
}

void mgb_adam_listed_rows_step(float* p, const float* g, float* m, float* v, int64_t width, const int64_t* rows,
                               const uint8_t* has_grad, int64_t n, double lr, double b1, double b2, double eps,
                               double wd, int64_t step, int decoupled, int packed) {
    const mg::AdamConfig c{lr, b1, b2, eps, wd};
    mg::adam_listed_rows_step(p, g, m, v, width, rows, has_grad, n, c, step, decoupled != 0, packed != 0);
}

}  // extern "C"
