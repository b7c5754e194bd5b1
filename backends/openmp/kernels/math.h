// Elementwise math functions (sqrt, rsqrt, log, abs, pow, gelu, softplus, a constant shift) and
// softmax / log-softmax over the features of each row, each with its backward.
//
// Layout: float32 row-major, int64 sizes; backward kernels overwrite their outputs.  Gradients
// are written with the forward INPUT x (every derivative here is a function of it), so the
// backward never needs the forward output kept alive, except the row softmaxes, whose
// derivative is cheapest in their output y.
//
// Conventions (docs/language.md, interp.py): rsqrt(0) = 0 and its derivative there is 0, as in
// GCN's D^-1/2 where an isolated node contributes nothing; gelu is the exact erf form.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common.h"
#include "vexp.h"

namespace mg {

// MathFn: runtime/op_types.h.

namespace math_detail {

inline constexpr int64_t kParallelMin = 1 << 15;
inline constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// out[i] = f(a[i]) or, with b, f(a[i], b[i]).
template <class F>
inline void map(const float* a, const float* b, float* out, int64_t n, F f) {
    if (b == nullptr) return parallel_each(n, kParallelMin, [=](int64_t i) { out[i] = f(a[i], 0.f); });
    parallel_each(n, kParallelMin, [=](int64_t i) { out[i] = f(a[i], b[i]); });
}

// log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|).
inline float softplus(float x) { return std::max(x, 0.f) + vlog1p(vexp(-std::fabs(x))); }

// Calls run(f) with f(x) the function; one loop per function (a switch inside would not vectorise).
template <class Run>
inline void with_function(MathFn fn, float c, Run run) {
    switch (fn) {
        case MathFn::Sqrt: run([](float x) { return std::sqrt(x); }); break;
        case MathFn::Rsqrt: run([](float x) { return x == 0.f ? 0.f : 1.f / std::sqrt(x); }); break;
        case MathFn::Log: run([](float x) { return vlog(x); }); break;
        case MathFn::Abs: run([](float x) { return std::fabs(x); }); break;
        case MathFn::Pow: run([c](float x) { return std::pow(x, c); }); break;
        case MathFn::Gelu: run([](float x) { return x * vnormal_cdf(x); }); break;
        case MathFn::Softplus: run([](float x) { return softplus(x); }); break;
        case MathFn::Shift: run([c](float x) { return x + c; }); break;
    }
}

// Calls run(d) with d(g, x) = g * f'(x).
template <class Run>
inline void with_derivative(MathFn fn, float c, Run run) {
    switch (fn) {
        case MathFn::Sqrt: run([](float g, float x) { return g * 0.5f / std::sqrt(x); }); break;
        case MathFn::Rsqrt:
            run([](float g, float x) { return x == 0.f ? 0.f : -0.5f * g / (x * std::sqrt(x)); });
            break;
        case MathFn::Log: run([](float g, float x) { return g / x; }); break;
        case MathFn::Abs: run([](float g, float x) { return x > 0.f ? g : (x < 0.f ? -g : 0.f); }); break;
        case MathFn::Pow: run([c](float g, float x) { return g * c * std::pow(x, c - 1.f); }); break;
        case MathFn::Gelu:
            run([](float g, float x) {
                return g * (vnormal_cdf(x) + x * kInvSqrt2Pi * vexp(-0.5f * x * x));
            });
            break;
        case MathFn::Softplus: run([](float g, float x) { return g * vsigmoid(x); }); break;
        case MathFn::Shift: run([](float g, float) { return g; }); break;
    }
}

}  // namespace math_detail

inline void math_fwd(MathFn fn, float c, const float* x, float* y, int64_t n) {
    math_detail::with_function(fn, c, [&](auto f) {
        math_detail::map(x, nullptr, y, n, [f](float a, float) { return f(a); });
    });
}

// gx = gy * f'(x)
inline void math_bwd(MathFn fn, float c, const float* gy, const float* x, float* gx, int64_t n) {
    math_detail::with_derivative(fn, c, [&](auto d) { math_detail::map(gy, x, gx, n, d); });
}

// y[r] = softmax(x[r]) or log_softmax(x[r]) over the cols features of row r (max-shifted; the
// sum of the exponentials in double).  vexp, not libm's exp: that was a scalar call per element.
inline void row_softmax_fwd(const float* x, float* y, int64_t rows, int64_t cols, bool log) {
#pragma omp parallel for schedule(static) if (rows * cols > math_detail::kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float top = xr[0];
#pragma omp simd reduction(max : top)
        for (int64_t j = 1; j < cols; ++j) top = std::max(top, xr[j]);
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < cols; ++j) sum += double(vexp(xr[j] - top));
        if (log) {
            const float lse = top + float(std::log(sum));
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) yr[j] = xr[j] - lse;
        } else {
            const float inv = float(1.0 / sum);
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) yr[j] = vexp(xr[j] - top) * inv;
        }
    }
}

// From the forward output y: softmax  gx = y * (g - <g, y>);  log_softmax  gx = g - e^y * sum(g).
inline void row_softmax_bwd(const float* y, const float* g, float* gx, int64_t rows, int64_t cols, bool log) {
#pragma omp parallel for schedule(static) if (rows * cols > math_detail::kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        const float* yr = y + r * cols;
        const float* gr = g + r * cols;
        float* out = gx + r * cols;
        double acc = 0.0;
        if (log) {
#pragma omp simd reduction(+ : acc)
            for (int64_t j = 0; j < cols; ++j) acc += double(gr[j]);
            const float s = float(acc);
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) out[j] = gr[j] - vexp(yr[j]) * s;
        } else {
#pragma omp simd reduction(+ : acc)
            for (int64_t j = 0; j < cols; ++j) acc += double(gr[j]) * yr[j];
            const float s = float(acc);
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) out[j] = yr[j] * (gr[j] - s);
        }
    }
}

}  // namespace mg
