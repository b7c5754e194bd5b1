// The sparse input-feature path on the device (Morphling §IV-B): X W for CSR features X without
// densifying them, and the weight gradient X^T G over the transposed (CSC) copy built once at
// prepare, so both directions are row-per-thread-group gathers with no atomics.  A dropout on the
// features is applied on the fly with the element index r * cols + c (the dense path's index),
// so both paths drop the same elements.
#ifndef MORPHGEN_CUDA_SPARSE_FEATURES_CUH
#define MORPHGEN_CUDA_SPARSE_FEATURES_CUH

#include <cstdint>

#include "../device.cuh"
#include "aggregate.cuh"
#include "dropout.cuh"
#include "op_types.h"

namespace mg {
namespace cuda {

struct FeatureDrop {
    DropStream stream{};
    uint64_t thr = 0;
    float scale = 1.f;
    bool on = false;
    const int64_t *row_ids = nullptr;   // row r drops as row row_ids[r] (distributed runs)
};

// Y[r, :] = sum_k val[k] * keep(r, c_k) * W[c_k, :] over row r's nonzeros, one group per row;
// rows of more nonzeros than split.edges (1,290 in an acm_heco author row) in pieces, by groups
// [0, split.segments), whose partial sums SplitRowSumOp adds in order (as csc_weight_grad_kernel).
// The nonzero loops here are unrolled so that several nonzeros' loads are in flight at once: a
// loop that takes one nonzero at a time waits on two dependent memory reads for each one.
__global__ void __launch_bounds__(256) csr_linear_kernel(const int64_t *indptr, const int32_t *indices,
                                                           const float *vals, int64_t rows, int64_t cols,
                                                           const float *W, int64_t M, float *Y, FeatureDrop drop,
                                                           int tpr, RowSplit split) {
    const int64_t group = int64_t(blockIdx.x) * (blockDim.x / tpr) + threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    int64_t seg;
    const int64_t r = split_row(split, group, seg);
    if (r >= rows) return;
    int64_t first = indptr[r], end = indptr[r + 1];
    if (!split_range(split, seg, first, end)) return;   // walked by its pieces' groups
    float *out = seg >= 0 ? split.partial + seg * M : Y + r * M;
    const uint64_t base = drop.on ? drop.stream.at_this_epoch().base : 0;
    const int64_t id = drop.row_ids ? drop.row_ids[r] : r;
    for (int64_t f = lane; f < M; f += tpr) {
        float acc = 0.f;
#pragma unroll 4
        for (int64_t k = first; k < end; ++k) {
            const int64_t c = indices[k];
            float v = vals[k];
            if (drop.on) v = dropout_detail::keep(base, uint64_t(id * cols + c), drop.thr) ? v * drop.scale : 0.f;
            acc += v * W[c * M + f];
        }
        out[f] = acc;
    }
}

// dW[c, :] = sum over column c's nonzeros (r, val) of val * keep(r, c) * G[r, :].  A column with
// more nonzeros than split.edges (a word that most documents have: 7,108 of acm_heco's 7,167
// author rows) is walked in pieces of that many by groups [0, split.segments), each writing its
// partial sums, which SplitRowSumOp adds in order afterwards; the groups after them take one whole
// column each.  One group walking such a column alone took most of the kernel's time.
__global__ void __launch_bounds__(256) csc_weight_grad_kernel(const int64_t *colptr, const int64_t *row_of,
                                                                const float *vals, int64_t cols, const float *G,
                                                                int64_t M, float *dW, FeatureDrop drop, int tpr,
                                                                RowSplit split) {
    const int64_t group = int64_t(blockIdx.x) * (blockDim.x / tpr) + threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    int64_t seg;
    const int64_t c = split_row(split, group, seg);
    if (c >= cols) return;
    int64_t first = colptr[c], end = colptr[c + 1];
    if (!split_range(split, seg, first, end)) return;   // walked by its pieces' groups
    float *out = seg >= 0 ? split.partial + seg * M : dW + c * M;
    const uint64_t base = drop.on ? drop.stream.at_this_epoch().base : 0;
    for (int64_t f = lane; f < M; f += tpr) {
        float acc = 0.f;
#pragma unroll 4
        for (int64_t k = first; k < end; ++k) {
            const int64_t r = row_of[k];
            float v = vals[k];
            if (drop.on) {
                const int64_t id = drop.row_ids ? drop.row_ids[r] : r;
                v = dropout_detail::keep(base, uint64_t(id * cols + c), drop.thr) ? v * drop.scale : 0.f;
            }
            acc += v * G[r * M + f];
        }
        out[f] = acc;
    }
}

// The product rows of a typed linear of CSR feature rows read at edge ends (ops.cuh,
// edge_typed_linear_features): Y[r, :] = sum over the nonzeros (c, val) of feature row x_rows[r]
// of val * W[t][c, :], t the row's type.  Rows are type-major: type t owns rows
// [type_ptr[t], type_ptr[t + 1]), found by binary search.  Rows whose feature row has more
// nonzeros than split.edges are walked in pieces, as in csr_linear_kernel.
__global__ void __launch_bounds__(256) csr_typed_rows_kernel(const int64_t *indptr, const int32_t *indices,
                                                               const float *vals, const int64_t *x_rows,
                                                               const int64_t *type_ptr, int64_t types, int64_t rows,
                                                               int64_t cols, const float *W, int64_t M, float *Y,
                                                               int tpr, RowSplit split) {
    const int64_t group = int64_t(blockIdx.x) * (blockDim.x / tpr) + threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    int64_t seg;
    const int64_t r = split_row(split, group, seg);
    if (r >= rows) return;
    int64_t lo = 0, hi = types - 1;             // the last type whose first row is at or before r
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (type_ptr[mid] <= r) lo = mid;
        else hi = mid - 1;
    }
    const float *Wt = W + lo * cols * M;
    const int64_t x = x_rows[r];
    int64_t first = indptr[x], end = indptr[x + 1];
    if (!split_range(split, seg, first, end)) return;   // walked by its pieces' groups
    float *out = seg >= 0 ? split.partial + seg * M : Y + r * M;
    for (int64_t f = lane; f < M; f += tpr) {
        float acc = 0.f;
#pragma unroll 4
        for (int64_t k = first; k < end; ++k) acc += vals[k] * Wt[int64_t(indices[k]) * M + f];
        out[f] = acc;
    }
}

}  // namespace cuda
}  // namespace mg
#endif
