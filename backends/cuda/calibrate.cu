// The GPU's dense/sparse feature-path crossover (morphgen/backends/cuda/calibrate.py), measured
// with the kernels a CUDA model runs: cuBLAS for dense features (X W and X^T G, op::linear and
// op::matmul_tn) against the CSR kernels for sparse ones (op::linear_features and
// op::matmul_tn_features).  The method is the CPU's (backends/openmp/kernels/calibrate.h): the
// sparse path's time grows with the density d, the dense path's does not; where they meet, d* is
// the ratio of their FLOP rates, rho, and tau = 1 - rho is the sparsity above which the sparse path
// is the faster.  Times are the best of `reps` runs between CUDA events, after one warm-up run.
#include "ops.cuh"

#include <random>

namespace {

using namespace mg;

// Seconds of fn() between two events on the op layer's stream: the best of reps, after a warm-up.
template <class Fn>
double best_seconds(int reps, Fn fn) {
    cudaEvent_t start, stop;
    cuda::check(cudaEventCreate(&start), "calibration events");
    cuda::check(cudaEventCreate(&stop), "calibration events");
    fn();
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        cuda::check(cudaEventRecord(start, cuda::stream()), "calibration events");
        fn();
        cuda::check(cudaEventRecord(stop, cuda::stream()), "calibration events");
        cuda::check(cudaEventSynchronize(stop), "calibration events");
        float ms = 0.f;
        cuda::check(cudaEventElapsedTime(&ms, start, stop), "calibration events");
        best = std::min(best, 1e-3 * double(ms));
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return best;
}

// A rows x K feature matrix whose values are nonzero with probability `density`, as CSR.  The
// gaps between nonzeros are drawn (geometric), so the cost follows the nonzeros, not rows x K.
struct HostFeatures {
    std::vector<int64_t> indptr;
    std::vector<int32_t> indices;
    std::vector<float> data;
};
HostFeatures random_features(int64_t rows, int64_t K, double density, uint64_t seed) {
    HostFeatures h;
    h.indptr.assign(size_t(rows + 1), 0);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> value(-0.5f, 0.5f);
    std::geometric_distribution<int64_t> gap(std::min(1.0, density));
    int64_t row = 0;
    for (int64_t at = gap(rng); at < rows * K; at += 1 + gap(rng)) {
        for (; row < at / K; ++row) h.indptr[size_t(row + 1)] = int64_t(h.indices.size());
        h.indices.push_back(int32_t(at % K));
        h.data.push_back(value(rng));
    }
    for (; row < rows; ++row) h.indptr[size_t(row + 1)] = int64_t(h.indices.size());
    return h;
}

// One layer's feature work on the given features: Y = X W, then dW = X^T G.
double layer_seconds(const FeatureView &x, SparseFeatureBlocks &blocks, const float *W, const float *G, int64_t F,
                     float *Y, float *dW, int reps) {
    return best_seconds(reps, [&] {
        op::linear_features(x, blocks, W, F, Y);
        op::matmul_tn_features(x, blocks, G, F, dW);
    });
}

}  // namespace

extern "C" {

// rho (*density), the sparse and the dense path's GFLOP/s at it.  Returns 0, or 1 with the
// failure's message in err (a missing GPU, a CUDA error).
int mgc_sparse_dense_crossover(int64_t rows, int64_t K, int64_t F, int reps, double *density, double *sparse_gflops,
                               double *dense_gflops, char *err, int err_len) {
    try {
        op::select_device();
        std::mt19937_64 rng(7);
        std::uniform_real_distribution<float> u(-0.5f, 0.5f);
        std::vector<float> w(size_t(K * F)), g(size_t(rows * F));
        for (auto &v : w) v = u(rng);
        for (auto &v : g) v = u(rng);
        cuda::DeviceArray<float> W, G, Y, dW, dense;
        W.upload(w, "calibration weights");
        G.upload(g, "calibration gradients");
        Y.allocate(rows * F);
        dW.allocate(K * F);

        const HostFeatures full = random_features(rows, K, 1.0, 42);
        dense.upload(full.data, "calibration features");
        FeatureView x;
        x.kind = FeatureKind::Dense;
        x.rows = rows;
        x.cols = K;
        x.dense = dense.data();
        SparseFeatureBlocks none;
        const double t_dense = layer_seconds(x, none, W.data(), G.data(), F, Y.data(), dW.data(), reps);
        dense.reset();

        // Denser than half, the sparse path has long lost on every GPU measured; the grid's end
        // stands for "never faster".
        const double grid[] = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5};
        double prev_d = 0, prev_t = 0, cross = grid[std::size(grid) - 1];
        for (double d : grid) {
            const HostFeatures h = random_features(rows, K, d, 42);
            cuda::DeviceArray<int64_t> indptr;
            cuda::DeviceArray<int32_t> indices;
            cuda::DeviceArray<float> data;
            FeatureView s;
            s.kind = FeatureKind::Csr;
            s.rows = rows;
            s.cols = K;
            s.nnz = int64_t(h.data.size());
            s.indptr = indptr.upload(h.indptr, "calibration features");
            s.indices = indices.upload(h.indices, "calibration features");
            s.data = data.upload(h.data, "calibration features");
            SparseFeatureBlocks blocks;
            op::build_feature_blocks(s, blocks);
            const double t_sparse = layer_seconds(s, blocks, W.data(), G.data(), F, Y.data(), dW.data(), reps);
            if (t_sparse >= t_dense) {  // log-log interpolation of t_sparse(d) = t_dense
                cross = d;
                if (prev_d > 0) {
                    const double slope = (std::log(t_sparse) - std::log(prev_t)) / (std::log(d) - std::log(prev_d));
                    if (slope > 0) cross = std::exp(std::log(prev_d) + (std::log(t_dense) - std::log(prev_t)) / slope);
                }
                break;
            }
            prev_d = d;
            prev_t = t_sparse;
        }
        *density = std::min(grid[std::size(grid) - 1], std::max(grid[0], cross));
        const double work = 4.0 * double(rows) * double(K) * double(F);
        *dense_gflops = work / t_dense / 1e9;
        *sparse_gflops = *density * work / t_dense / 1e9;  // the same time for d* of the work
        return 0;
    } catch (const std::exception &e) {
        std::snprintf(err, size_t(err_len), "%s", e.what());
        return 1;
    }
}

// The name of the GPU the calibration runs on ($MORPHGEN_CUDA_DEVICE), for its cache key.
int mgc_device_name(char *name, int len) {
    try {
        op::select_device();
        int device = 0;
        cudaDeviceProp prop;
        cuda::check(cudaGetDevice(&device), "the GPU's name");
        cuda::check(cudaGetDeviceProperties(&prop, device), "the GPU's name");
        std::snprintf(name, size_t(len), "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
        return 0;
    } catch (const std::exception &e) {
        std::snprintf(name, size_t(len), "%s", e.what());
        return 1;
    }
}

}  // extern "C"
