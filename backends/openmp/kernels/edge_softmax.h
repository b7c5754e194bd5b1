// Edge softmax: softmax of edge scores [E, H] over each destination's incoming edges, per head.
//
// Edges are sorted by destination, so the incoming edges of v are the CSR segment
// [indptr[v], indptr[v+1]) and each segment is handled by one thread (no atomics).  Empty
// segments produce nothing.  Backward: dS = alpha * (g - sum_seg(alpha * g)).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "common.h"
#include "dropout.h"

namespace mg {

namespace esm_detail {
inline constexpr int64_t kParallelMin = 1 << 14;
}

// alpha[e, h] = exp(s[e,h] - max_seg s) / sum_seg exp(s - max_seg s).  alpha may alias s.
inline void edge_softmax_fwd(const float* s, const int64_t* indptr, int64_t num_nodes, int64_t H, float* alpha) {
#pragma omp parallel if (indptr[num_nodes] * H > esm_detail::kParallelMin)
    {
        std::vector<float> mx(static_cast<size_t>(H)), sum(static_cast<size_t>(H));
#pragma omp for schedule(dynamic, 64)
        for (int64_t v = 0; v < num_nodes; ++v) {
            const int64_t b = indptr[v], e_end = indptr[v + 1];
            if (b == e_end) continue;
            for (int64_t h = 0; h < H; ++h) mx[h] = s[b * H + h];
            for (int64_t e = b + 1; e < e_end; ++e)
#pragma omp simd
                for (int64_t h = 0; h < H; ++h) mx[h] = s[e * H + h] > mx[h] ? s[e * H + h] : mx[h];
            for (int64_t h = 0; h < H; ++h) sum[h] = 0.0f;
            for (int64_t e = b; e < e_end; ++e)
#pragma omp simd
                for (int64_t h = 0; h < H; ++h) {
                    const float x = vexp(s[e * H + h] - mx[h]);
                    alpha[e * H + h] = x;
                    sum[h] += x;
                }
            for (int64_t h = 0; h < H; ++h) sum[h] = 1.0f / sum[h];  // sum >= 1: the max term is exp(0)
            for (int64_t e = b; e < e_end; ++e)
#pragma omp simd
                for (int64_t h = 0; h < H; ++h) alpha[e * H + h] *= sum[h];
        }
    }
}

// ds[e, h] = alpha[e,h] * (g[e,h] - sum_{e' in seg} alpha[e',h] * g[e',h]).  ds may alias g.
inline void edge_softmax_bwd(const float* alpha, const float* g, const int64_t* indptr, int64_t num_nodes,
                             int64_t H, float* ds) {
#pragma omp parallel if (indptr[num_nodes] * H > esm_detail::kParallelMin)
    {
        std::vector<float> dot(static_cast<size_t>(H));
#pragma omp for schedule(dynamic, 64)
        for (int64_t v = 0; v < num_nodes; ++v) {
            const int64_t b = indptr[v], e_end = indptr[v + 1];
            if (b == e_end) continue;
            for (int64_t h = 0; h < H; ++h) dot[h] = 0.0f;
            for (int64_t e = b; e < e_end; ++e)
#pragma omp simd
                for (int64_t h = 0; h < H; ++h) dot[h] += alpha[e * H + h] * g[e * H + h];
            for (int64_t e = b; e < e_end; ++e)
#pragma omp simd
                for (int64_t h = 0; h < H; ++h) ds[e * H + h] = alpha[e * H + h] * (g[e * H + h] - dot[h]);
        }
    }
}

// GAT's attention coefficients in one walk of each destination's incoming edges:
//   s[e, h] = leaky_relu(a[src(e), h] + b[v, h]),  alpha[e, .] = softmax of s over v's edges.
// It replaces gather, gather, add, leaky_relu and edge_softmax_fwd (five passes over [E, H]
// arrays, four of them written) with one that writes alpha and, when a reader needs it (the
// backward's act_grad), s.  The arithmetic is that of the five kernels: the same sums, the same
// comparisons, the same order, so the results are the same to the bit.  s may be nullptr.
inline void edge_attention_fwd(const float* a, const float* b, const int64_t* indptr, const int64_t* col,
                               int64_t num_nodes, int64_t H, float slope, float* s, float* alpha) {
#pragma omp parallel if (indptr[num_nodes] * H > esm_detail::kParallelMin)
    {
        std::vector<float> mx(static_cast<size_t>(H)), sum(static_cast<size_t>(H));
#pragma omp for schedule(dynamic, 64)
        for (int64_t v = 0; v < num_nodes; ++v) {
            const int64_t b0 = indptr[v], e_end = indptr[v + 1];
            if (b0 == e_end) continue;
            const float* bv = b + v * H;
            for (int64_t e = b0; e < e_end; ++e) {
                const float* au = a + col[e] * H;
                float* out = alpha + e * H;
#pragma omp simd
                for (int64_t h = 0; h < H; ++h) {
                    const float x = au[h] + bv[h];
                    out[h] = x > 0.0f ? x : slope * x;
                }
                if (s != nullptr)
                    for (int64_t h = 0; h < H; ++h) s[e * H + h] = out[h];
            }
            for (int64_t h = 0; h < H; ++h) mx[h] = alpha[b0 * H + h];
            for (int64_t e = b0 + 1; e < e_end; ++e)
#pragma omp simd
                for (int64_t h = 0; h < H; ++h) mx[h] = alpha[e * H + h] > mx[h] ? alpha[e * H + h] : mx[h];
            for (int64_t h = 0; h < H; ++h) sum[h] = 0.0f;
            for (int64_t e = b0; e < e_end; ++e)
#pragma omp simd
                for (int64_t h = 0; h < H; ++h) {
                    const float x = vexp(alpha[e * H + h] - mx[h]);
                    alpha[e * H + h] = x;
                    sum[h] += x;
                }
            for (int64_t h = 0; h < H; ++h) sum[h] = 1.0f / sum[h];
            for (int64_t e = b0; e < e_end; ++e)
#pragma omp simd
                for (int64_t h = 0; h < H; ++h) alpha[e * H + h] *= sum[h];
        }
    }
}

// The backward of an edge softmax with what surrounds it, in one walk of each destination's
// edges (it replaces up to four passes over [E, H] arrays):
//   g'  = dropout_grad(g)                 when p > 0 (the mask of `key`, regenerated; element (e, h)
//                                         keyed as edge_ids[e] * H + h, e * H + h when edge_ids is
//                                         nullptr: a rank's edges are keyed by their global ids)
//   ds  = alpha * (g' - sum_seg alpha * g')   (edge_softmax_bwd)
//   de  = s > 0 ? ds : slope * ds        when s != nullptr (act_grad of leaky_relu, s its output)
//   dst_sum[v, h] = sum_seg de[e, h]     when dst_sum != nullptr (a scatter of de to destinations)
// de is written (other kernels read it) and serves as the scratch for g' meanwhile.
inline void edge_softmax_act_bwd(const float* g, float p, DropoutKey key, const int64_t* edge_ids, const float* alpha,
                                 const float* s, float slope, const int64_t* indptr, int64_t num_nodes, int64_t H,
                                 float* de, float* dst_sum) {
    using namespace dropout_detail;
    const bool drop = p > 0.0f;
    const uint64_t base = drop ? stream_base(key) : 0, thr = drop ? drop_threshold(p) : 0;
    const float scale = drop ? 1.0f / (1.0f - p) : 1.0f;
#pragma omp parallel if (indptr[num_nodes] * H > esm_detail::kParallelMin)
    {
        std::vector<float> dot(static_cast<size_t>(H));
        alignas(64) uint32_t k[kBlock];
#pragma omp for schedule(dynamic, 64)
        for (int64_t v = 0; v < num_nodes; ++v) {
            const int64_t b0 = indptr[v], e_end = indptr[v + 1];
            float* sum_v = dst_sum != nullptr ? dst_sum + v * H : nullptr;
            if (sum_v != nullptr)
                for (int64_t h = 0; h < H; ++h) sum_v[h] = 0.0f;
            if (b0 == e_end) continue;
            const int64_t lo = b0 * H, hi = e_end * H;     // the segment's elements, flat
            if (drop && edge_ids == nullptr) {      // the segment's masks are one run of the stream
                for (int64_t i = lo; i < hi; i += kBlock) {
                    const int64_t m = hi - i < kBlock ? hi - i : kBlock;
                    keep_masks(base, static_cast<uint64_t>(i), m, thr, k);
#pragma omp simd
                    for (int64_t j = 0; j < m; ++j) de[i + j] = select_bits(k[j] != 0u, g[i + j] * scale, 0.0f);
                }
            } else if (drop) {                      // one run per edge, at its global id
                for (int64_t e = b0; e < e_end; ++e)
                    for (int64_t h = 0; h < H; h += kBlock) {
                        const int64_t m = H - h < kBlock ? H - h : kBlock, i = e * H + h;
                        keep_masks(base, static_cast<uint64_t>(edge_ids[e] * H + h), m, thr, k);
                        for (int64_t j = 0; j < m; ++j) de[i + j] = select_bits(k[j] != 0u, g[i + j] * scale, 0.0f);
                    }
            }
            const float* gd = drop ? de : g;   // g', in de when the dropout's mask applied
            for (int64_t h = 0; h < H; ++h) dot[h] = 0.0f;
            for (int64_t e = b0; e < e_end; ++e)
#pragma omp simd
                for (int64_t h = 0; h < H; ++h) dot[h] += alpha[e * H + h] * gd[e * H + h];
            for (int64_t e = b0; e < e_end; ++e) {
#pragma omp simd
                for (int64_t h = 0; h < H; ++h) {
                    const float ds = alpha[e * H + h] * (gd[e * H + h] - dot[h]);
                    de[e * H + h] = s == nullptr ? ds : select_bits(s[e * H + h] > 0.0f, ds, slope * ds);
                }
                if (sum_v != nullptr)
                    for (int64_t h = 0; h < H; ++h) sum_v[h] += de[e * H + h];
            }
        }
    }
}

}  // namespace mg
