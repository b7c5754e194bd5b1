// Normalisation layers without their affine part (the program multiplies and adds its own
// weights): layer norm standardises each row over its features, batch norm each feature over
// the node rows.  Statistics are summed in double; the backward recomputes them from the input
// instead of keeping them (one more pass over x, no per-op state between forward and backward).
#pragma once

#include <algorithm>
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

// The batch's statistics a training forward standardised with, kept for its backward: the same
// values the backward would compute from the same rows, one pass over them fewer.
struct BatchStatistics {
    std::vector<float> mean, inv;
};

namespace norm_detail {
// This process's sum_i f1(i, j) (first F) and sum_i f2(i, j) (next F) for every feature j, in
// double, in one pass over the rows: thread-local partials a cache line apart, added in thread
// order (the same result whatever the scheduling).  ew_detail::reduce_to's one-function form
// over 2F columns (a select per element) made GIN's epoch on the arxiv-shaped graph about 4%
// slower.
template <class Fn1, class Fn2>
std::vector<double> column_sum_pair(int64_t rows, int64_t F, Fn1 f1, Fn2 f2) {
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
                acc[j] += f1(i, j);
                acc[F + j] += f2(i, j);
            }
        }
    }
    std::vector<double> sums(size_t(2 * F), 0.0);
    for (int64_t j = 0; j < 2 * F; ++j)
        for (int t = 0; t < nthreads; ++t) sums[size_t(j)] += partial[size_t(t) * size_t(stride) + size_t(j)];
    return sums;
}

// Column mean and 1/sqrt(var + eps) of x (biased variance, as torch's BatchNorm) over ``total``
// rows in all, ``rows`` of them here; ``var`` is kept for the running estimate.  One pass: the
// sums of x and x^2 in double (their difference loses about log2(mean^2 / var) of double's 52
// bits, far more than float's 24 keep), then over the ranks.
template <class Across>
void column_moments(const float* x, int64_t rows, int64_t total, int64_t F, float eps, std::vector<float>& mean,
                    std::vector<float>& var, std::vector<float>& inv, Across across) {
    std::vector<double> s = column_sum_pair(
        rows, F, [&](int64_t i, int64_t j) { return double(x[i * F + j]); },
        [&](int64_t i, int64_t j) { return double(x[i * F + j]) * double(x[i * F + j]); });
    across(s.data(), 2 * F);
    mean.resize(size_t(F));
    var.resize(size_t(F));
    inv.resize(size_t(F));
    for (int64_t j = 0; j < F; ++j) {
        const double m = s[size_t(j)] / double(total);
        const double v = std::max(s[size_t(F + j)] / double(total) - m * m, 0.0);
        mean[size_t(j)] = float(m);
        var[size_t(j)] = float(v);
        inv[size_t(j)] = float(1.0 / std::sqrt(double(var[size_t(j)]) + double(eps)));
    }
}

// The statistics a batch norm standardises with: the batch's in training (moving the running
// ones towards them: running = (1 - momentum) * running + momentum * batch, the variance
// unbiased, as torch does), the running ones in evaluation.
template <class Across>
void standardize_statistics(bool training, const float* x, int64_t rows, int64_t total, int64_t F, float* run_mean,
                            float* run_var, float eps, float momentum, std::vector<float>& mean,
                            std::vector<float>& inv, Across across) {
    if (training) {
        std::vector<float> var;
        column_moments(x, rows, total, F, eps, mean, var, inv, across);
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
}
}  // namespace norm_detail

// y = (x - mean) / sigma per feature, with the statistics of norm_detail::standardize_statistics.
template <class Across>
void batch_standardize_fwd(bool training, const float* x, int64_t rows, int64_t total, int64_t F, float* run_mean,
                           float* run_var, float eps, float momentum, float* y, Across across) {
    std::vector<float> mean, inv;
    norm_detail::standardize_statistics(training, x, rows, total, F, run_mean, run_var, eps, momentum, mean, inv,
                                        across);
    const float *mu = mean.data(), *iv = inv.data();
#pragma omp parallel for schedule(static) if (rows * F > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i)
#pragma omp simd
        for (int64_t j = 0; j < F; ++j) y[i * F + j] = (x[i * F + j] - mu[j]) * iv[j];
}

// Batch norm with its affine part and the activation after it, out = act(y * gamma + beta) with
// y = standardize(x): the program's batch_standardize and the binary product whose bias and
// activation ran in its epilogue, in one pass over the rows after the statistics.  y is written
// too unless null (a backward that recomputes it from x, batch_norm_affine_bwd, needs no copy).
// The arithmetic is that of the two kernels it replaces, so out is the same to the bit.
// keep: where a training forward leaves its batch statistics for the backward (or null).
template <class Across>
void batch_norm_affine_fwd(bool training, const float* x, int64_t rows, int64_t total, int64_t F, float* run_mean,
                           float* run_var, float eps, float momentum, const float* gamma, const Epilogue& epi,
                           float* y, float* out, Across across, BatchStatistics* keep = nullptr) {
    std::vector<float> mean, inv;
    norm_detail::standardize_statistics(training, x, rows, total, F, run_mean, run_var, eps, momentum, mean, inv,
                                        across);
    if (training && keep != nullptr) {
        keep->mean = mean;
        keep->inv = inv;
    }
    const float *mu = mean.data(), *iv = inv.data();
#pragma omp parallel for schedule(static) if (rows * F > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
        const float* xr = x + i * F;
        float* o = out + i * F;
        if (y) {
            float* yr = y + i * F;
#pragma omp simd
            for (int64_t j = 0; j < F; ++j) {
                yr[j] = (xr[j] - mu[j]) * iv[j];
                o[j] = yr[j] * gamma[j];
            }
        } else {
#pragma omp simd
            for (int64_t j = 0; j < F; ++j) o[j] = ((xr[j] - mu[j]) * iv[j]) * gamma[j];
        }
        apply_epilogue(epi.act, epi.alpha, epi.bias, o, F);
    }
}

// dx = (g - mean_n(g) - y * mean_n(g * y)) / sigma, per feature (the training forward's statistics).
template <class Across>
void batch_standardize_bwd(const float* g, const float* x, const float* y, int64_t rows, int64_t total, int64_t F,
                           float eps, float* dx, Across across) {
    std::vector<float> mean, var, inv, sg(static_cast<size_t>(F)), sgy(static_cast<size_t>(F));
    norm_detail::column_moments(x, rows, total, F, eps, mean, var, inv, across);
    std::vector<double> s = norm_detail::column_sum_pair(
        rows, F, [&](int64_t i, int64_t j) { return g[i * F + j]; },
        [&](int64_t i, int64_t j) { return g[i * F + j] * y[i * F + j]; });
    across(s.data(), 2 * F);
    for (int64_t j = 0; j < F; ++j) {
        sg[size_t(j)] = float(s[size_t(j)] / double(total));
        sgy[size_t(j)] = float(s[size_t(F + j)] / double(total));
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
// of x, as batch_standardize_bwd).  y may be null: it is then recomputed from x with the moments,
// the same arithmetic as the forward's, so the same values.  dbeta and dgamma (either may be
// null) are this process's sums; the means use the sums over all rows (across).
//
// relu_beta: not null when a relu follows, relu(standardize(x) * gamma + beta) with beta =
// relu_beta, and `a` is then the gradient u of the relu's output: the relu's backward (a = u
// where the relu passed its input, 0 elsewhere) runs inside both passes, so its pass over u and
// the relu's output, and its writing of a, are saved.  Where the relu passed is
// y * gamma > -beta: for floats t and b, round(t + b) > 0 exactly when t + b > 0, so this is the
// forward's own test on the same product y * gamma, without the rounding of the sum.
//
// kept: the training forward's statistics of these rows (batch_norm_affine_fwd's keep), which
// spare the pass over x that computes them again; null or empty: that pass runs.
template <class Across>
void batch_norm_affine_bwd(const float* a, const float* gamma, const float* x, const float* y, int64_t rows,
                           int64_t total, int64_t F, float eps, float* dx, float* dgamma, float* dbeta,
                           Across across, const float* relu_beta = nullptr, const BatchStatistics* kept = nullptr) {
    std::vector<float> mean, var, inv;
    if (kept != nullptr && !kept->mean.empty()) {
        mean = kept->mean;
        inv = kept->inv;
    } else {
        norm_detail::column_moments(x, rows, total, F, eps, mean, var, inv, across);
    }
    const float *mu = mean.data(), *iv = inv.data();
    // One instance per (y stored or recomputed) x (relu or not), so the inner loops test neither.
    auto run = [&](auto standardized, auto grad) {
        std::vector<double> sums = norm_detail::column_sum_pair(
            rows, F, [&](int64_t i, int64_t j) { return grad(i, j, standardized(i, j)); },
            [&](int64_t i, int64_t j) {
                const float yv = standardized(i, j);
                return grad(i, j, yv) * yv;
            });
        for (int64_t j = 0; j < F; ++j) {
            if (dbeta) dbeta[j] = float(sums[size_t(j)]);
            if (dgamma) dgamma[j] = float(sums[size_t(F + j)]);
        }
        across(sums.data(), 2 * F);
        std::vector<float> ma(static_cast<size_t>(F)), may(static_cast<size_t>(F)), scale(static_cast<size_t>(F));
        for (int64_t j = 0; j < F; ++j) {
            ma[size_t(j)] = float(sums[size_t(j)] / double(total));
            may[size_t(j)] = float(sums[size_t(F + j)] / double(total));
            scale[size_t(j)] = gamma[j] * iv[j];
        }
        const float *m1 = ma.data(), *m2 = may.data(), *sc = scale.data();
#pragma omp parallel for schedule(static) if (rows * F > ew_detail::kParallelMin)
        for (int64_t i = 0; i < rows; ++i)
#pragma omp simd
            for (int64_t j = 0; j < F; ++j) {
                const float yv = standardized(i, j);
                dx[i * F + j] = (grad(i, j, yv) - m1[j] - yv * m2[j]) * sc[j];
            }
    };
    auto with_grad = [&](auto standardized) {
        if (relu_beta)
            run(standardized, [&](int64_t i, int64_t j, float yv) {
                return select_bits(yv * gamma[j] > -relu_beta[j], a[i * F + j], 0.0f);
            });
        else
            run(standardized, [&](int64_t i, int64_t j, float) { return a[i * F + j]; });
    };
    if (y)
        with_grad([&](int64_t i, int64_t j) { return y[i * F + j]; });
    else
        with_grad([&](int64_t i, int64_t j) { return (x[i * F + j] - mu[j]) * iv[j]; });
}

}  // namespace mg
