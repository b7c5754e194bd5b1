// Shared definitions of the OpenMP kernel library (namespace mg).
//
// Conventions for every kernel in this folder:
//   * graph indices are int64 (mg::idx_t) (the sparse input features: int64 row pointers, int32
//     columns, as scipy stores them), data is float32, matrices are row-major with an explicit
//     leading dimension (elements between consecutive rows);
//   * graph layout: edges are stored sorted by destination. CSR `indptr[N+1]`, `col[E]` = source
//     node of the edge at CSR position e; per-edge tensors are indexed by that position. The
//     transpose (scatter-to-source) uses a CSR by source: `t_indptr`, `t_col` (= destination) and
//     `t_eid` (= position of the edge in destination order), built by mg::transpose_csr (layout.h);
//   * kernels open their own `omp parallel` regions; none may be called from inside one. BLAS
//     runs either with its own pool outside any region (mg::gemm) or single-threaded on per-thread
//     row blocks inside one (mg::gemm_rows / gemm_tn_rows), see gemm.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>
#include <omp.h>
#include <xmmintrin.h>  // _mm_prefetch

#include "op_types.h"  // runtime/: idx_t, Reduce, Act, Epilogue, Bcast, BinOp, DropoutKey

#define MG_INLINE inline __attribute__((always_inline))
#define MG_RESTRICT __restrict__

#include "simd.h"  // after MG_INLINE, which it uses
#include "vexp.h"  // vexpm1, for the ELU epilogue

namespace mg {

// Status codes returned by kernels that can reject their arguments.
enum Status : int {
    kOk = 0,
    kErrArgument = 1,     // a size or pointer argument is invalid
    kErrInParallel = 2,   // called from inside an OpenMP parallel region
    kErrTooLarge = 3,     // a dimension does not fit the 32-bit BLAS interface
    kErrNoMemory = 4,     // a scratch allocation failed
};

// Runs f(i) for i in [0, n), vectorised, split over the thread team when n > parallel_min.
// Each thread runs its own copy of f over one contiguous range.  Under `parallel for simd` the
// loop read f's captures through the shared closure, and since a float store may alias a
// captured float GCC 12 compiled it to gathers and scatters or left it scalar: scale on 169,343
// x 128 floats took 13.8 ms (3.6 ms this way), elu 22 ms, softplus' derivative 22 ms on 2 threads.
template <class F>
inline void parallel_each(std::int64_t n, std::int64_t parallel_min, F f) {
    auto range = [](std::int64_t b, std::int64_t e, F& body) {
#pragma omp simd
        for (std::int64_t i = b; i < e; ++i) body(i);
    };
    if (n <= parallel_min) return range(0, n, f);
#pragma omp parallel firstprivate(f)
    {
        const std::int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
        const std::int64_t chunk = (n + threads - 1) / threads;
        const std::int64_t b = std::min(n, t * chunk), e = std::min(n, b + chunk);
        range(b, e, f);
    }
}

// Scalar activation used by fused epilogues. `alpha` is the leaky_relu slope or the elu scale.
MG_INLINE float activate(Act act, float x, float alpha) {
    switch (act) {
        case Act::Relu: return x > 0.f ? x : 0.f;
        case Act::LeakyRelu: return x > 0.f ? x : alpha * x;
        case Act::Elu: return x > 0.f ? x : alpha * vexpm1(x);
        case Act::None:
        default: return x;
    }
}

// v[0..n) = act(v + bias) (bias may be nullptr): a fused epilogue on one row segment in cache.
MG_INLINE void apply_epilogue(Act act, float alpha, const float* bias, float* MG_RESTRICT v, std::int64_t n) {
    if (bias) {
#pragma omp simd
        for (std::int64_t i = 0; i < n; ++i) v[i] += bias[i];
    }
    switch (act) {
        case Act::Relu:
#pragma omp simd
            for (std::int64_t i = 0; i < n; ++i) v[i] = v[i] > 0.f ? v[i] : 0.f;
            break;
        case Act::LeakyRelu:
#pragma omp simd
            for (std::int64_t i = 0; i < n; ++i) v[i] = select_bits(v[i] > 0.f, v[i], alpha * v[i]);
            break;
        case Act::Elu:
#pragma omp simd
            for (std::int64_t i = 0; i < n; ++i) v[i] = select_bits(v[i] > 0.f, v[i], alpha * vexpm1(v[i]));
            break;
        case Act::None:
        default:
            break;
    }
}

// v[0..n) += residual[0..n) when there is one: the epilogue's first step.
MG_INLINE void add_residual(const float* residual, float* MG_RESTRICT v, std::int64_t n) {
    if (!residual) return;
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) v[i] += residual[i];
}

// Whether an epilogue does anything.
MG_INLINE bool has_epilogue(const Epilogue& epi) { return epi.bias || epi.act != Act::None || epi.residual; }

// The epilogue of row r of a row-major [*, M] matrix a product has just written (the residual,
// when there is one, has the same layout; a per-type bias gives the row its type's bias row).
MG_INLINE void apply_epilogue_row(const Epilogue& epi, float* Y, std::int64_t M, std::int64_t r) {
    add_residual(epi.residual ? epi.residual + r * M : nullptr, Y + r * M, M);
    const float* bias = epi.bias && epi.bias_type ? epi.bias + epi.bias_type[r] * M : epi.bias;
    apply_epilogue(epi.act, epi.alpha, bias, Y + r * M, M);
}

// The epilogue of a dense product on rows [r0, r1).
inline void apply_epilogue_rows(const Epilogue& epi, float* Y, std::int64_t M, std::int64_t r0, std::int64_t r1) {
    if (!has_epilogue(epi)) return;
    for (std::int64_t r = r0; r < r1; ++r) apply_epilogue_row(epi, Y, M, r);
}

inline int max_threads() { return omp_get_max_threads(); }

// Prefetch the `bytes` starting at p into L1 (one hint per 64-byte line).
template <int BYTES>
MG_INLINE void prefetch_l1(const void* p) {
    const char* c = static_cast<const char*>(p);
#pragma GCC unroll 8
    for (int off = 0; off < BYTES; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

// Prefetch the 64-byte line at p into L2 (not L1): for data a kernel reads soon but in more lines
// than L1 holds.
MG_INLINE void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }

// Calls f with M as a compile-time constant for the usual hidden widths (0: any other width, read
// at run time). A lookup touches B rows of M floats: at M = 16 the loop set-up for each row cost
// more than its one vector of work, while a constant M keeps the row's sum in registers.
template <class Fn>
inline void with_width(idx_t M, Fn fn) {
    switch (M) {
        case 8: fn(std::integral_constant<int, 8>{}); break;
        case 16: fn(std::integral_constant<int, 16>{}); break;
        case 32: fn(std::integral_constant<int, 32>{}); break;
        case 64: fn(std::integral_constant<int, 64>{}); break;
        default: fn(std::integral_constant<int, 0>{}); break;
    }
}

// A row of m floats: on the stack (in registers once inlined) for a constant width, else on the heap.
template <int MC>
struct RowBuffer {
    std::vector<float> heap;
    float fixed[MC ? MC : 1];
    float* data;
    explicit RowBuffer(idx_t m) : heap(MC ? 0 : static_cast<size_t>(m)), data(MC ? fixed : heap.data()) {}
    RowBuffer(const RowBuffer&) = delete;
    RowBuffer& operator=(const RowBuffer&) = delete;
};

// dst[0, n) = src[0, n), inline and vectorised: std::copy of one row is a call to memmove, whose
// set-up costs more than a 64-float row (9% of an HGT epoch went to such calls).
MG_INLINE void copy_row(const float* src, float* dst, idx_t n) {
#pragma omp simd
    for (idx_t j = 0; j < n; ++j) dst[j] = src[j];
}

namespace seg_detail {
// The rows of idx's entries this many places ahead are fetched while a row is added: the edge
// typed linear's sums read G's rows by edge id grouped by (node, type) row, which jumps through G
// in its CSR order, and each row waited on memory.
inline constexpr idx_t kLookahead = 8;

#if MG_HAVE_SIMD
// out = the sum over [i0, i1) of entry.scale(i) * src[entry.row(i)], rows of NV vectors, summed
// in registers (a scale of 1 adds the row exactly: the FMA rounds once, as the add would).
template <int NV, class Entry>
MG_INLINE void sum_rows(const Entry& entry, idx_t i0, idx_t i1, idx_t total, const float* src, float* out) {
    using namespace simd;
    constexpr idx_t m = NV * kLanes;
    vf acc[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[v] = zero();
    for (idx_t i = i0; i < i1; ++i) {
        if (i + kLookahead < total) prefetch_l1<m * 4>(src + entry.row(i + kLookahead) * m);
        const float* r = src + entry.row(i) * m;
        const vf c = set1(entry.scale(i));
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[v] = fmadd(c, load(r + v * kLanes), acc[v]);
    }
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) store(out + v * kLanes, acc[v]);
}
#endif

// out[s] = the sum over i in [ptr[s], ptr[s+1]) of entry.scale(i) * src[entry.row(i)], width
// floats each; 0 for an empty segment, in entry order (the same bits at any thread count).
template <class Entry>
inline void segment_sums(const idx_t* ptr, idx_t segments, const float* src, idx_t width, float* out,
                         const Entry& entry) {
    with_width(width, [&](auto constant) {
        constexpr int MC = decltype(constant)::value;
        const idx_t m = MC ? MC : width;
        const idx_t total = ptr[segments];
#pragma omp parallel    // guided: a few big segments (types) or many small ones (rows, nodes)
        {
            RowBuffer<MC> buffer(m);
            float* acc = buffer.data;
#pragma omp for schedule(guided)
            for (idx_t s = 0; s < segments; ++s) {
#if MG_HAVE_SIMD
                if constexpr (MC > 0 && MC % MG_SIMD_LANES == 0) {
                    sum_rows<MC / MG_SIMD_LANES>(entry, ptr[s], ptr[s + 1], total, src, out + s * m);
                    continue;
                }
#endif
#pragma omp simd
                for (idx_t j = 0; j < m; ++j) acc[j] = 0.f;
                for (idx_t i = ptr[s]; i < ptr[s + 1]; ++i) {
                    if (i + kLookahead < total) prefetch_l1<64>(src + entry.row(i + kLookahead) * m);
                    const float* r = src + entry.row(i) * m;
                    const float c = entry.scale(i);
#pragma omp simd
                    for (idx_t j = 0; j < m; ++j) acc[j] += c * r[j];
                }
                copy_row(acc, out + s * m, m);
            }
        }
    });
}

// Entry i: row idx[i], scale 1.
struct PlainEntries {
    const idx_t* idx;
    MG_INLINE idx_t row(idx_t i) const { return idx[i]; }
    MG_INLINE float scale(idx_t) const { return 1.f; }
};
// Entry i: row rows[i], scale w[idx[i] / w_div].
struct ScaledEntries {
    const idx_t *idx, *rows;
    const float* w;
    idx_t w_div;
    MG_INLINE idx_t row(idx_t i) const { return rows[i]; }
    MG_INLINE float scale(idx_t i) const { return w[idx[i] / w_div]; }
};
}  // namespace seg_detail

// out[s] = the sum of src[idx[i]] over i in [ptr[s], ptr[s+1]), width floats each; 0 for an empty
// segment, in index order (the same bits at any thread count).  Typed parameter rows' gradients
// (ops.h typed_row_sum), the edge typed linear's edges-to-rows and rows-to-nodes sums.  Rows whose
// width is a whole number of vectors (16, 32, 64 with AVX-512) are summed in vector registers with
// the next rows fetched ahead (the loop below left GCC's accumulators on the stack, partly in
// scalar adds).  2 threads, AVX-512: 34,852 rows of 64 into 15,265 sums 0.21 -> 0.07 ms; HGT on
// acm_heco, two interleaved runs of 30 epochs, the typed-linear family (whose edge sums these
// are) 9.1 -> 7.2-7.6 ms an epoch, the epoch 17.7-18.2 -> 15.3-16.5 ms.
inline void segment_row_sums(const idx_t* ptr, const idx_t* idx, idx_t segments, const float* src, idx_t width,
                             float* out) {
    seg_detail::segment_sums(ptr, segments, src, width, out, seg_detail::PlainEntries{idx});
}

// out[s] = the sum of w[idx[i] / w_div] * src[row[i]] over i in [ptr[s], ptr[s+1]), width floats
// each, in index order (the same bits at any thread count): an edge value that is node rows read
// at the edges' far end and scaled per edge, summed into segments without being stored (the edge
// typed linear's gradients of R-GCN's G[dst] / c and HGT's G[dst] times each head's attention;
// w_div = B maps an edge of a B-block product to its one weight).
inline void weighted_segment_row_sums(const idx_t* ptr, const idx_t* idx, const idx_t* row, const float* w,
                                      idx_t w_div, idx_t segments, const float* src, idx_t width, float* out) {
    seg_detail::segment_sums(ptr, segments, src, width, out, seg_detail::ScaledEntries{idx, row, w, w_div});
}

}  // namespace mg
