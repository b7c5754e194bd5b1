// Machine calibration microbenchmarks:
//   * stream_triad_gbs: STREAM-like triad a = b + s*c (OpenMP), the bandwidth roof for SpMM;
//   * sparse_dense_ratio: rho = sustained FLOP/s of the sparse-feature path / dense sgemm FLOP/s,
//     which sets the dense/sparse switch threshold tau = 1 - rho (Morphling IV-B);
//   * spmm_gbs: effective bandwidth of the aggregation kernel on a given CSR.
// All timings keep the best of `reps` runs (the least disturbed one), as STREAM does.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common.h"
#include "gemm.h"
#include "sparse_features.h"
#include "spmm.h"

namespace mg {

// Best-of-reps bandwidth of a[i] = b[i] + s*c[i] over n floats, counting 3 * 4 bytes per element
// (STREAM's convention: the write-allocate read of `a` is not counted).
inline double stream_triad_gbs(idx_t n, int reps) {
    std::vector<float> a(n), b(n), c(n);
    float* pa = a.data();
    float* pb = b.data();
    float* pc = c.data();
    // First touch in parallel so pages land near the threads that use them.
#pragma omp parallel for schedule(static)
    for (idx_t i = 0; i < n; ++i) {
        pa[i] = 0.f;
        pb[i] = 1.f;
        pc[i] = 2.f;
    }
    const float s = 3.f;
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (idx_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
        best = std::min(best, omp_get_wtime() - t0);
    }
    volatile float sink = pa[n / 2];  // keep the stores observable
    (void)sink;
    return 3.0 * 4.0 * static_cast<double>(n) / best / 1e9;
}

// Deterministic xorshift stream for benchmark inputs (no dependence on <random> implementations).
struct BenchRng {
    std::uint64_t s;
    explicit BenchRng(std::uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    std::uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    float uniform() { return static_cast<float>(next() >> 40) / static_cast<float>(1ull << 24); }
};

struct RhoResult {
    double sparse_gflops;  // algorithmic FLOPs (2 * nnz * F) per second of the sparse path
    double dense_gflops;   // 2 * rows * K * F per second of sgemm
    double rho;            // sparse_gflops / dense_gflops
};

// rho on an X [rows x K] feature matrix of the given density, times W [K x F].
inline RhoResult sparse_dense_ratio(idx_t rows, idx_t K, idx_t F, double density, int reps) {
    BenchRng rng(42);
    std::vector<std::int64_t> indptr(rows + 1, 0);
    std::vector<std::int32_t> col;
    std::vector<float> val, dense(static_cast<size_t>(rows) * K, 0.f);
    col.reserve(static_cast<size_t>(rows * K * density * 1.2) + 16);
    for (idx_t r = 0; r < rows; ++r) {
        for (idx_t k = 0; k < K; ++k) {
            if (rng.uniform() < density) {
                const float v = rng.uniform() - 0.5f;
                col.push_back(static_cast<std::int32_t>(k));
                val.push_back(v);
                dense[static_cast<size_t>(r) * K + k] = v;
            }
        }
        indptr[r + 1] = static_cast<idx_t>(col.size());
    }
    std::vector<float> W(static_cast<size_t>(K) * F), Y(static_cast<size_t>(rows) * F);
    for (auto& w : W) w = rng.uniform() - 0.5f;
    SparseFeatureBlocks X;
    if (build_feature_blocks(rows, K, indptr.data(), col.data(), val.data(), feature_block_cols(), X) != kOk)
        return RhoResult{0, 0, 0};
    blas_match_openmp_threads();
    double t_sparse = 1e30, t_dense = 1e30;
    for (int r = 0; r < reps; ++r) {
        double t0 = omp_get_wtime();
        sparse_linear_forward(X, W.data(), F, Y.data());
        t_sparse = std::min(t_sparse, omp_get_wtime() - t0);
        t0 = omp_get_wtime();
        linear_forward(rows, K, F, dense.data(), W.data(), Y.data());
        t_dense = std::min(t_dense, omp_get_wtime() - t0);
    }
    const double nnz = static_cast<double>(col.size());
    RhoResult res;
    res.sparse_gflops = 2.0 * nnz * F / t_sparse / 1e9;
    res.dense_gflops = 2.0 * static_cast<double>(rows) * K * F / t_dense / 1e9;
    res.rho = res.sparse_gflops / res.dense_gflops;
    return res;
}

// Bytes an aggregation (sum, unweighted) must move at minimum: the CSR (indptr + col), one
// F-wide source row read per edge, one output row written per node.
inline double spmm_bytes(idx_t n, idx_t e, idx_t F) {
    return 8.0 * (n + 1) + 8.0 * e + 4.0 * static_cast<double>(e) * F + 4.0 * static_cast<double>(n) * F;
}

// Best-of-reps seconds of mg::spmm<TILE, LA> (sum, unweighted) on the given CSR.
template <int TILE = MG_SPMM_TILE, int LA = MG_SPMM_LOOKAHEAD>
double spmm_seconds(idx_t n, const idx_t* indptr, const idx_t* col, const float* X, idx_t F, float* Y,
                    int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const double t0 = omp_get_wtime();
        spmm<TILE, LA>(n, indptr, col, X, F, F, Y, F);
        best = std::min(best, omp_get_wtime() - t0);
    }
    return best;
}

}  // namespace mg
