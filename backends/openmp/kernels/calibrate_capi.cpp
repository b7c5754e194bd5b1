// C entry points of calibrate.h, built by morphgen/calibrate.py through morphgen.toolchain.
#include "calibrate.h"

extern "C" {

// The vector ISA the kernels were built for (simd.h): "avx512", "avx2" or "portable".
const char* mg_simd_isa() { return MG_SIMD_ISA; }

double mg_stream_triad_gbs(std::int64_t n, int reps) { return mg::stream_triad_gbs(n, reps); }

int mg_sparse_dense_crossover(std::int64_t rows, std::int64_t K, std::int64_t F, int reps, double* density,
                              double* sparse_gflops, double* dense_gflops) {
    if (rows <= 0 || K <= 0 || F <= 0 || reps <= 0) return mg::kErrArgument;
    const mg::CrossoverResult r = mg::sparse_dense_crossover(rows, K, F, reps);
    *density = r.density;
    *sparse_gflops = r.sparse_gflops;
    *dense_gflops = r.dense_gflops;
    return r.status;
}

// Seconds of one aggregation with lookahead `la` (0, 4, 8, 16, 32 are instantiated); -1 otherwise.
double mg_spmm_seconds(int la, std::int64_t n, const std::int64_t* indptr, const std::int64_t* col,
                       const float* X, std::int64_t F, float* Y, int reps) {
    switch (la) {
        case 0: return mg::spmm_seconds<32, 0>(n, indptr, col, X, F, Y, reps);
        case 4: return mg::spmm_seconds<32, 4>(n, indptr, col, X, F, Y, reps);
        case 8: return mg::spmm_seconds<32, 8>(n, indptr, col, X, F, Y, reps);
        case 16: return mg::spmm_seconds<32, 16>(n, indptr, col, X, F, Y, reps);
        case 32: return mg::spmm_seconds<32, 32>(n, indptr, col, X, F, Y, reps);
        default: return -1.0;
    }
}

double mg_spmm_bytes(std::int64_t n, std::int64_t e, std::int64_t F) { return mg::spmm_bytes(n, e, F); }

void mg_set_threads(int n) { omp_set_num_threads(n); }
int mg_max_threads() { return omp_get_max_threads(); }

}  // extern "C"
