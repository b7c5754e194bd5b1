// Sparse layout conversions, done once at load time: CSR -> transpose CSR (== CSR -> CSC).
#pragma once

#include <vector>

#include "common.h"

namespace mg {

// Transpose of an (n_rows x n_cols) CSR pattern.
//   t_indptr[n_cols+1], t_row[nnz] = original row of the entry, t_pos[nnz] = its original position.
// Stable counting sort: inside each transposed row, entries keep increasing original position, so
// (with a row-sorted input) increasing original row; parallel edges end up adjacent. The max
// backward of spmm.h relies on that order. For a dst-sorted graph CSR this yields the by-source
// CSR (`t_indptr`, `t_col` = destination, `t_eid`).
// Returns kErrArgument if a column index is outside [0, n_cols).
inline int transpose_csr(idx_t n_rows, idx_t n_cols, const idx_t* indptr, const idx_t* col,
                         idx_t* t_indptr, idx_t* t_row, idx_t* t_pos) {
    const idx_t nnz = indptr[n_rows];
    for (idx_t c = 0; c <= n_cols; ++c) t_indptr[c] = 0;
    for (idx_t e = 0; e < nnz; ++e) {
        const idx_t c = col[e];
        if (c < 0 || c >= n_cols) return kErrArgument;
        ++t_indptr[c + 1];
    }
    for (idx_t c = 0; c < n_cols; ++c) t_indptr[c + 1] += t_indptr[c];
    std::vector<idx_t> next(t_indptr, t_indptr + n_cols);
    for (idx_t r = 0; r < n_rows; ++r) {
        for (idx_t e = indptr[r]; e < indptr[r + 1]; ++e) {
            const idx_t slot = next[col[e]]++;
            t_row[slot] = r;
            t_pos[slot] = e;
        }
    }
    return kOk;
}

// GCN normalisation scale s[v] = 1/sqrt(in_degree(v) + self_loop); 0 for a node with no terms.
// The in-degrees are the CSR's own, or `degree[v]` when given (a rank of a distributed run holds
// ghost nodes without their in-edges, and passes the global degrees).
inline void gcn_node_scale(idx_t n, const idx_t* indptr, bool self_loop, float* scale,
                           const float* degree = nullptr) {
#pragma omp parallel for schedule(static)
    for (idx_t v = 0; v < n; ++v) {
        const float d = (degree ? degree[v] : static_cast<float>(indptr[v + 1] - indptr[v])) + (self_loop ? 1.f : 0.f);
        scale[v] = d > 0 ? 1.0f / std::sqrt(d) : 0.0f;
    }
}

}  // namespace mg
