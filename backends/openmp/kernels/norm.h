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
inline void layer_standardize_fwd(const float* x, int64_t rows, int64_t F, float eps, float* y) {
#pragma omp parallel for schedule(static) if (rows * F > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
        const float* xr = x + i * F;
        double s = 0.0;
        for (int64_t j = 0; j < F; ++j) s += xr[j];
        const float mean = float(s / double(F));
        double q = 0.0;
        for (int64_t j = 0; j < F; ++j) q += double(xr[j] - mean) * double(xr[j] - mean);
        const float inv = float(1.0 / std::sqrt(q / double(F) + double(eps)));
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
        double s = 0.0, q = 0.0, sg = 0.0, sgy = 0.0;
        for (int64_t j = 0; j < F; ++j) s += xr[j];
        const double mean = s / double(F);
        for (int64_t j = 0; j < F; ++j) {
            q += (xr[j] - mean) * (xr[j] - mean);
            sg += gr[j];
            sgy += double(gr[j]) * yr[j];
        }
        const float inv = float(1.0 / std::sqrt(q / double(F) + double(eps)));
        const float mg_ = float(sg / double(F)), mgy = float(sgy / double(F));
#pragma omp simd
        for (int64_t j = 0; j < F; ++j) dx[i * F + j] = (gr[j] - mg_ - yr[j] * mgy) * inv;
    }
}

// ---- batch norm: per feature, over the node rows ----------------------------------------------
namespace norm_detail {
// Column mean and 1/sqrt(var + eps) of x (biased variance; torch's BatchNorm): ``rows`` rows here,
// ``total`` rows in all (across processes); returns the variance too for the running estimate.
template <class Across>
void column_moments(const float* x, int64_t rows, int64_t total, int64_t F, float eps, std::vector<float>& mean,
                    std::vector<float>& var, std::vector<float>& inv, Across across) {
    mean.assign(size_t(F), 0.f);
    var.assign(size_t(F), 0.f);
    inv.assign(size_t(F), 0.f);
    ew_detail::reduce_to(Bcast::Row, rows, F, mean.data(), [&](int64_t i, int64_t j) { return x[i * F + j]; });
    across(mean.data(), F);
    for (int64_t j = 0; j < F; ++j) mean[size_t(j)] /= float(total);
    const float* mu = mean.data();
    ew_detail::reduce_to(Bcast::Row, rows, F, var.data(), [&](int64_t i, int64_t j) {
        const float d = x[i * F + j] - mu[j];
        return d * d;
    });
    across(var.data(), F);
    for (int64_t j = 0; j < F; ++j) {
        var[size_t(j)] /= float(total);
        inv[size_t(j)] = 1.f / std::sqrt(var[size_t(j)] + eps);
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
        for (int64_t j = 0; j < F; ++j) inv[size_t(j)] = 1.f / std::sqrt(run_var[j] + eps);
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
    std::vector<float> mean, var, inv, sg(size_t(F), 0.f), sgy(size_t(F), 0.f);
    norm_detail::column_moments(x, rows, total, F, eps, mean, var, inv, across);
    ew_detail::reduce_to(Bcast::Row, rows, F, sg.data(), [&](int64_t i, int64_t j) { return g[i * F + j]; });
    ew_detail::reduce_to(Bcast::Row, rows, F, sgy.data(),
                         [&](int64_t i, int64_t j) { return g[i * F + j] * y[i * F + j]; });
    across(sg.data(), F);
    across(sgy.data(), F);
    for (int64_t j = 0; j < F; ++j) {
        sg[size_t(j)] /= float(total);
        sgy[size_t(j)] /= float(total);
    }
    const float *iv = inv.data(), *mg_ = sg.data(), *mgy = sgy.data();
#pragma omp parallel for schedule(static) if (rows * F > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i)
#pragma omp simd
        for (int64_t j = 0; j < F; ++j)
            dx[i * F + j] = (g[i * F + j] - mg_[j] - y[i * F + j] * mgy[j]) * iv[j];
}

}  // namespace mg
