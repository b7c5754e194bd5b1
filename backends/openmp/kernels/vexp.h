// exp, expm1, tanh, log, log1p and erf for float in plain arithmetic, so that loops calling them
// vectorise (given -fno-trapping-math, morphgen/toolchain.py: g++ 12 keeps std::floor scalar
// without it).
//
// std::exp / std::expm1 are libm calls: GCC vectorises them only under -ffast-math (glibc
// declares its vector variants for __FAST_MATH__ alone), so every ELU and softmax loop ran one
// scalar call per element (ELU's expm1 was 7% of a GAT epoch).  These use Cody-Waite reduction,
// x = n ln2 + r with |r| <= ln2 / 2, Cephes' degree-6 polynomial for exp(r) (about 1 ulp), and
// 2^n through the exponent bits, in two factors so that n = 128 (x near ln FLT_MAX) stays finite.
// Below ln FLT_MIN the result is 0 (the true value is subnormal); above ln FLT_MAX it is inf;
// NaN stays NaN.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "simd.h"  // select_bits

namespace mg {

namespace vexp_detail {

// 2^n for n in [-126, 127], from the exponent bits.
inline float pow2i(std::int32_t n) {
    const std::int32_t bits = (n + 127) << 23;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

}  // namespace vexp_detail

inline float vexp(float x) {
    constexpr float kMax = 88.72283905f;      // ln(FLT_MAX)
    constexpr float kMin = -87.33654475f;     // ln(FLT_MIN)
    const float xc = x > kMax ? kMax : (x < kMin ? kMin : x);   // keeps NaN: both compares false
    // n from a NaN-free copy (converting NaN to an integer is undefined); r keeps x's NaN
    const float fn = std::floor(select_bits(xc != xc, 0.0f, xc) * 1.44269504088896341f + 0.5f);
    const float r = (xc - fn * 0.693359375f) - fn * -2.12194440e-4f;
    const float z = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float er = p * z + r + 1.0f;
    const std::int32_t n = static_cast<std::int32_t>(fn);
    const std::int32_t half = n >> 1;
    const float y = er * vexp_detail::pow2i(half) * vexp_detail::pow2i(n - half);
    return select_bits(x > kMax, INFINITY, select_bits(x < kMin, 0.0f, y));
}

// exp(x) - 1 without the cancellation of vexp(x) - 1 near 0: a Taylor polynomial for |x| < 1/2
// (error below 1e-7 relative), vexp beyond.
inline float vexpm1(float x) {
    float t = 1.0f / 40320;
    t = t * x + 1.0f / 5040;
    t = t * x + 1.0f / 720;
    t = t * x + 1.0f / 120;
    t = t * x + 1.0f / 24;
    t = t * x + 1.0f / 6;
    t = t * x + 0.5f;
    const float small = (t * x) * x + x;
    const float large = vexp(x) - 1.0f;
    return select_bits(std::fabs(x) < 0.5f, small, large);
}

// tanh(x) = sign(x) (e^2|x| - 1) / (e^2|x| + 1), from vexpm1 so that small |x| keeps its relative
// precision (about 3e-7 relative); |x| >= 9 gives +-1 (tanh(9) rounds to 1 in float).  std::tanh
// is a libm call: 69 ms for 169,343 x 64 floats on 2 threads.
inline float vtanh(float x) {
    const float a = std::fabs(x);
    const float t = vexpm1(2.0f * (a > 9.0f ? 9.0f : a));     // keeps NaN
    return std::copysign(t / (t + 2.0f), x);
}

// 1 / (1 + e^-x), stable for large |x|: exp is only ever taken of a non-positive number.
inline float vsigmoid(float x) {
    const float z = vexp(-std::fabs(x));
    return x >= 0.0f ? 1.0f / (1.0f + z) : z / (1.0f + z);
}

// log(x) for float in plain arithmetic (Cephes' logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)),
// a degree-8 polynomial in m - 1, about 1 ulp).  log(0) = -inf, log(x < 0) = NaN, log(inf) = inf,
// NaN stays NaN; subnormal x are scaled into the normal range first.
inline float vlog(float x) {
    const bool tiny = x < 1.17549435e-38f;                     // FLT_MIN: subnormal, zero or negative
    const float xs = select_bits(tiny, x * 8388608.0f, x);     // * 2^23
    std::uint32_t bits;
    std::memcpy(&bits, &xs, sizeof bits);
    std::int32_t e = std::int32_t((bits >> 23) & 0xffu) - 126 - (tiny ? 23 : 0);
    const std::uint32_t mbits = (bits & 0x007fffffu) | 0x3f000000u;   // mantissa in [0.5, 1)
    float m;
    std::memcpy(&m, &mbits, sizeof m);
    const bool low = m < 0.707106781186547524f;
    e -= low ? 1 : 0;
    const float f = select_bits(low, m + m - 1.0f, m - 1.0f);
    const float z = f * f;
    float p = 7.0376836292e-2f;
    p = p * f - 1.1514610310e-1f;
    p = p * f + 1.1676998740e-1f;
    p = p * f - 1.2420140846e-1f;
    p = p * f + 1.4249322787e-1f;
    p = p * f - 1.6668057665e-1f;
    p = p * f + 2.0000714765e-1f;
    p = p * f - 2.4999993993e-1f;
    p = p * f + 3.3333331174e-1f;
    const float fe = static_cast<float>(e);
    const float y = p * f * z + fe * -2.12194440e-4f - 0.5f * z;
    const float r = f + y + fe * 0.693359375f;
    // the special cases, computed alongside so that the loop stays one vector path
    const float nan_or_r = select_bits(x < 0.0f, NAN, r);
    return select_bits(x == 0.0f, -INFINITY, select_bits(x == INFINITY, INFINITY, select_bits(x != x, x, nan_or_r)));
}

// log(1 + u) for u >= -1 without the rounding of 1 + u (Goldberg's correction: log(w) u / (w - 1)
// with w = 1 + u; u itself where w rounds to 1).
inline float vlog1p(float u) {
    const float w = 1.0f + u;
    const float d = w - 1.0f;
    const float corrected = vlog(w) * (u / select_bits(d == 0.0f, 1.0f, d));
    return select_bits(d == 0.0f, u, select_bits(w == INFINITY, INFINITY, corrected));
}

// erfc(a) for a >= 0: Numerical Recipes' Chebyshev fit (erfcc: t e^(-a^2 + P(t)), t = 1 / (1 + a/2),
// relative error below 1.2e-7 everywhere; in float on [0, 9] 4.1e-6, both ways of evaluating P).
// P's degree 9 is evaluated by Estrin's scheme (pairs, then powers t^2, t^4, t^8): Horner's chain
// of nine dependent FMAs was the latency of every gelu, 2 threads, 719,744 values: AVX2 forward
// 0.50 -> 0.42 ms, derivative 0.80 -> 0.69 ms; AVX-512 0.245 -> 0.20 and 0.34 -> 0.30 ms.
inline float verfc_nonneg(float a) {
    const float t = 1.0f / (1.0f + 0.5f * a);
    const float t2 = t * t, t4 = t2 * t2, t8 = t4 * t4;
    const float p01 = -1.26551223f + 1.00002368f * t, p23 = 0.37409196f + 0.09678418f * t;
    const float p45 = -0.18628806f + 0.27886807f * t, p67 = -1.13520398f + 1.48851587f * t;
    const float p89 = -0.82215223f + 0.17087277f * t;
    const float p = ((p01 + p23 * t2) + (p45 + p67 * t2) * t4) + p89 * t8;
    return t * vexp(-a * a + p);
}

// The standard normal CDF, Phi(x) = (1 + erf(x / sqrt 2)) / 2, gelu's gate.  libm's erff was a
// scalar call (4% of an HGT epoch in gelu and its derivative), and 1 + erff(x) cancels for
// negative x; from erfc of |x| the lower tail keeps its relative precision.
inline float vnormal_cdf(float x) {
    const float half_erfc = 0.5f * verfc_nonneg(std::fabs(x) * 0.70710678118654752f);
    return x >= 0.0f ? 1.0f - half_erfc : half_erfc;
}

}  // namespace mg
