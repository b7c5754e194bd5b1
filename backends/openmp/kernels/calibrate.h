// Machine calibration microbenchmarks:
//   * stream_triad_gbs: STREAM-like triad a = b + s*c (OpenMP), the bandwidth roof for SpMM;
//   * sparse_dense_crossover: rho = FLOP/s of the sparse-feature path / FLOP/s of the dense path
//     on a whole layer's feature work, measured where the two take equal time; it sets the
//     dense/sparse switch threshold tau = 1 - rho (Morphling IV-B);
//   * spmm_gbs: effective bandwidth of the aggregation kernel on a given CSR.
// All timings keep the best of `reps` runs (the least disturbed one), as STREAM does.
#pragma once

#include <algorithm>
#include <cmath>
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

// A random rows x K feature matrix of the given density (CSR, and dense when `dense` != nullptr).
inline void random_features(idx_t rows, idx_t K, double density, std::uint64_t seed,
                            std::vector<std::int64_t>& indptr, std::vector<std::int32_t>& col,
                            std::vector<float>& val, std::vector<float>* dense) {
    BenchRng rng(seed);
    indptr.assign(size_t(rows + 1), 0);
    col.clear();
    val.clear();
    if (dense) dense->assign(size_t(rows) * size_t(K), 0.f);
    for (idx_t r = 0; r < rows; ++r) {
        for (idx_t k = 0; k < K; ++k) {
            const bool stored = density >= 1.0 || rng.uniform() < density;
            const float v = rng.uniform() - 0.5f;
            if (!stored) continue;
            col.push_back(static_cast<std::int32_t>(k));
            val.push_back(v);
            if (dense) (*dense)[size_t(r) * size_t(K) + size_t(k)] = v;
        }
        indptr[size_t(r + 1)] = static_cast<std::int64_t>(col.size());
    }
}

struct CrossoverResult {
    double density;        // where one layer's feature work costs the same on both paths (= rho)
    double sparse_gflops;  // at that density: 4 * nnz * F per second (forward + weight gradient)
    double dense_gflops;   // 4 * rows * K * F per second of the dense path
    int status;            // kOk, or the first failing kernel's status
};

// rho as the generated programs will see it: the whole feature work of a linear layer on the
// input (Y = X W and dW = X^T G), timed on the product's own dense path (gemm_rows/gemm_tn_rows
// on one pool) and sparse path (column blocks), best of `reps`. The sparse time grows with the
// density d, the dense time does not; the density where they meet is the crossover d*, and since
// both do the same useful work there, sparse FLOP/s / dense FLOP/s = d* = rho: tau = 1 - rho is
// the sparsity above which the sparse path is faster. The crossover is interpolated (log-log)
// between the two grid densities that bracket it; beyond the grid it is clamped to its ends.
inline CrossoverResult sparse_dense_crossover(idx_t rows, idx_t K, idx_t F, int reps) {
    CrossoverResult res{0, 0, 0, kOk};
    std::vector<std::int64_t> indptr;
    std::vector<std::int32_t> col;
    std::vector<float> val, dense;
    BenchRng rng(7);
    std::vector<float> W(size_t(K) * F), G(size_t(rows) * F), Y(size_t(rows) * F), dW(size_t(K) * F);
    for (auto& w : W) w = rng.uniform() - 0.5f;
    for (auto& g : G) g = rng.uniform() - 0.5f;
    blas_set_threads(1);
    random_features(rows, K, 1.0, 42, indptr, col, val, &dense);
    double t_dense = 1e30;
    for (int r = 0; r < reps; ++r) {
        const double t0 = omp_get_wtime();
        int st = gemm_rows(rows, F, K, dense.data(), W.data(), false, Y.data());
        if (st == kOk) st = gemm_tn_rows(rows, K, F, dense.data(), G.data(), dW.data());
        if (st != kOk) return CrossoverResult{0, 0, 0, st};
        t_dense = std::min(t_dense, omp_get_wtime() - t0);
    }
    std::vector<float>().swap(dense);
    const double grid[] = {0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 1.0};
    double prev_d = 0, prev_t = 0;
    for (double d : grid) {
        random_features(rows, K, d, 42, indptr, col, val, nullptr);
        SparseFeatureBlocks X;
        int st = build_feature_blocks(rows, K, indptr.data(), col.data(), val.data(), feature_block_cols(), X);
        double t_sparse = 1e30;
        for (int r = 0; r < reps && st == kOk; ++r) {
            const double t0 = omp_get_wtime();
            st = sparse_linear_forward(X, W.data(), F, Y.data());
            if (st == kOk) st = sparse_weight_grad(X, G.data(), F, dW.data());
            t_sparse = std::min(t_sparse, omp_get_wtime() - t0);
        }
        if (st != kOk) return CrossoverResult{0, 0, 0, st};
        if (t_sparse >= t_dense || d == 1.0) {
            double cross = d;
            if (t_sparse >= t_dense && prev_d > 0) {  // log-log interpolation of t_sparse(d) = t_dense
                const double s = (std::log(t_sparse) - std::log(prev_t)) / (std::log(d) - std::log(prev_d));
                cross = s > 0 ? std::exp(std::log(prev_d) + (std::log(t_dense) - std::log(prev_t)) / s) : d;
            }
            res.density = std::min(1.0, std::max(grid[0], cross));
            break;
        }
        prev_d = d;
        prev_t = t_sparse;
    }
    const double work = 4.0 * double(rows) * double(K) * double(F);
    res.dense_gflops = work / t_dense / 1e9;
    res.sparse_gflops = res.density * work / t_dense / 1e9;  // same time, d* of the work
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
