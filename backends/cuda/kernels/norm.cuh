// Normalisation layers without their affine part (as backends/openmp/kernels/norm.h): layer norm
// with one warp per row, batch norm with one warp per feature summing over the rows in a fixed
// order (reproducible), statistics in double.
#pragma once

#include "elementwise.cuh"

namespace mg {
namespace cuda {

// Layer norm forward (g == nullptr) or backward, one warp per row.
__global__ void layer_standardize_kernel(const float *x, const float *g, const float *y, int64_t rows, int64_t F,
                                         float eps, float *out) {
    const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float *xr = x + r * F;
    double s = 0.0;
    for (int64_t j = lane; j < F; j += 32) s += xr[j];
    const double mean = warp_sum(s) / double(F);
    double q = 0.0;
    for (int64_t j = lane; j < F; j += 32) q += (xr[j] - mean) * (xr[j] - mean);
    const float inv = float(1.0 / sqrt(warp_sum(q) / double(F) + double(eps)));
    float *o = out + r * F;
    if (!g) {
        for (int64_t j = lane; j < F; j += 32) o[j] = (xr[j] - float(mean)) * inv;
        return;
    }
    const float *gr = g + r * F, *yr = y + r * F;
    double sg = 0.0, sgy = 0.0;
    for (int64_t j = lane; j < F; j += 32) {
        sg += gr[j];
        sgy += double(gr[j]) * yr[j];
    }
    const float mg_ = float(warp_sum(sg) / double(F)), mgy = float(warp_sum(sgy) / double(F));
    for (int64_t j = lane; j < F; j += 32) o[j] = (gr[j] - mg_ - yr[j] * mgy) * inv;
}

// out[j] = sum_i v(i, j) over the rows, one warp per feature j, where v is (a - centre[j])^2
// (square), a * b, or a.
__global__ void column_sum_of_kernel(const float *a, const float *b, const float *centre, bool square, int64_t rows,
                                     int64_t F, float *out) {
    const int64_t j = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (j >= F) return;
    double s = 0.0;
    for (int64_t i = lane; i < rows; i += 32) {
        const float v = a[i * F + j];
        if (square) {
            const float d = v - centre[j];
            s += double(d) * d;
        } else {
            s += b ? double(v) * b[i * F + j] : double(v);
        }
    }
    s = warp_sum(s);
    if (lane == 0) out[j] = float(s);
}

struct MeanOp {               // sum[j] -> sum[j] / total
    float *sum;
    int64_t total;
    __device__ void operator()(int64_t j) const { sum[j] /= float(total); }
};

// Per feature, from the mean and the sum of squared deviations: 1/sqrt(var + eps); in training
// the running statistics move towards the batch ones (variance unbiased, as torch).
struct BatchMomentsOp {
    const float *mean;
    float *sq;                   // in: sum of squared deviations; out: inverse deviation
    float *run_mean, *run_var;
    int64_t total;
    float eps, momentum;
    bool update;
    __device__ void operator()(int64_t j) const {
        const float var = sq[j] / float(total);
        if (update) {
            const float unbias = total > 1 ? float(total) / float(total - 1) : 1.f;
            run_mean[j] = (1.f - momentum) * run_mean[j] + momentum * mean[j];
            run_var[j] = (1.f - momentum) * run_var[j] + momentum * var * unbias;
        }
        sq[j] = 1.f / sqrtf(var + eps);
    }
};

struct RunningMomentsOp {      // evaluation: the running statistics
    const float *run_mean, *run_var;
    float *mean, *inv;
    float eps;
    __device__ void operator()(int64_t j) const {
        mean[j] = run_mean[j];
        inv[j] = 1.f / sqrtf(run_var[j] + eps);
    }
};

// y = (x - mean) * inv (forward) or dx = (g - sg / n - y * sgy / n) * inv (backward).
struct BatchApplyOp {
    const float *x, *g, *y, *mean, *inv, *sg, *sgy;
    float *out;
    int64_t F, total;
    __device__ void operator()(int64_t k) const {
        const int64_t j = k % F;
        out[k] = g ? (g[k] - sg[j] / float(total) - y[k] * (sgy[j] / float(total))) * inv[j]
                   : (x[k] - mean[j]) * inv[j];
    }
};

}  // namespace cuda

inline void layer_standardize_fwd(const float *x, int64_t rows, int64_t F, float eps, float *y) {
    cuda::launch("layer norm (layer_standardize_kernel)", cuda::layer_standardize_kernel, dim3(cuda::warp_blocks(rows)),
                 dim3(cuda::kThreads), x, (const float *)nullptr, (const float *)nullptr, rows, F, eps, y);
}
inline void layer_standardize_bwd(const float *g, const float *x, const float *y, int64_t rows, int64_t F, float eps,
                                  float *dx) {
    cuda::launch("layer norm backward (layer_standardize_kernel)", cuda::layer_standardize_kernel,
                 dim3(cuda::warp_blocks(rows)), dim3(cuda::kThreads), x, g, y, rows, F, eps, dx);
}

namespace norm_detail {
// Scratch for per-feature statistics: [4, F] device floats, reused by every batch norm.
inline float *stats(int64_t F) {
    static cuda::DeviceArray<float> scratch;
    if (scratch.size() < 4 * F) scratch.allocate(4 * F);
    return scratch.data();
}
inline void column_sum(const char *name, const float *a, const float *b, const float *centre, bool square,
                       int64_t rows, int64_t F, float *out) {
    cuda::launch(name, cuda::column_sum_of_kernel, dim3(cuda::warp_blocks(F)), dim3(cuda::kThreads), a, b, centre,
                 square, rows, F, out);
}
// mean (in stats[0:F]) and 1/sqrt(var + eps) (in stats[F:2F]) of x's features.
inline void moments(const float *x, int64_t rows, int64_t total, int64_t F, float eps, float *run_mean, float *run_var,
                    float momentum, bool update, float *stats) {
    column_sum("batch norm sums (column_sum_of_kernel)", x, nullptr, nullptr, false, rows, F, stats);
    cuda::map("batch norm mean (MeanOp)", F, cuda::MeanOp{stats, total});
    column_sum("batch norm squares (column_sum_of_kernel)", x, nullptr, stats, true, rows, F, stats + F);
    cuda::map("batch norm moments (BatchMomentsOp)", F,
              cuda::BatchMomentsOp{stats, stats + F, run_mean, run_var, total, eps, momentum, update});
}
}  // namespace norm_detail

// One process holds every row: `across` has nothing to add (it exists for the MPI backend's API).
template <class Across>
void batch_standardize_fwd(bool training, const float *x, int64_t rows, int64_t total, int64_t F, float *run_mean,
                           float *run_var, float eps, float momentum, float *y, Across) {
    float *stats = norm_detail::stats(F);
    if (training) {
        norm_detail::moments(x, rows, total, F, eps, run_mean, run_var, momentum, true, stats);
    } else {
        cuda::map("batch norm running statistics (RunningMomentsOp)", F,
                  cuda::RunningMomentsOp{run_mean, run_var, stats, stats + F, eps});
    }
    cuda::map("batch norm (BatchApplyOp)", rows * F,
              cuda::BatchApplyOp{x, nullptr, nullptr, stats, stats + F, nullptr, nullptr, y, F, total});
}

template <class Across>
void batch_standardize_bwd(const float *g, const float *x, const float *y, int64_t rows, int64_t total, int64_t F,
                           float eps, float *dx, Across) {
    float *stats = norm_detail::stats(F);
    norm_detail::moments(x, rows, total, F, eps, nullptr, nullptr, 0.f, false, stats);
    norm_detail::column_sum("batch norm backward (column_sum_of_kernel)", g, nullptr, nullptr, false, rows, F,
                            stats + 2 * F);
    norm_detail::column_sum("batch norm backward (column_sum_of_kernel)", g, y, nullptr, false, rows, F, stats + 3 * F);
    cuda::map("batch norm backward (BatchApplyOp)", rows * F,
              cuda::BatchApplyOp{x, g, y, nullptr, stats + F, stats + 2 * F, stats + 3 * F, dx, F, total});
}

}  // namespace mg
