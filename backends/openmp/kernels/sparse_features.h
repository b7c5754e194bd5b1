// Sparse input-feature path (Morphling IV-B): X is a sparse [rows x K] CSR matrix, W is dense.
//
//   forward      Y  = X_csr * W        rows streamed through a hot K x TILE slab of W
//   weight grad  dW = X^T * G          over the CSC of X (gather per weight row, no atomics), or
//                                      over the CSR with thread-local buffers and one reduction
// The CSC is the transpose CSR of X: build it once with mg::transpose_csr (layout.h) and carry the
// values with mg::gather_by_position. The input X needs no gradient (it is data).
#pragma once

#include <vector>

#include "common.h"
#include "spmm.h"

namespace mg {

// Y[r, :] = sum_j val[j] * W[col[j], :] for j in row r, then the optional bias/activation epilogue.
// Loop order: W column slabs outermost (K x TILE floats stay in L1/L2 while every row streams
// through them), rows distributed dynamically inside each slab.  A slab larger than the L2
// (wide bag-of-words inputs: K = 61,278 gives 7.8 MB) is read at random like a neighbour list,
// so its rows are prefetched LOOKAHEAD non-zeros ahead as in the SpMM.
template <int TILE = MG_SPMM_TILE, int LOOKAHEAD = MG_SPMM_LOOKAHEAD>
int sparse_linear_forward(idx_t rows, idx_t K, idx_t F, const idx_t* indptr, const idx_t* col,
                          const float* val, const float* W, idx_t ldw, float* Y, idx_t ldy,
                          const Epilogue& epi = Epilogue{}) {
    static_assert(TILE > 0 && TILE <= 256, "tile width must lie in (0, 256]");
    if (rows < 0 || K < 0 || F < 0 || ldw < F || ldy < F || !indptr) return kErrArgument;
    using namespace spmm_detail;
    const bool slab_in_l2 = K * TILE * idx_t(sizeof(float)) <= (idx_t(1) << 20);
#pragma omp parallel
    {
        alignas(64) float vals[TILE];
        for (idx_t f0 = 0; f0 < F; f0 += TILE) {
            const int width = static_cast<int>(F - f0 < TILE ? F - f0 : TILE);
            const float* bias = epi.bias ? epi.bias + f0 : nullptr;
#pragma omp for schedule(dynamic, 64) nowait
            for (idx_t r = 0; r < rows; ++r) {
                const idx_t start = indptr[r];
                const idx_t nnz = indptr[r + 1] - start;
                const float* v = val + start;
                auto coef = [v](idx_t k) { return v[k]; };
                if (slab_in_l2) {
                    if (width == TILE) gather_sum<TILE, 0, false>(col + start, nnz, coef, W, ldw, f0, width, vals);
                    else gather_sum<TILE, 0, true>(col + start, nnz, coef, W, ldw, f0, width, vals);
                } else {
                    if (width == TILE) gather_sum<TILE, LOOKAHEAD, false>(col + start, nnz, coef, W, ldw, f0, width, vals);
                    else gather_sum<TILE, LOOKAHEAD, true>(col + start, nnz, coef, W, ldw, f0, width, vals);
                }
                finish_tile(vals, width, 1.f, nullptr, 0.f, epi, bias, false, Y + r * ldy + f0);
            }
        }
    }
    return kOk;
}

// dW[k, :] (+)= sum_{r in column k} X[r,k] * G[r, :], over the CSC of X (csc_indptr[K+1],
// csc_row, csc_val). Each thread owns whole rows of dW: no atomics and no reduction needed.
template <int TILE = MG_SPMM_TILE, int LOOKAHEAD = MG_SPMM_LOOKAHEAD>
int sparse_weight_grad_csc(idx_t K, idx_t F, const idx_t* csc_indptr, const idx_t* csc_row,
                           const float* csc_val, const float* G, idx_t ldg, float* dW, idx_t lddw,
                           bool accumulate = false) {
    static_assert(TILE > 0 && TILE <= 256, "tile width must lie in (0, 256]");
    if (K < 0 || F < 0 || ldg < F || lddw < F || !csc_indptr) return kErrArgument;
    using namespace spmm_detail;
    const Epilogue none{};
#pragma omp parallel for schedule(dynamic, 64)
    for (idx_t k = 0; k < K; ++k) {
        const idx_t start = csc_indptr[k];
        const idx_t nnz = csc_indptr[k + 1] - start;
        const float* v = csc_val + start;
        auto coef = [v](idx_t j) { return v[j]; };
        alignas(64) float vals[TILE];
        for (idx_t f0 = 0; f0 < F; f0 += TILE) {
            const int width = static_cast<int>(F - f0 < TILE ? F - f0 : TILE);
            if (width == TILE)
                gather_sum<TILE, LOOKAHEAD, false>(csc_row + start, nnz, coef, G, ldg, f0, width, vals);
            else
                gather_sum<TILE, LOOKAHEAD, true>(csc_row + start, nnz, coef, G, ldg, f0, width, vals);
            finish_tile(vals, width, 1.f, nullptr, 0.f, none, nullptr, accumulate, dW + k * lddw + f0);
        }
    }
    return kOk;
}

// The same gradient from the CSR alone: each thread scatters its rows into a private K x F
// buffer, then one parallel reduction over dW rows sums the buffers. No atomics; costs
// threads * K * F floats of scratch, so prefer the CSC form when the CSC is available.
inline int sparse_weight_grad_csr(idx_t rows, idx_t K, idx_t F, const idx_t* indptr, const idx_t* col,
                                  const float* val, const float* G, idx_t ldg, float* dW, idx_t lddw,
                                  bool accumulate = false) {
    if (rows < 0 || K < 0 || F < 0 || ldg < F || lddw < F || !indptr) return kErrArgument;
    const int T = omp_get_max_threads();
    std::vector<float> scratch(static_cast<size_t>(T) * static_cast<size_t>(K) * static_cast<size_t>(F), 0.f);
    float* buf = scratch.data();
#pragma omp parallel num_threads(T)
    {
        float* mine = buf + static_cast<size_t>(omp_get_thread_num()) * K * F;
#pragma omp for schedule(dynamic, 64)
        for (idx_t r = 0; r < rows; ++r) {
            const float* MG_RESTRICT g = G + r * ldg;
            for (idx_t j = indptr[r]; j < indptr[r + 1]; ++j) {
                float* MG_RESTRICT d = mine + col[j] * F;
                const float x = val[j];
#pragma omp simd
                for (idx_t f = 0; f < F; ++f) d[f] += x * g[f];
            }
        }
        // Implicit barrier above; now reduce the private buffers row by row.
#pragma omp for schedule(static)
        for (idx_t k = 0; k < K; ++k) {
            float* MG_RESTRICT out = dW + k * lddw;
            if (!accumulate) {
#pragma omp simd
                for (idx_t f = 0; f < F; ++f) out[f] = 0.f;
            }
            for (int t = 0; t < T; ++t) {
                const float* MG_RESTRICT part = buf + (static_cast<size_t>(t) * K + k) * F;
#pragma omp simd
                for (idx_t f = 0; f < F; ++f) out[f] += part[f];
            }
        }
    }
    return kOk;
}

}  // namespace mg
