// One vector vocabulary for the register-tiled kernels (SpMM, tall-skinny products, the sparse
// feature scatter), so each is written once and compiled for the widest ISA the compiler targets:
//
//   AVX-512F        16 float lanes, __mmask16 masks          (MG_SIMD_LANES == 16)
//   AVX2 + FMA       8 float lanes, all-ones-lane int masks   (MG_SIMD_LANES == 8)
//   neither          no vector type: the kernels keep their `#pragma omp simd` loops
//
// -DMG_NO_AVX512 drops AVX-512 for the AVX2 path (tests on AVX-512 machines build both) and
// -DMG_NO_SIMD drops both for the portable loops. Only what the kernels use is here; a masked
// load reads nothing (and cannot fault) in its masked-off lanes, which are zero.
#pragma once

#include <cstdint>
#include <cstring>

#ifndef MG_INLINE
#define MG_INLINE inline __attribute__((always_inline))
#endif

#if !defined(MG_NO_SIMD) && defined(__AVX512F__) && !defined(MG_NO_AVX512)
#include <immintrin.h>
#define MG_SIMD_LANES 16
#define MG_SIMD_ISA "avx512"
#elif !defined(MG_NO_SIMD) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MG_SIMD_LANES 8
#define MG_SIMD_ISA "avx2"
#else
#define MG_SIMD_LANES 1
#define MG_SIMD_ISA "portable"
#endif
#define MG_HAVE_SIMD (MG_SIMD_LANES > 1)

namespace mg {

// c ? a : b without a branch.  GCC will not if-convert a float select whose arm it computed
// only for that arm (the arithmetic might trap), so `y > 0 ? g : alpha * g` left a branch per
// element in its loop; a bitwise select of two values computed unconditionally vectorises.
MG_INLINE float select_bits(bool c, float a, float b) {
    std::uint32_t ua, ub;
    std::memcpy(&ua, &a, sizeof ua);
    std::memcpy(&ub, &b, sizeof ub);
    const std::uint32_t m = 0u - std::uint32_t(c);
    ua = (ua & m) | (ub & ~m);
    std::memcpy(&a, &ua, sizeof a);
    return a;
}

// v where the lane mask k is ~0, +0 where it is 0: one AND (dropout's keep masks are ~0 or 0).
MG_INLINE float keep_bits(std::uint32_t k, float v) {
    std::uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    u &= k;
    std::memcpy(&v, &u, sizeof v);
    return v;
}

}  // namespace mg

namespace mg::simd {

constexpr int kLanes = MG_SIMD_LANES;

#if MG_SIMD_LANES == 16

using vf = __m512;      // float lanes
using vi = __m512i;     // int32 lanes
using mask = __mmask16;

MG_INLINE mask lanes(std::int64_t n) {  // the first min(n, 16) lanes
    return n >= 16 ? mask(0xFFFF) : n <= 0 ? mask(0) : mask((1u << n) - 1u);
}
MG_INLINE vf zero() { return _mm512_setzero_ps(); }
MG_INLINE vf set1(float x) { return _mm512_set1_ps(x); }
MG_INLINE vi set1_i32(std::int32_t x) { return _mm512_set1_epi32(x); }
MG_INLINE vf load(const float* p) { return _mm512_loadu_ps(p); }
MG_INLINE vf load_aligned(const float* p) { return _mm512_load_ps(p); }
MG_INLINE vf load(mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
MG_INLINE void store(float* p, vf v) { _mm512_storeu_ps(p, v); }
MG_INLINE void store_aligned(float* p, vf v) { _mm512_store_ps(p, v); }
MG_INLINE void stream(float* p, vf v) { _mm512_stream_ps(p, v); }  // 64-byte aligned p, past the caches
MG_INLINE vf and_bits(vf v, vi bits) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), bits)); }
MG_INLINE void store(mask m, float* p, vf v) { _mm512_mask_storeu_ps(p, m, v); }
MG_INLINE void store_i32(std::int32_t* p, vi v) { _mm512_storeu_si512(reinterpret_cast<void*>(p), v); }
MG_INLINE void store_mask(std::int32_t* p, mask m) { store_i32(p, _mm512_maskz_set1_epi32(m, -1)); }  // ~0 or 0
MG_INLINE vi load_i32(const std::int32_t* p) { return _mm512_loadu_si512(p); }
// Lane l of the result is lane index[l] of table (index in [0, 16)).
MG_INLINE vf permute(vf table, vi index) { return _mm512_permutexvar_ps(index, table); }
// lane i = lane index[i] of the 32 lanes a then b
MG_INLINE vf permute2(vf a, vf b, vi index) { return _mm512_permutex2var_ps(a, index, b); }
MG_INLINE vf add(vf a, vf b) { return _mm512_add_ps(a, b); }
MG_INLINE vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
// v > 0 ? v : 0 per lane, as the scalar loops (NaN and -0 give +0)
MG_INLINE vf relu(vf v) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v); }
MG_INLINE vf fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
MG_INLINE float reduce_add(vf a) { return _mm512_reduce_add_ps(a); }  // the sum of the lanes
// Lanes of m where a > b (ordered: a NaN on either side compares false).
MG_INLINE mask greater(mask m, vf a, vf b) { return _mm512_mask_cmp_ps_mask(m, a, b, _CMP_GT_OQ); }
MG_INLINE vf select(mask m, vf if_true, vf if_false) { return _mm512_mask_mov_ps(if_false, m, if_true); }
MG_INLINE vi select(mask m, vi if_true, vi if_false) { return _mm512_mask_mov_epi32(if_false, m, if_true); }

// 64-bit integer lanes (kLanes / 2 of them) for counter-based hashing (dropout.h).
using vu64 = __m512i;
MG_INLINE vu64 load_u64(const std::uint64_t* p) { return _mm512_load_si512(p); }  // 64-byte aligned
MG_INLINE vu64 set1_u64(std::uint64_t x) { return _mm512_set1_epi64(std::int64_t(x)); }
MG_INLINE vu64 add_u64(vu64 a, vu64 b) { return _mm512_add_epi64(a, b); }
MG_INLINE vu64 xor_u64(vu64 a, vu64 b) { return _mm512_xor_si512(a, b); }
template <int N>
MG_INLINE vu64 shr_u64(vu64 a) { return _mm512_srli_epi64(a, N); }
MG_INLINE vu64 mul_u64(vu64 a, std::uint64_t c) {  // a * c mod 2^64
#ifdef __AVX512DQ__
    return _mm512_mullo_epi64(a, set1_u64(c));
#else
    const vu64 clo = set1_u64(c & 0xFFFFFFFFu), chi = set1_u64(c >> 32);
    const vu64 cross = _mm512_add_epi64(_mm512_mul_epu32(_mm512_srli_epi64(a, 32), clo), _mm512_mul_epu32(a, chi));
    return _mm512_add_epi64(_mm512_mul_epu32(a, clo), _mm512_slli_epi64(cross, 32));
#endif
}
// Float-lane mask of (x >> 32) >= t over the lanes of lo (elements 0..7) then hi (8..15); t < 2^32.
MG_INLINE mask high_half_at_least(vu64 lo, vu64 hi, std::uint64_t t) {
    const vu64 bound = set1_u64(t << 32);  // (x >> 32) >= t  <=>  x >= t << 32
    return mask(_mm512_cmpge_epu64_mask(lo, bound) | (unsigned(_mm512_cmpge_epu64_mask(hi, bound)) << 8));
}

#elif MG_SIMD_LANES == 8

using vf = __m256;
using vi = __m256i;
using mask = __m256i;   // lane i selected when its 32 bits are all ones

MG_INLINE mask lanes(std::int64_t n) {
    const int k = n >= 8 ? 8 : n <= 0 ? 0 : int(n);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
MG_INLINE vf zero() { return _mm256_setzero_ps(); }
MG_INLINE vf set1(float x) { return _mm256_set1_ps(x); }
MG_INLINE vi set1_i32(std::int32_t x) { return _mm256_set1_epi32(x); }
MG_INLINE vf load(const float* p) { return _mm256_loadu_ps(p); }
MG_INLINE vf load_aligned(const float* p) { return _mm256_load_ps(p); }
MG_INLINE vf load(mask m, const float* p) { return _mm256_maskload_ps(p, m); }
MG_INLINE void store(float* p, vf v) { _mm256_storeu_ps(p, v); }
MG_INLINE void store_aligned(float* p, vf v) { _mm256_store_ps(p, v); }
MG_INLINE void stream(float* p, vf v) { _mm256_stream_ps(p, v); }  // 32-byte aligned p, past the caches
MG_INLINE vf and_bits(vf v, vi bits) { return _mm256_and_ps(v, _mm256_castsi256_ps(bits)); }
MG_INLINE void store(mask m, float* p, vf v) { _mm256_maskstore_ps(p, m, v); }
MG_INLINE void store_i32(std::int32_t* p, vi v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
MG_INLINE void store_mask(std::int32_t* p, mask m) { store_i32(p, m); }  // ~0 or 0 per lane
MG_INLINE vi load_i32(const std::int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
// Lane l of the result is lane index[l] of table (index in [0, 8)).
MG_INLINE vf permute(vf table, vi index) { return _mm256_permutevar8x32_ps(table, index); }
// lane i = lane index[i] of the 16 lanes a then b: both permuted by the low 3 bits, bit 3 picks b
MG_INLINE vf permute2(vf a, vf b, vi index) {
    const __m256 pick_b = _mm256_castsi256_ps(_mm256_slli_epi32(index, 28));
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(a, index), _mm256_permutevar8x32_ps(b, index), pick_b);
}
MG_INLINE vf add(vf a, vf b) { return _mm256_add_ps(a, b); }
MG_INLINE vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
// v > 0 ? v : 0 per lane, as the scalar loops (NaN and -0 give +0)
MG_INLINE vf relu(vf v) { return _mm256_and_ps(v, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ)); }
MG_INLINE vf fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
MG_INLINE float reduce_add(vf a) {  // the sum of the lanes
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
MG_INLINE mask greater(mask m, vf a, vf b) {
    return _mm256_and_si256(m, _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_GT_OQ)));
}
MG_INLINE vf select(mask m, vf if_true, vf if_false) {
    return _mm256_blendv_ps(if_false, if_true, _mm256_castsi256_ps(m));
}
MG_INLINE vi select(mask m, vi if_true, vi if_false) { return _mm256_blendv_epi8(if_false, if_true, m); }

using vu64 = __m256i;
MG_INLINE vu64 load_u64(const std::uint64_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
MG_INLINE vu64 set1_u64(std::uint64_t x) { return _mm256_set1_epi64x(std::int64_t(x)); }
MG_INLINE vu64 add_u64(vu64 a, vu64 b) { return _mm256_add_epi64(a, b); }
MG_INLINE vu64 xor_u64(vu64 a, vu64 b) { return _mm256_xor_si256(a, b); }
template <int N>
MG_INLINE vu64 shr_u64(vu64 a) { return _mm256_srli_epi64(a, N); }
MG_INLINE vu64 mul_u64(vu64 a, std::uint64_t c) {  // a * c mod 2^64 from three 32x32->64 products
    const vu64 clo = set1_u64(c & 0xFFFFFFFFu), chi = set1_u64(c >> 32);
    const vu64 cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), clo), _mm256_mul_epu32(a, chi));
    return _mm256_add_epi64(_mm256_mul_epu32(a, clo), _mm256_slli_epi64(cross, 32));
}
MG_INLINE mask high_half_at_least(vu64 lo, vu64 hi, std::uint64_t t) {
    // (x >> 32) < 2^32 compares correctly as signed; t - 1 wraps to -1 for t = 0 (all lanes).
    const vu64 bound = set1_u64(t - 1);
    const __m256 klo = _mm256_castsi256_ps(_mm256_cmpgt_epi64(_mm256_srli_epi64(lo, 32), bound));
    const __m256 khi = _mm256_castsi256_ps(_mm256_cmpgt_epi64(_mm256_srli_epi64(hi, 32), bound));
    // The low 32 bits of each 64-bit lane, in element order: shuffle gives (0 1 4 5 | 2 3 6 7).
    const __m256 packed = _mm256_shuffle_ps(klo, khi, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_permute4x64_epi64(_mm256_castps_si256(packed), _MM_SHUFFLE(3, 1, 2, 0));
}

#endif

}  // namespace mg::simd
