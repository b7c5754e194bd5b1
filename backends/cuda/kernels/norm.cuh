// Normalisation layers without their affine part (as backends/openmp/kernels/norm.h): layer norm
// with one warp per row, batch norm's per-feature sums by chunks of rows added in a fixed order
// (reproducible), statistics in double.
#pragma once

#include <algorithm>

#include "elementwise.cuh"

namespace mg {
namespace cuda {

// Layer norm forward (g == nullptr) or backward, one warp per row; the arithmetic of the CPU
// kernel (float mean and differences, sums in double).
__global__ void layer_standardize_kernel(const float *x, const float *g, const float *y, int64_t rows, int64_t F,
                                         float eps, float *out) {
    const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float *xr = x + r * F;
    double s = 0.0;
    for (int64_t j = lane; j < F; j += 32) s += xr[j];
    const float mean = float(warp_sum(s) / double(F));
    double q = 0.0;
    for (int64_t j = lane; j < F; j += 32) {
        const float d = xr[j] - mean;
        q += double(d * d);
    }
    const float inv = float(1.0 / sqrt(warp_sum(q) / double(F) + double(eps)));
    float *o = out + r * F;
    if (!g) {
        for (int64_t j = lane; j < F; j += 32) o[j] = (xr[j] - mean) * inv;
        return;
    }
    const float *gr = g + r * F, *yr = y + r * F;
    double sg = 0.0, sgy = 0.0;
    for (int64_t j = lane; j < F; j += 32) {
        sg += gr[j];
        sgy += double(gr[j] * yr[j]);
    }
    const float mg_ = float(warp_sum(sg) / double(F)), mgy = float(warp_sum(sgy) / double(F));
    for (int64_t j = lane; j < F; j += 32) o[j] = (gr[j] - mg_ - yr[j] * mgy) * inv;
}

// The values column sums add.  ColumnValue: v(i, j) is the float (a - centre[j])^2 (square),
// a * b, or a.
struct ColumnValue {
    const float *a, *b, *centre;
    bool square;
    int64_t F;
    __device__ float operator()(int64_t i, int64_t j) const {
        const float v = a[i * F + j];
        if (square) {
            const float d = v - centre[j];
            return d * d;
        }
        return b ? v * b[i * F + j] : v;
    }
};
// y = standardize(x), stored (y) or recomputed from x with the statistics: the same arithmetic
// as the forward's, so the same values.
struct Standardized {
    const float *y, *x, *mean, *inv;
    int64_t F;
    __device__ float operator()(int64_t k, int64_t j) const { return y ? y[k] : (x[k] - mean[j]) * inv[j]; }
};
// The gradient a of batch norm's affine output, with the backward of a relu after it when beta is
// given: a where the forward's relu passed, y * gamma > -beta, else 0 (for floats t and b,
// round(t + b) > 0 exactly when t + b > 0, so this is the forward's own test on the same rounded
// product).
__device__ inline float affine_relu_grad(float a, float y, const float *gamma, const float *beta, int64_t j) {
    return beta && !(__fmul_rn(y, gamma[j]) > -beta[j]) ? 0.f : a;
}
// That gradient, times y for the gamma gradient's sum.
struct AffineGradValue {
    const float *a, *gamma, *beta;
    Standardized y;
    bool times_y;
    __device__ float operator()(int64_t i, int64_t j) const {
        const int64_t k = i * y.F + j;
        if (!beta && !times_y) return a[k];   // the plain sum needs no y
        const float yv = y(k, j);
        const float g = affine_relu_grad(a[k], yv, gamma, beta, j);
        return times_y ? g * yv : g;
    }
};

struct MeanOp {               // out[j] = sum[j] / total, rounded once
    const double *sum;
    float *out;
    int64_t total;
    __device__ void operator()(int64_t j) const { out[j] = float(sum[j] / double(total)); }
};

// Per feature, from the mean and the sum of squared deviations: 1/sqrt(var + eps); in training
// the running statistics move towards the batch ones (variance unbiased, as torch).
struct BatchMomentsOp {
    const float *mean;
    const double *sq;
    float *inv, *run_mean, *run_var;
    int64_t total;
    float eps, momentum;
    bool update;
    __device__ void operator()(int64_t j) const {
        const float var = float(sq[j] / double(total));
        if (update) {
            const float unbias = total > 1 ? float(total) / float(total - 1) : 1.f;
            run_mean[j] = (1.f - momentum) * run_mean[j] + momentum * mean[j];
            run_var[j] = (1.f - momentum) * run_var[j] + momentum * var * unbias;
        }
        inv[j] = float(1.0 / sqrt(double(var) + double(eps)));
    }
};

struct RunningMomentsOp {      // evaluation: the running statistics
    const float *run_mean, *run_var;
    float *mean, *inv;
    float eps;
    __device__ void operator()(int64_t j) const {
        mean[j] = run_mean[j];
        inv[j] = float(1.0 / sqrt(double(run_var[j]) + double(eps)));
    }
};

// y = (x - mean) * inv (forward) or dx = (g - mg - y * mgy) * inv (backward; mg, mgy the means
// of g and g * y), times gamma[j] when given (the affine backward, g = dL/d(out)).  The backward
// recomputes y from x when y is null (mean given); with beta, g is masked by the relu after the
// affine part (AffineGradValue).
struct BatchApplyOp {
    const float *x, *g, *y, *mean, *inv, *mg, *mgy;
    float *out;
    int64_t F;
    const float *gamma = nullptr, *beta = nullptr;
    __device__ void operator()(int64_t k) const {
        const int64_t j = k % F;
        const float scale = gamma ? inv[j] * gamma[j] : inv[j];
        const float standardized = y ? y[k] : (x[k] - mean[j]) * inv[j];
        if (!g) {
            out[k] = standardized;
            return;
        }
        const float gv = affine_relu_grad(g[k], standardized, gamma, beta, j);
        out[k] = (gv - mg[j] - standardized * mgy[j]) * scale;
    }
};

// Batch norm with its affine part and activation (backends/openmp/kernels/norm.h
// batch_norm_affine_fwd): out = act(y * gamma + bias), y = (x - mean) * inv also written when
// given; the product rounded before the bias is added, as the two kernels it replaces.
struct BatchAffineOp {
    const float *x, *mean, *inv, *gamma, *bias;
    float *y, *out;
    int64_t F;
    Act act;
    float alpha;
    __device__ void operator()(int64_t k) const {
        const int64_t j = k % F;
        const float standardized = (x[k] - mean[j]) * inv[j];
        if (y) y[k] = standardized;
        const float scaled = __fmul_rn(standardized, gamma[j]);   // rounded: the backward's relu test
        out[k] = activate(act, scaled + (bias ? bias[j] : 0.f), alpha);
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

// The batch's statistics a training forward standardised with (device memory), kept for its
// backward: the same values the backward would compute from the same rows, two passes over them
// fewer (the emitter's plan_kept_batch_statistics, as on OpenMP).
struct BatchStatistics {
    cuda::DeviceArray<float> mean, inv;
};

namespace norm_detail {
// Scratch for per-feature statistics, reused by every batch norm: sums [2, F] in double and
// mean, inverse deviation, mean of g, mean of g * y [4, F] in float.
struct Stats {
    double *sums;
    float *mean, *inv, *mg, *mgy;
};
inline Stats stats(int64_t F) {
    static cuda::DeviceArray<double> sums;
    static cuda::DeviceArray<float> floats;
    if (sums.size() < 2 * F) sums.allocate(2 * F);
    if (floats.size() < 4 * F) floats.allocate(4 * F);
    float *f = floats.data();
    return Stats{sums.data(), f, f + F, f + 2 * F, f + 3 * F};
}
inline void column_sum(const char *name, const float *a, const float *b, const float *centre, bool square,
                       int64_t rows, int64_t F, double *out) {
    cuda::column_sums_of(name, cuda::ColumnValue{a, b, centre, square, F}, rows, F, out);
}
// The batch mean and inverse deviation of x's features (the running statistics updated when asked).
inline void moments(const float *x, int64_t rows, int64_t total, int64_t F, float eps, float *run_mean, float *run_var,
                    float momentum, bool update, const Stats &st) {
    column_sum("batch norm sums (column_partial_kernel)", x, nullptr, nullptr, false, rows, F, st.sums);
    cuda::map("batch norm mean (MeanOp)", F, cuda::MeanOp{st.sums, st.mean, total});
    column_sum("batch norm squares (column_partial_kernel)", x, nullptr, st.mean, true, rows, F, st.sums + F);
    cuda::map("batch norm moments (BatchMomentsOp)", F,
              cuda::BatchMomentsOp{st.mean, st.sums + F, st.inv, run_mean, run_var, total, eps, momentum, update});
}
}  // namespace norm_detail

namespace norm_detail {
// The statistics a batch norm standardises with: the batch's (moving the running ones) in
// training, the running ones in evaluation.
inline Stats standardize_statistics(bool training, const float *x, int64_t rows, int64_t total, int64_t F,
                                    float *run_mean, float *run_var, float eps, float momentum) {
    const Stats st = stats(F);
    if (training) {
        moments(x, rows, total, F, eps, run_mean, run_var, momentum, true, st);
    } else {
        cuda::map("batch norm running statistics (RunningMomentsOp)", F,
                  cuda::RunningMomentsOp{run_mean, run_var, st.mean, st.inv, eps});
    }
    return st;
}
}  // namespace norm_detail

// One process holds every row: `across` has nothing to add (it exists for the MPI backend's API).
template <class Across>
void batch_standardize_fwd(bool training, const float *x, int64_t rows, int64_t total, int64_t F, float *run_mean,
                           float *run_var, float eps, float momentum, float *y, Across) {
    const norm_detail::Stats st =
        norm_detail::standardize_statistics(training, x, rows, total, F, run_mean, run_var, eps, momentum);
    cuda::map("batch norm (BatchApplyOp)", rows * F,
              cuda::BatchApplyOp{x, nullptr, nullptr, st.mean, st.inv, nullptr, nullptr, y, F});
}

// Batch norm with its affine part and activation in one pass after the statistics; y (the
// standardised rows) written too unless null.
// keep: where a training forward leaves its batch statistics for the backward (or null).
template <class Across>
void batch_norm_affine_fwd(bool training, const float *x, int64_t rows, int64_t total, int64_t F, float *run_mean,
                           float *run_var, float eps, float momentum, const float *gamma, const Epilogue &epi,
                           float *y, float *out, Across, BatchStatistics *keep = nullptr) {
    const norm_detail::Stats st =
        norm_detail::standardize_statistics(training, x, rows, total, F, run_mean, run_var, eps, momentum);
    if (training && keep != nullptr) {
        if (keep->mean.size() != F) {
            keep->mean.allocate(F);
            keep->inv.allocate(F);
        }
        cuda::copy_async(keep->mean.data(), st.mean, sizeof(float) * size_t(F), cudaMemcpyDeviceToDevice,
                         "keeping batch norm's statistics");
        cuda::copy_async(keep->inv.data(), st.inv, sizeof(float) * size_t(F), cudaMemcpyDeviceToDevice,
                         "keeping batch norm's statistics");
    }
    cuda::map("batch norm with its affine part (BatchAffineOp)", rows * F,
              cuda::BatchAffineOp{x, st.mean, st.inv, gamma, epi.bias, y, out, F, epi.act, epi.alpha});
}

template <class Across>
void batch_standardize_bwd(const float *g, const float *x, const float *y, int64_t rows, int64_t total, int64_t F,
                           float eps, float *dx, Across) {
    const norm_detail::Stats st = norm_detail::stats(F);
    norm_detail::moments(x, rows, total, F, eps, nullptr, nullptr, 0.f, false, st);
    norm_detail::column_sum("batch norm backward (column_partial_kernel)", g, nullptr, nullptr, false, rows, F, st.sums);
    norm_detail::column_sum("batch norm backward (column_partial_kernel)", g, y, nullptr, false, rows, F, st.sums + F);
    cuda::map("batch norm backward (MeanOp)", F, cuda::MeanOp{st.sums, st.mg, total});
    cuda::map("batch norm backward (MeanOp)", F, cuda::MeanOp{st.sums + F, st.mgy, total});
    cuda::map("batch norm backward (BatchApplyOp)", rows * F,
              cuda::BatchApplyOp{x, g, y, nullptr, st.inv, st.mg, st.mgy, dx, F});
}

// Batch norm's backward with its affine part (backends/openmp/kernels/norm.h): from
// a = dL/d(standardize(x) * gamma + beta), dbeta = sum a, dgamma = sum a * y (either may be null)
// and dx = gamma * (a - mean a - y * mean(a * y)) / sigma.  y null: recomputed from x.
// relu_beta: a relu follows the affine part (beta = relu_beta) and `a` is the gradient of its
// output; its backward runs inside the sums and dx (AffineGradValue).  kept: the training
// forward's statistics (null or empty: computed again from x).
template <class Across>
void batch_norm_affine_bwd(const float *a, const float *gamma, const float *x, const float *y, int64_t rows,
                           int64_t total, int64_t F, float eps, float *dx, float *dgamma, float *dbeta, Across,
                           const float *relu_beta = nullptr, const BatchStatistics *kept = nullptr) {
    const norm_detail::Stats st = norm_detail::stats(F);
    const float *mean = st.mean, *inv = st.inv;
    if (kept != nullptr && kept->mean.size() == F) {
        mean = kept->mean.data();
        inv = kept->inv.data();
    } else {
        norm_detail::moments(x, rows, total, F, eps, nullptr, nullptr, 0.f, false, st);
    }
    const cuda::Standardized standardized{y, x, mean, inv, F};
    cuda::column_sums_of("batch norm backward (column_partial_kernel)",
                               cuda::AffineGradValue{a, gamma, relu_beta, standardized, false}, rows, F, st.sums);
    cuda::column_sums_of("batch norm backward (column_partial_kernel)",
                               cuda::AffineGradValue{a, gamma, relu_beta, standardized, true}, rows, F, st.sums + F);
    // The affine weights' gradients are the sums themselves (a "mean" over one row rounds them once).
    if (dbeta) cuda::map("batch norm beta gradient (MeanOp)", F, cuda::MeanOp{st.sums, dbeta, 1});
    if (dgamma) cuda::map("batch norm gamma gradient (MeanOp)", F, cuda::MeanOp{st.sums + F, dgamma, 1});
    cuda::map("batch norm backward (MeanOp)", F, cuda::MeanOp{st.sums, st.mg, total});
    cuda::map("batch norm backward (MeanOp)", F, cuda::MeanOp{st.sums + F, st.mgy, total});
    cuda::map("batch norm backward (BatchApplyOp)", rows * F,
              cuda::BatchApplyOp{x, a, y, mean, inv, st.mg, st.mgy, dx, F, gamma, relu_beta});
}

}  // namespace mg
