// Machine-limit microbenchmarks for morphgen.bench.machine: STREAM-style copy and triad
// (McCalpin's kernels on double arrays) and single-precision GEMM through scipy-openblas32.
// Each timing function runs `reps` repetitions and stores the wall time of each in times[rep];
// Python picks the best one (STREAM's convention) and converts to GB/s or GFLOP/s.
#include <cblas.h>
#include <omp.h>

#include <cstddef>
#include <cstdint>

extern "C" {

// First touch in parallel, so each thread's pages sit near it (what STREAM does on NUMA hosts).
void mg_fill(double* a, std::int64_t n, double value, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::int64_t i = 0; i < n; ++i) a[i] = value;
}

void mg_copy(double* __restrict dst, const double* __restrict src, std::int64_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

void mg_triad(double* __restrict a, const double* __restrict b, const double* __restrict c,
              double scalar, std::int64_t n, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::int64_t i = 0; i < n; ++i) a[i] = b[i] + scalar * c[i];
}

void mg_time_copy(double* dst, const double* src, std::int64_t n, int threads, int reps, double* times) {
    for (int r = 0; r < reps; ++r) {
        double t0 = omp_get_wtime();
        mg_copy(dst, src, n, threads);
        times[r] = omp_get_wtime() - t0;
    }
}

void mg_time_triad(double* a, const double* b, const double* c, double scalar, std::int64_t n,
                   int threads, int reps, double* times) {
    for (int r = 0; r < reps; ++r) {
        double t0 = omp_get_wtime();
        mg_triad(a, b, c, scalar, n, threads);
        times[r] = omp_get_wtime() - t0;
    }
}

// C[m,n] = A[m,k] * B[k,n], row-major, with the BLAS pool pinned to `threads`.
void mg_time_sgemm(int m, int n, int k, const float* A, const float* B, float* C, int threads,
                   int reps, double* times) {
    scipy_openblas_set_num_threads(threads);
    for (int r = 0; r < reps; ++r) {
        double t0 = omp_get_wtime();
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, A, k, B, n, 0.0f, C, n);
        times[r] = omp_get_wtime() - t0;
    }
}

}  // extern "C"
