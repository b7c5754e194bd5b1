// Edge softmax: softmax of edge scores [E, H] over each destination's incoming edges, per head.
//
// Edges are sorted by destination, so the incoming edges of v are the CSR segment
// [indptr[v], indptr[v+1]) and each segment is handled by one thread (no atomics).  Empty
// segments produce nothing.  Backward: dS = alpha * (g - sum_seg(alpha * g)).  GAT's attention
// (its scores from two node values and a leaky ReLU) and the backward with the attention
// dropout, the leaky ReLU's gradient and the sum at destinations each take one walk of the
// segments (edge_attention_fwd, edge_softmax_act_bwd); the plain forms are their special cases.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common.h"
#include "dropout.h"

namespace mg {

namespace esm_detail {

// An exponential per element makes a segment walk worth the thread team from 2,048 scores on:
// GAT's one-head second layer on citeseer (about 12,400 edges) took 93 us a call on one thread,
// 50 on two (docs/benchmarks.md: GAT's epochs on cora and citeseer 4-5% shorter).
inline constexpr int64_t kParallelMin = 1 << 11;
inline constexpr int64_t kLookahead = 16;       // edges ahead whose source row is fetched
inline constexpr int64_t kRowChunk = 64;         // destinations a thread takes at a time
inline constexpr int64_t kChunkMaskMax = 2048;    // elements of a chunk's masks made in one run (8 KiB an array)

// Per-head state of one segment: HC heads known at compile time (the loops over heads unroll and
// vectorise; the per-edge loop overhead of a run-time trip count was most of these kernels' time
// at GAT's 8 heads and 1 head), or H at run time (HC == 0) in a thread's buffer.
template <int HC>
struct HeadState {
    float v[HC];
    explicit HeadState(int64_t) {}
    float* data() { return v; }
};
template <>
struct HeadState<0> {
    std::vector<float> v;
    explicit HeadState(int64_t H) : v(static_cast<size_t>(H)) {}
    float* data() { return v.data(); }
};

// Calls f(std::integral_constant<int, HC>) with HC = H for the common head counts, 0 otherwise.
template <class F>
inline void by_heads(int64_t H, F f) {
    switch (H) {
        case 1: return f(std::integral_constant<int, 1>{});
        case 2: return f(std::integral_constant<int, 2>{});
        case 4: return f(std::integral_constant<int, 4>{});
        case 8: return f(std::integral_constant<int, 8>{});
        default: return f(std::integral_constant<int, 0>{});
    }
}

// Softmax over each destination's edges of score(v, e)(h), per head (score(v, e) returns the
// edge's function of the head, its row pointers computed once per edge); the scores are written
// to `scores` too when it is not nullptr.  alpha may alias what score reads at (e, h).
template <int HC, class Score>
void softmax_rows(const int64_t* indptr, int64_t num_nodes, int64_t heads, Score score, float* scores,
                  float* alpha) {
    const int64_t H = HC > 0 ? HC : heads;
#pragma omp parallel if (indptr[num_nodes] * H > kParallelMin)
    {
        HeadState<HC> mx_state(H), sum_state(H);
        float* MG_RESTRICT mx = mx_state.data();
        float* MG_RESTRICT sum = sum_state.data();
#pragma omp for schedule(dynamic, 64)
        for (int64_t v = 0; v < num_nodes; ++v) {
            const int64_t b0 = indptr[v], e_end = indptr[v + 1];
            if (b0 == e_end) continue;
            for (int64_t h = 0; h < H; ++h) mx[h] = -INFINITY;
            for (int64_t e = b0; e < e_end; ++e) {
                float* out = alpha + e * H;
                const auto edge_score = score(v, e);
#pragma omp simd
                for (int64_t h = 0; h < H; ++h) {
                    const float y = edge_score(h);
                    out[h] = y;
                    mx[h] = y > mx[h] ? y : mx[h];
                }
                if (scores != nullptr)
                    for (int64_t h = 0; h < H; ++h) scores[e * H + h] = out[h];
            }
            if constexpr (HC == 1) {      // one head: the segment is one run of scores
                float total = 0.0f;
                const float m = mx[0];
#pragma omp simd reduction(+ : total)
                for (int64_t e = b0; e < e_end; ++e) {
                    const float x = vexp(alpha[e] - m);
                    alpha[e] = x;
                    total += x;
                }
                const float inv = 1.0f / total;
#pragma omp simd
                for (int64_t e = b0; e < e_end; ++e) alpha[e] *= inv;
            } else {
                for (int64_t h = 0; h < H; ++h) sum[h] = 0.0f;
                for (int64_t e = b0; e < e_end; ++e)
#pragma omp simd
                    for (int64_t h = 0; h < H; ++h) {
                        const float x = vexp(alpha[e * H + h] - mx[h]);
                        alpha[e * H + h] = x;
                        sum[h] += x;
                    }
                for (int64_t h = 0; h < H; ++h) sum[h] = 1.0f / sum[h];   // >= 1: the max term is exp(0)
                for (int64_t e = b0; e < e_end; ++e)
#pragma omp simd
                    for (int64_t h = 0; h < H; ++h) alpha[e * H + h] *= sum[h];
            }
        }
    }
}

template <int HC>
void softmax_act_rows(const float* g, float p, DropoutKey key, const int64_t* edge_ids, const float* alpha,
                      const float* s, float slope, const int64_t* indptr, int64_t num_nodes, int64_t heads, float* de,
                      float* dst_sum) {
    using namespace dropout_detail;
    const int64_t H = HC > 0 ? HC : heads;
    const bool drop = p > 0.0f;
    const uint64_t base = drop ? stream_base(key) : 0, thr = drop ? drop_threshold(p) : 0;
    const float scale = drop ? 1.0f / (1.0f - p) : 1.0f;
    const int64_t chunks = (num_nodes + kRowChunk - 1) / kRowChunk;
#pragma omp parallel if (indptr[num_nodes] * H > kParallelMin)
    {
        HeadState<HC> dot_state(H), sum_state(H);
        float* MG_RESTRICT dot = dot_state.data();
        float* MG_RESTRICT sum = sum_state.data();
        alignas(64) uint32_t k[kBlock];
        auto drop_run = [&](int64_t lo, int64_t hi) {   // de[lo, hi) = dropout(g), keyed by position
            for (int64_t i = lo; i < hi; i += kBlock) {
                const int64_t m = hi - i < kBlock ? hi - i : kBlock;
                keep_masks(base, static_cast<uint64_t>(i), m, thr, k);
#pragma omp simd
                for (int64_t j = 0; j < m; ++j) de[i + j] = keep_bits(k[j], g[i + j] * scale);
            }
        };
#pragma omp for schedule(dynamic, 1)
        for (int64_t c = 0; c < chunks; ++c) {
            const int64_t v0 = c * kRowChunk, v1 = std::min(num_nodes, v0 + kRowChunk);
            // Masks in whole blocks over the chunk's segments, one run of the stream, while the
            // run is small enough to stay in L1 for the walk after it (per segment, the mask
            // generator's set-up cost more than a one-head segment's few masks).
            const int64_t lo = indptr[v0] * H, hi = indptr[v1] * H;
            const bool chunk_masks = drop && edge_ids == nullptr && hi - lo <= kChunkMaskMax;
            if (chunk_masks) drop_run(lo, hi);
            for (int64_t v = v0; v < v1; ++v) {
                const int64_t b0 = indptr[v], e_end = indptr[v + 1];
                if (b0 == e_end) {
                    if (dst_sum != nullptr)
                        for (int64_t h = 0; h < H; ++h) dst_sum[v * H + h] = 0.0f;
                    continue;
                }
                if (drop && !chunk_masks && edge_ids == nullptr) {
                    drop_run(b0 * H, e_end * H);          // the segment's masks: one run
                } else if (drop && edge_ids != nullptr) {  // one run per edge, at its global id
                    for (int64_t e = b0; e < e_end; ++e)
                        for (int64_t h = 0; h < H; h += kBlock) {
                            const int64_t m = H - h < kBlock ? H - h : kBlock, i = e * H + h;
                            keep_masks(base, static_cast<uint64_t>(edge_ids[e] * H + h), m, thr, k);
                            for (int64_t j = 0; j < m; ++j) de[i + j] = keep_bits(k[j], g[i + j] * scale);
                        }
                }
                const float* gd = drop ? de : g;   // g', in de when the dropout's mask applied
                if constexpr (HC == 1) {
                    float d = 0.0f;
#pragma omp simd reduction(+ : d)
                    for (int64_t e = b0; e < e_end; ++e) d += alpha[e] * gd[e];
                    dot[0] = d;
                } else {
                    for (int64_t h = 0; h < H; ++h) dot[h] = 0.0f;
                    for (int64_t e = b0; e < e_end; ++e)
#pragma omp simd
                        for (int64_t h = 0; h < H; ++h) dot[h] += alpha[e * H + h] * gd[e * H + h];
                }
                for (int64_t h = 0; h < H; ++h) sum[h] = 0.0f;
                for (int64_t e = b0; e < e_end; ++e)
#pragma omp simd
                    for (int64_t h = 0; h < H; ++h) {
                        const float ds = alpha[e * H + h] * (gd[e * H + h] - dot[h]);
                        const float d = s == nullptr ? ds : select_bits(s[e * H + h] > 0.0f, ds, slope * ds);
                        de[e * H + h] = d;
                        sum[h] += d;
                    }
                if (dst_sum != nullptr)
                    for (int64_t h = 0; h < H; ++h) dst_sum[v * H + h] = sum[h];
            }
        }
    }
}

}  // namespace esm_detail

// GAT's attention coefficients in one walk of each destination's incoming edges:
//   s[e, h] = leaky_relu(a[src(e), h] + b[v, h]),  alpha[e, .] = softmax of s over v's edges.
// It replaces gather, gather, add, leaky_relu and edge_softmax_fwd (five passes over [E, H]
// arrays, four of them written) with one that writes alpha and, when a reader needs it (the
// backward's act_grad), s.  The arithmetic is that of the five kernels (edge_softmax_fwd runs the
// same loops), so the results are the same to the bit.  s may be nullptr.
//
// The source's row of a is a random read per edge: the row of the edge kLookahead positions on
// is fetched meanwhile (GAT's 8 heads on an arxiv-sized graph, 2 threads: 16.5 -> 11.8 ms).
inline void edge_attention_fwd(const float* a, const float* b, const int64_t* indptr, const int64_t* col,
                               int64_t num_nodes, int64_t H, float slope, float* s, float* alpha) {
    const int64_t E = indptr[num_nodes];
    esm_detail::by_heads(H, [&](auto hc) {
        const int64_t heads = decltype(hc)::value > 0 ? decltype(hc)::value : H;
        auto score = [=](int64_t v, int64_t e) {
            if (e + esm_detail::kLookahead < E) __builtin_prefetch(a + col[e + esm_detail::kLookahead] * heads);
            const float *au = a + col[e] * heads, *bv = b + v * heads;
            return [=](int64_t h) {
                const float x = au[h] + bv[h];
                return x > 0.0f ? x : slope * x;
            };
        };
        esm_detail::softmax_rows<decltype(hc)::value>(indptr, num_nodes, H, score, s, alpha);
    });
}

// alpha[e, h] = exp(s[e,h] - max_seg s) / sum_seg exp(s - max_seg s), the softmax over each
// destination's incoming edges (a segment of the CSR, one thread's: no atomics).  alpha may alias s.
inline void edge_softmax_fwd(const float* s, const int64_t* indptr, int64_t num_nodes, int64_t H, float* alpha) {
    esm_detail::by_heads(H, [&](auto hc) {
        const int64_t heads = decltype(hc)::value > 0 ? decltype(hc)::value : H;
        auto score = [=](int64_t, int64_t e) {
            const float* se = s + e * heads;
            return [=](int64_t h) { return se[h]; };
        };
        esm_detail::softmax_rows<decltype(hc)::value>(indptr, num_nodes, H, score, nullptr, alpha);
    });
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
    esm_detail::by_heads(H, [&](auto hc) {
        esm_detail::softmax_act_rows<decltype(hc)::value>(g, p, key, edge_ids, alpha, s, slope, indptr, num_nodes, H,
                                                          de, dst_sum);
    });
}

// ds[e, h] = alpha[e,h] * (g[e,h] - sum_{e' in seg} alpha[e',h] * g[e',h]).  ds may alias g.
inline void edge_softmax_bwd(const float* alpha, const float* g, const int64_t* indptr, int64_t num_nodes,
                             int64_t H, float* ds) {
    edge_softmax_act_bwd(g, 0.0f, DropoutKey{0, 0, 0}, nullptr, alpha, nullptr, 1.0f, indptr, num_nodes, H, ds,
                         nullptr);
}

}  // namespace mg
