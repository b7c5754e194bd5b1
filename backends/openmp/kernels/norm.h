// Normalisation layers without their affine part (the program multiplies and adds its own
// weights): layer norm standardises each row over its features, batch norm each feature over
// the node rows.  Statistics are summed in double; the backward recomputes them from the input
// instead of keeping them (one more pass over x, no per-op state between forward and backward).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "elementwise.h"

namespace mg {

// ---- layer norm: per row, over the features -------------------------------------------------
namespace norm_detail {
// A row's mean (float) and 1/sqrt(var + eps): sums in double, the same arithmetic on every backend.
inline void row_moments(const float* xr, int64_t F, float eps, float& mean, float& inv) {
    double s = 0.0;
    for (int64_t j = 0; j < F; ++j) s += xr[j];
    mean = float(s / double(F));
    double q = 0.0;
    for (int64_t j = 0; j < F; ++j) {
        const float d = xr[j] - mean;
        q += double(d * d);
    }
    inv = float(1.0 / std::sqrt(q / double(F) + double(eps)));
}
}  // namespace norm_detail

inline void layer_standardize_fwd(const float* x, int64_t rows, int64_t F, float eps, float* y) {
#pragma omp parallel for schedule(static) if (rows * F > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
        const float* xr = x + i * F;
        float mean, inv;
        norm_detail::row_moments(xr, F, eps, mean, inv);
#pragma omp simd
        for (int64_t j = 0; j < F; ++j) y[i * F + j] = (xr[j] - mean) * inv;
    }
}

// dx = (g - mean_f(g) - y * mean_f(g * y)) / sigma, per row.
inline void layer_standardize_bwd(const float* g, const float* x, const float* y, int64_t rows, int64_t F, float eps,
                                  float* dx) {
#pragma omp parallel for schedule(static) if (rows * F > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
        const float *xr = x + i * F, *gr = g + i * F, *yr = y + i * F;
        float mean, inv;
        norm_detail::row_moments(xr, F, eps, mean, inv);
        double sg = 0.0, sgy = 0.0;
        for (int64_t j = 0; j < F; ++j) {
            sg += gr[j];
            sgy += double(gr[j] * yr[j]);
        }
        const float mg_ = float(sg / double(F)), mgy = float(sgy / double(F));
#pragma omp simd
        for (int64_t j = 0; j < F; ++j) dx[i * F + j] = (gr[j] - mg_ - yr[j] * mgy) * inv;
    }
}

// ---- batch norm: per feature, over the node rows ----------------------------------------------
namespace norm_detail {
// sum_i f(i, j) for every feature j, in double (ew_detail::reduce_to), then over the ranks.
template <class Across, class Fn>
std::vector<double> column_sums(int64_t rows, int64_t F, Across across, Fn f) {
    std::vector<double> out(size_t(F), 0.0);
    ew_detail::reduce_to(Bcast::Row, rows, F, out.data(), f);
    across(out.data(), F);
    return out;
}

// Column mean and 1/sqrt(var + eps) of x (biased variance, as torch's BatchNorm) over ``total``
// rows in all, ``rows`` of them here; ``var`` is kept for the running estimate.
template <class Across>
void column_moments(const float* x, int64_t rows, int64_t total, int64_t F, float eps, std::vector<float>& mean,
                    std::vector<float>& var, std::vector<float>& inv, Across across) {
    const std::vector<double> s = column_sums(rows, F, across, [&](int64_t i, int64_t j) { return x[i * F + j]; });
    mean.resize(size_t(F));
    for (int64_t j = 0; j < F; ++j) mean[size_t(j)] = float(s[size_t(j)] / double(total));
    const float* mu = mean.data();
    const std::vector<double> q = column_sums(rows, F, across, [&](int64_t i, int64_t j) {
        const float d = x[i * F + j] - mu[j];
        return d * d;
    });
    var.resize(size_t(F));
    inv.resize(size_t(F));
    for (int64_t j = 0; j < F; ++j) {
        var[size_t(j)] = float(q[size_t(j)] / double(total));
        inv[size_t(j)] = float(1.0 / std::sqrt(double(var[size_t(j)]) + double(eps)));
    }
}
}  // namespace norm_detail

// Training: standardise with the batch statistics and move the running ones towards them
// (running = (1 - momentum) * running + momentum * batch; the variance unbiased, as torch does).
// Evaluation: standardise with the running statistics.
template <class Across>
void batch_standardize_fwd(bool training, const float* x, int64_t rows, int64_t total, int64_t F, float* run_mean,
                           float* run_var, float eps, float momentum, float* y, Across across) {
    std::vector<float> mean, var, inv;
    if (training) {
        norm_detail::column_moments(x, rows, total, F, eps, mean, var, inv, across);
        const float unbias = total > 1 ? float(total) / float(total - 1) : 1.f;
        for (int64_t j = 0; j < F; ++j) {
            run_mean[j] = (1.f - momentum) * run_mean[j] + momentum * mean[size_t(j)];
            run_var[j] = (1.f - momentum) * run_var[j] + momentum * var[size_t(j)] * unbias;
        }
    } else {
        mean.assign(run_mean, run_mean + F);
        inv.resize(size_t(F));
        for (int64_t j = 0; j < F; ++j) inv[size_t(j)] = float(1.0 / std::sqrt(double(run_var[j]) + double(eps)));
    }
    const float *mu = mean.data(), *iv = inv.data();
#pragma omp parallel for schedule(static) if (rows * F > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i)
#pragma omp simd
        for (int64_t j = 0; j < F; ++j) y[i * F + j] = (x[i * F + j] - mu[j]) * iv[j];
}

// dx = (g - mean_n(g) - y * mean_n(g * y)) / sigma, per feature (the training forward's statistics).
template <class Across>
void batch_standardize_bwd(const float* g, const float* x, const float* y, int64_t rows, int64_t total, int64_t F,
                           float eps, float* dx, Across across) {
    std::vector<float> mean, var, inv, sg(static_cast<size_t>(F)), sgy(static_cast<size_t>(F));
    norm_detail::column_moments(x, rows, total, F, eps, mean, var, inv, across);
    const std::vector<double> s = norm_detail::column_sums(rows, F, across, [&](int64_t i, int64_t j) { return g[i * F + j]; });
    const std::vector<double> q = norm_detail::column_sums(rows, F, across,
                                                           [&](int64_t i, int64_t j) { return g[i * F + j] * y[i * F + j]; });
    for (int64_t j = 0; j < F; ++j) {
        sg[size_t(j)] = float(s[size_t(j)] / double(total));
        sgy[size_t(j)] = float(q[size_t(j)] / double(total));
    }
    const float *iv = inv.data(), *mg_ = sg.data(), *mgy = sgy.data();
#pragma omp parallel for schedule(static) if (rows * F > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i)
#pragma omp simd
        for (int64_t j = 0; j < F; ++j)
            dx[i * F + j] = (g[i * F + j] - mg_[j] - y[i * F + j] * mgy[j]) * iv[j];
}

// The backward of batch norm with its affine part, out = standardize(x) * gamma + beta, from
// a = dL/d(out) and y = standardize(x):
//     dbeta = sum_n a,   dgamma = sum_n a * y,
//     dx    = gamma * (a - mean_n(a) - y * mean_n(a * y)) / sigma
// (batch_standardize_bwd of g = a * gamma, whose sums are gamma times these).  The program's own
// ops for it -- the two products, the two row sums and batch_standardize_bwd -- read a four more
// times and write two arrays; here one pass sums a and a * y, one writes dx (after the moments
// of x, as batch_standardize_bwd).  dbeta and dgamma (either may be null) are this process's
// sums; the means use the sums over all rows (across).
template <class Across>
void batch_norm_affine_bwd(const float* a, const float* gamma, const float* x, const float* y, int64_t rows,
                           int64_t total, int64_t F, float eps, float* dx, float* dgamma, float* dbeta,
                           Across across) {
    std::vector<float> mean, var, inv;
    norm_detail::column_moments(x, rows, total, F, eps, mean, var, inv, across);
    // Thread-local partials of sum a (first F) and sum a * y (next F), a cache line apart: the
    // layout of ew_detail::reduce_to, whose one-function form over 2F columns (a select per
    // element) made GIN's epoch on the arxiv-shaped graph about 4% slower.
    const int64_t stride = (2 * F + 7) / 8 * 8 + 8;
    const int nthreads = rows * F > ew_detail::kParallelMin ? omp_get_max_threads() : 1;
    std::vector<double> partial(size_t(nthreads) * size_t(stride), 0.0);
#pragma omp parallel num_threads(nthreads)
    {
        double* acc = partial.data() + int64_t(omp_get_thread_num()) * stride;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < rows; ++i) {
#pragma omp simd
            for (int64_t j = 0; j < F; ++j) {
                acc[j] += a[i * F + j];
                acc[F + j] += a[i * F + j] * y[i * F + j];
            }
        }
    }
    std::vector<double> sums(size_t(2 * F), 0.0);
    for (int64_t j = 0; j < 2 * F; ++j)
        for (int t = 0; t < nthreads; ++t) sums[size_t(j)] += partial[size_t(t) * size_t(stride) + size_t(j)];
    for (int64_t j = 0; j < F; ++j) {
        if (dbeta) dbeta[j] = float(sums[size_t(j)]);
        if (dgamma) dgamma[j] = float(sums[size_t(F + j)]);
    }
    across(sums.data(), 2 * F);
    std::vector<float> ma(static_cast<size_t>(F)), may(static_cast<size_t>(F)), scale(static_cast<size_t>(F));
    for (int64_t j = 0; j < F; ++j) {
        ma[size_t(j)] = float(sums[size_t(j)] / double(total));
        may[size_t(j)] = float(sums[size_t(F + j)] / double(total));
        scale[size_t(j)] = gamma[j] * inv[size_t(j)];
    }
    const float *m1 = ma.data(), *m2 = may.data(), *sc = scale.data();
#pragma omp parallel for schedule(static) if (rows * F > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i)
#pragma omp simd
        for (int64_t j = 0; j < F; ++j) dx[i * F + j] = (a[i * F + j] - m1[j] - y[i * F + j] * m2[j]) * sc[j];
}

}  // namespace mg
