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

}  // namespace mg
