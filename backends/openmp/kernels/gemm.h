// Dense GEMM: thin row-major wrappers over scipy-openblas32's cblas (symbols carry `scipy_`).
//
// Two ways to thread them, never mixed in one program:
//   * `gemm` and the linear_* helpers call BLAS once with its own thread pool. It must never be
//     entered from inside an OpenMP parallel region (each OpenMP thread would start a full OpenBLAS
//     team), so they refuse with kErrInParallel when omp_in_parallel() is true;
//     mg::blas_match_openmp_threads() sizes the BLAS team like the OpenMP team.
//   * `gemm_rows` / `gemm_tn_rows` (what generated programs use) run single-threaded BLAS calls
//     on row blocks inside one OpenMP region, after blas_set_threads(1): one pool for everything.
//     Products with a side of at most kSkinnyMaxWidth columns skip BLAS for tall_skinny.h.
#pragma once

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <vector>

#include <cblas.h>

#include "common.h"
#include "tall_skinny.h"

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

// The products the generated code runs, on ONE thread pool: OpenBLAS single-threaded
// (blas_set_threads(1)) and the rows split over the OpenMP threads, one BLAS call per thread.
// Two pools -- OpenBLAS's pthreads spinning after each call while OpenMP's workers run the sparse
// kernels -- would fight for the same cores.
inline void sgemm_block(bool trans_a, bool trans_b, idx_t M, idx_t N, idx_t K, const float* A, idx_t lda,
                        const float* B, idx_t ldb, float beta, float* C, idx_t ldc) {
    scipy_cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                      blasint(M), blasint(N), blasint(K), 1.0f, A, blasint(lda), B, blasint(ldb), beta, C,
                      blasint(ldc));
}

// Bt[K, N] = B[N, K]^T (a narrow weight, copied before a tall-skinny product by it).
inline void transpose_small(const float* B, idx_t N, idx_t K, float* Bt) {
    for (idx_t n = 0; n < N; ++n)
        for (idx_t k = 0; k < K; ++k) Bt[k * N + n] = B[n * K + k];
}

// C[rows, N] = epi(A[rows, K] * op(B)): each thread multiplies its own block of rows, then adds
// the bias and applies the activation of `epi` (none by default) to it.
inline int gemm_rows(idx_t rows, idx_t N, idx_t K, const float* A, const float* B, bool trans_b, float* C,
                     const Epilogue& epi = Epilogue{}) {
    if (rows < 0 || N < 0 || K < 0) return kErrArgument;
    if (rows > INT_MAX || N > INT_MAX || K > INT_MAX) return kErrTooLarge;
    if (rows == 0 || N == 0) return kOk;
    // Narrow outputs (the hidden widths of GNN layers) skip BLAS's packing of A: measured on a
    // 89,250 x 500 input through 500 x 32, 42 ms with OpenBLAS, 29 ms with tall_skinny_nn.
    if (!trans_b && N <= kSkinnyMaxWidth) return tall_skinny_nn(rows, K, N, A, B, C, epi);
    // So do the input gradients G W^T of narrow layers, through a transposed copy of the small
    // B (N x K): on an AMD EPYC with AVX-512, 2 threads, 169,343 x 40 through 40 x 64 took 5.96 ms
    // with OpenBLAS and 2.31 ms this way, 89,250 x 7 through 7 x 64 7.09 ms and 0.35 ms.
    if (trans_b && N <= kSkinnyMaxWidth) {
        std::vector<float> bt(size_t(K * N));
        transpose_small(B, N, K, bt.data());
        return tall_skinny_nn(rows, K, N, A, bt.data(), C, epi);
    }
#pragma omp parallel
    {
        const idx_t T = omp_get_num_threads(), t = omp_get_thread_num();
        const idx_t chunk = (rows + T - 1) / T, r0 = std::min(rows, t * chunk), r1 = std::min(rows, r0 + chunk);
        if (r1 > r0) {
            sgemm_block(false, trans_b, r1 - r0, N, K, A + r0 * K, K, B, trans_b ? K : N, 0.0f, C + r0 * N, N);
            apply_epilogue_rows(epi, C, N, r0, r1);
        }
    }
    return kOk;
}

// dW[K, M] = X[rows, K]^T G[rows, M]: each thread reduces its block of rows into a private
// K x M partial (thread 0 straight into dW), then the partials are summed once.  WIDTH: M where
// the caller knows it at compile time (tall_skinny_tn), else 0.
template <int WIDTH = 0>
inline int gemm_tn_rows(idx_t rows, idx_t K, idx_t M, const float* X, const float* G, float* dW) {
    if (rows < 0 || K < 0 || M < 0) return kErrArgument;
    // Narrow gradients skip BLAS's packing of X (tall_skinny.h): 29-32 ms instead of 44-50 ms on
    // 89,250 x 500 rows through 32 columns.
    if (M <= kSkinnyMaxWidth) return tall_skinny_tn<WIDTH>(rows, K, M, X, G, dW);
    if (rows > INT_MAX || K > INT_MAX || M > INT_MAX) return kErrTooLarge;
    const idx_t T = omp_get_max_threads();
    std::vector<float> partial(size_t((T - 1) * K * M));   // zero: a thread that never starts adds nothing
#pragma omp parallel num_threads(int(T))
    {
        const idx_t t = omp_get_thread_num();
        const idx_t chunk = (rows + T - 1) / T, r0 = std::min(rows, t * chunk), r1 = std::min(rows, r0 + chunk);
        float* out = t == 0 ? dW : partial.data() + (t - 1) * K * M;
        if (r1 > r0) sgemm_block(true, false, K, M, r1 - r0, X + r0 * K, K, G + r0 * M, M, 0.0f, out, M);
        else std::fill(out, out + K * M, 0.0f);
    }
    if (T > 1) {
#pragma omp parallel for schedule(static)
        for (idx_t i = 0; i < K * M; ++i) {
            float acc = dW[i];
            for (idx_t t = 1; t < T; ++t) acc += partial[size_t((t - 1) * K * M + i)];
            dW[i] = acc;
        }
    }
    return kOk;
}

// The products of one gathered tile on the calling thread (typed_linear.h, edge_typed_linear.h).
// Narrow outputs (N <= 64, the widths of hidden layers) go through the tall-skinny register tiles
// instead of a single-threaded BLAS call, which packs both operands for every tile of 128 rows:
// HGT on acm_heco (64-wide typed linears), 2 threads, AVX-512, the typed linears took 13.5 ms per
// epoch with BLAS and 9.0 ms this way (the epoch 21.3 -> 16.8 ms).
//   C[n, N] = A[n, K] B[K, N]
inline void tile_nn(idx_t n, idx_t N, idx_t K, const float* A, const float* B, float* C) {
    if (N <= kSkinnyMaxWidth) skinny_detail::nn_rows(A, K, B, N, C, 0, n, Epilogue{});
    else sgemm_block(false, false, n, N, K, A, K, B, N, 0.f, C, N);
}
//   C[n, N] = A[n, K] B[N, K]^T, with bt the caller's N * K floats holding B^T, filled when
//   *bt_of (which B it holds) is not B: a thread's tiles come type after type, and copying B^T
//   for every tile made HGT's typed linears on acm_heco 4% slower (9.9-10.1 against 9.4-9.7 ms
//   an epoch, three runs each).
inline void tile_nt(idx_t n, idx_t N, idx_t K, const float* A, const float* B, float* C, float* bt,
                    const float** bt_of) {
    if (N > kSkinnyMaxWidth) return sgemm_block(false, true, n, N, K, A, K, B, K, 0.f, C, N);
    if (*bt_of != B) {
        transpose_small(B, N, K, bt);
        *bt_of = B;
    }
    skinny_detail::nn_rows(A, K, bt, N, C, 0, n, Epilogue{});
}
//   C[K, M] (+)= A[n, K]^T B[n, M]; accumulate: add to C, else overwrite it
inline void tile_tn(idx_t n, idx_t K, idx_t M, const float* A, const float* B, bool accumulate, float* C) {
    if (M > kSkinnyMaxWidth) return sgemm_block(true, false, K, M, n, A, K, B, M, accumulate ? 1.f : 0.f, C, M);
    if (!accumulate) std::fill(C, C + K * M, 0.f);
    skinny_detail::tn_rows(A, K, B, M, C, 0, n);
}

// The same products with A's rows gathered where they lie (row i of the tile is A + rows[i] *
// lda), for outputs of kSkinnyMaxWidth or fewer: a typed linear's tile of node rows needs no copy
// into a buffer first.  2 threads, AVX-512, two interleaved runs each: the typed-linear family of
// R-GCN with bases on typed-16 3.28-3.33 -> 2.95 ms an epoch (the epoch 4.8 -> 4.4-4.5 ms), of
// R-GAT (examples/bench/rgat_pyg.mp) there 7.29 -> 6.20 ms.
//   C[n, N] = A[rows[i]] B, lda = K
inline void tile_nn_gathered(idx_t n, idx_t N, idx_t K, const float* A, const idx_t* rows, const float* B,
                             float* C) {
    skinny_detail::nn_rows<true>(A, K, B, N, C, 0, n, Epilogue{}, rows);
}
//   C[K, M] (+)= (A[rows[i], 0:K])^T B[n, M], A's rows lda floats apart
inline void tile_tn_gathered(idx_t n, idx_t K, idx_t M, const float* A, idx_t lda, const idx_t* rows,
                             const float* B, bool accumulate, float* C) {
    if (!accumulate) std::fill(C, C + K * M, 0.f);
    skinny_detail::tn_rows(A, K, B, M, C, 0, n, rows, lda);
}

}  // namespace mg
