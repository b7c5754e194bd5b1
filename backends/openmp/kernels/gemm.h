// Dense GEMM: thin row-major wrappers over scipy-openblas32's cblas (symbols carry `scipy_`).
//
// Threading rule (avoids oversubscription): OpenBLAS runs its own thread pool. It must never be
// entered from inside an OpenMP parallel region (each OpenMP thread would start a full OpenBLAS
// team), so every wrapper here refuses with kErrInParallel when omp_in_parallel() is true. Call
// mg::blas_match_openmp_threads() once at load time so the BLAS team is as large as the OpenMP
// team: kernels and GEMMs then alternate on the same cores, never run on top of each other.
#pragma once

#include <climits>
#include <initializer_list>

#include <cblas.h>

#include "common.h"

namespace mg {

// Set the OpenBLAS thread count (n <= 0: the OpenMP thread count).
inline void blas_set_threads(int n) {
    scipy_openblas_set_num_threads(n > 0 ? n : omp_get_max_threads());
}
inline void blas_match_openmp_threads() { blas_set_threads(omp_get_max_threads()); }
inline int blas_threads() { return scipy_openblas_get_num_threads(); }

// C = alpha * op(A) * op(B) + beta * C; op(A) is M x K, op(B) is K x N, all row-major.
inline int gemm(bool trans_a, bool trans_b, idx_t M, idx_t N, idx_t K, float alpha, const float* A,
                idx_t lda, const float* B, idx_t ldb, float beta, float* C, idx_t ldc) {
    if (M < 0 || N < 0 || K < 0) return kErrArgument;
    if (lda < (trans_a ? M : K) || ldb < (trans_b ? K : N) || ldc < N) return kErrArgument;
    if (lda < 1 || ldb < 1 || ldc < 1) return kErrArgument;
    if (omp_in_parallel()) return kErrInParallel;
    for (idx_t d : {M, N, K, lda, ldb, ldc})
        if (d > INT_MAX) return kErrTooLarge;
    if (M == 0 || N == 0) return kOk;
    scipy_cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                      trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
                      static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
                      static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C,
                      static_cast<blasint>(ldc));
    return kOk;
}

// Linear layer pieces for X [rows x in], W [in x out], G = dL/dY [rows x out] (contiguous).
// Y = X * W  (+ beta * Y)
inline int linear_forward(idx_t rows, idx_t in, idx_t out, const float* X, const float* W, float* Y,
                          float beta = 0.f) {
    return gemm(false, false, rows, out, in, 1.f, X, in, W, out, beta, Y, out);
}
// dW = X^T * G  (+ beta * dW): the weight gradient.
inline int linear_weight_grad(idx_t rows, idx_t in, idx_t out, const float* X, const float* G,
                              float* dW, float beta = 0.f) {
    return gemm(true, false, in, out, rows, 1.f, X, in, G, out, beta, dW, out);
}
// dX = G * W^T  (+ beta * dX): the input gradient.
inline int linear_input_grad(idx_t rows, idx_t in, idx_t out, const float* G, const float* W, float* dX,
                             float beta = 0.f) {
    return gemm(false, true, rows, in, out, 1.f, G, out, W, out, beta, dX, in);
}

}  // namespace mg
