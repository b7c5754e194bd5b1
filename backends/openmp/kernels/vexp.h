// exp, expm1 and erf for float in plain arithmetic, so that loops calling them vectorise (given
// -fno-trapping-math, morphgen/toolchain.py: g++ 12 keeps std::floor scalar without it).
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
    const float fn = std::floor(xc * 1.44269504088896341f + 0.5f);
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
