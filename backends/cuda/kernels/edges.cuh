// Edge kernels of the CUDA backend (Hector's traversal template, node- and edge-parallel):
// gathers of node rows onto edges, segment reductions of edge rows onto nodes over either CSR,
// and the edge softmax over each destination's in-edges.  A segment belongs to one group of
// threads, so no output row has two writers and nothing needs atomics.  Semantics match
// backends/openmp/kernels/edge_ops.h and edge_softmax.h.
#ifndef MORPHGEN_CUDA_EDGES_CUH
#define MORPHGEN_CUDA_EDGES_CUH

#include <cstdint>

#include "../device.cuh"
#include "aggregate.cuh"
#include "elementwise.cuh"
#include "op_types.h"

namespace mg {
namespace cuda {

// out[e, :] = x[idx[e], :]   (idx: the source of each edge) -- an edge-parallel map.
struct GatherRowsOp {
    const float *x;
    const int64_t *idx;
    float *out;
    int64_t F;
    __device__ void operator()(int64_t k) const { out[k] = x[idx[k / F] * F + k % F]; }
};

// out[v, :] = reduce over the segment [indptr[v], indptr[v+1]) of m[eid(k), :]; eid nullptr: k.
// Max: argmax is the edge position of the (first) maximum, -1 and 0 for an empty segment.
__global__ void __launch_bounds__(256) segment_reduce_kernel(Reduce r, const float *m, const int64_t *indptr,
                                                               const int64_t *eid, int64_t rows, int64_t F,
                                                               float *out, int64_t *argmax, int tpr) {
    const int64_t v = int64_t(blockIdx.x) * (blockDim.x / tpr) + threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    if (v >= rows) return;
    const int64_t b = indptr[v], end = indptr[v + 1];
    for (int64_t f = lane; f < F; f += tpr) {
        if (r == Reduce::Max) {
            float best = 0.f;
            int64_t arg = -1;
            for (int64_t k = b; k < end; ++k) {
                const int64_t e = eid ? eid[k] : k;
                const float x = m[e * F + f];
                if (arg < 0 || x > best) {
                    best = x;
                    arg = e;
                }
            }
            out[v * F + f] = best;
            argmax[v * F + f] = arg;
        } else {
            float acc = 0.f;
            for (int64_t k = b; k < end; ++k) acc += m[(eid ? eid[k] : k) * F + f];
            if (r == Reduce::Mean && end > b) acc *= 1.0f / float(end - b);
            out[v * F + f] = acc;
        }
    }
}

// out[e, :] = x[v, :] for every edge e of v's segment (the destination's row onto its in-edges);
// with argmax (the max scatter's backward), out[e, f] = x[v, f] only where argmax[v, f] == e.
__global__ void __launch_bounds__(256) segment_broadcast_kernel(const float *x, const int64_t *indptr,
                                                                  const int64_t *argmax, int64_t rows, int64_t F,
                                                                  float *out, int tpr) {
    const int64_t v = int64_t(blockIdx.x) * (blockDim.x / tpr) + threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    if (v >= rows) return;
    for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e)
        for (int64_t f = lane; f < F; f += tpr)
            out[e * F + f] = (argmax && argmax[v * F + f] != e) ? 0.f : x[v * F + f];
}

// ... onto sources: gm[e, :] from g[u, :] of e's source u = col[e].
struct ScatterSrcGradOp {
    Reduce r;
    const float *g;
    const int64_t *col, *t_indptr, *argmax;
    float *gm;
    int64_t F;
    __device__ void operator()(int64_t k) const {
        const int64_t e = k / F, f = k % F, u = col[e];
        if (r == Reduce::Max) {
            gm[k] = argmax[u * F + f] == e ? g[u * F + f] : 0.f;
        } else {
            const int64_t deg = t_indptr[u + 1] - t_indptr[u];
            gm[k] = (r == Reduce::Mean ? 1.0f / float(deg) : 1.0f) * g[u * F + f];
        }
    }
};

// The in-place traversals (GAT's messages and attention gradient without an E x F gathered copy):
// the attention-weighted sum of x at each edge's other end is the aggregation kernel with
// per-head edge weights (aggregate.cuh, AggArgs::head_weight); the per-edge dot is EdgeDotOp.
//
// out[e, h] = sum_d a[a-end of e, h*D + d] * b[b-end of e, h*D + d], edges in destination CSR
// order (the source of position e is col[e], its destination dst[e]).  Edge-parallel, one
// thread per (edge, head): a group of threads per destination row left a hub's thousands of
// (edge, head) pairs to its 8 threads, one dependent row read after another.
struct EdgeDotOp {
    const float *a;
    bool a_src;
    const float *b;
    bool b_src;
    const int64_t *col, *dst;
    int64_t H, D;
    float *out;
    __device__ void operator()(int64_t k) const {
        const int64_t e = k / H, h = k % H, F = H * D, u = col[e];
        const float *ra = a + (a_src ? u : dst[e]) * F + h * D;
        const float *rb = b + (b_src ? u : dst[e]) * F + h * D;
        float acc = 0.f;
        for (int64_t d = 0; d < D; ++d) acc += ra[d] * rb[d];
        out[k] = acc;
    }
};

// Softmax over the segment [first, end) of score(e) for one (destination, head) pair, by one
// warp: three passes (max, sum of exponentials, normalise) with shuffles; the scores are written
// to `scores` too when it is not nullptr.  Each lane reads back only the elements it wrote, so
// the passes need no barrier between them; alpha may alias what score reads at (e, h).
template <class Score>
__device__ void warp_segment_softmax(int64_t first, int64_t end, int64_t H, int64_t h, int lane, Score score,
                                     float *scores, float *alpha) {
    float mx = -INFINITY;
    for (int64_t e = first + lane; e < end; e += 32) {
        const float y = score(e);
        if (scores != nullptr) scores[e * H + h] = y;
        alpha[e * H + h] = y;
        mx = fmaxf(mx, y);
    }
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float sum = 0.f;
    for (int64_t e = first + lane; e < end; e += 32) sum += expf(alpha[e * H + h] - mx);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float inv = 1.0f / sum;
    for (int64_t e = first + lane; e < end; e += 32) alpha[e * H + h] = expf(alpha[e * H + h] - mx) * inv;
}

// Edge softmax per (destination, head), one warp per pair (warp_segment_softmax).  alpha may
// alias s.
__global__ void edge_softmax_kernel(const float *s, const int64_t *indptr, int64_t num_nodes, int64_t H,
                                    float *alpha) {
    const int64_t k = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (k >= num_nodes * H) return;
    const int64_t v = k / H, h = k % H;
    const int64_t first = indptr[v], end = indptr[v + 1];
    if (first == end) return;
    warp_segment_softmax(first, end, H, h, lane, [&](int64_t e) { return s[e * H + h]; }, nullptr, alpha);
}

// GAT's attention (edge_attention_fwd of the OpenMP backend's edge_softmax.h): per
// (destination, head) one warp computes s = leaky_relu(a[src] + b[v]) for the segment, writes s
// (when a reader needs it) and the softmax of it.
__global__ void edge_attention_kernel(const float *a, const float *b, const int64_t *indptr, const int64_t *col,
                                      int64_t num_nodes, int64_t H, float slope, float *s, float *alpha) {
    const int64_t k = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (k >= num_nodes * H) return;
    const int64_t v = k / H, h = k % H;
    const int64_t first = indptr[v], end = indptr[v + 1];
    if (first == end) return;
    const float bv = b[v * H + h];
    warp_segment_softmax(first, end, H, h, lane, [&](int64_t e) {
        const float x = a[col[e] * H + h] + bv;
        return x > 0.f ? x : slope * x;
    }, s, alpha);
}

// The backward of an edge softmax with its dropout_grad before, its leaky_relu act_grad after
// (s != nullptr) and the sum of the result at destinations (dst_sum != nullptr), per
// (destination, head) one warp (edge_softmax_act_bwd of edge_softmax.h); with none of them
// (p = 0, s and dst_sum nullptr) the plain edge softmax backward.  de holds g' meanwhile; each
// lane reads back only its own elements, so de may alias g.
__global__ void edge_softmax_act_grad_kernel(const float *g, float p, DropoutKey key, const int64_t *edge_ids,
                                             const float *alpha, const float *s, float slope, const int64_t *indptr,
                                             int64_t num_nodes, int64_t H, float *de, float *dst_sum) {
    const int64_t k = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (k >= num_nodes * H) return;
    const int64_t v = k / H, h = k % H;
    const int64_t first = indptr[v], end = indptr[v + 1];
    const bool drop = p > 0.f;
    const uint64_t base = drop ? dropout_detail::stream_base(key) : 0, thr = drop ? dropout_detail::drop_threshold(p) : 0;
    const float scale = drop ? 1.0f / (1.0f - p) : 1.0f;
    float dot = 0.f;
    for (int64_t e = first + lane; e < end; e += 32) {
        const int64_t i = e * H + h;
        const uint64_t key_index = uint64_t(edge_ids != nullptr ? edge_ids[e] * H + h : i);
        const float gv = drop ? (dropout_detail::keep(base, key_index, thr) ? g[i] * scale : 0.f) : g[i];
        de[i] = gv;
        dot += alpha[i] * gv;
    }
    for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    float sum = 0.f;
    for (int64_t e = first + lane; e < end; e += 32) {
        const int64_t i = e * H + h;
        const float ds = alpha[i] * (de[i] - dot);
        const float d = s == nullptr ? ds : (s[i] > 0.f ? ds : slope * ds);
        de[i] = d;
        sum += d;
    }
    if (dst_sum == nullptr) return;
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) dst_sum[v * H + h] = sum;
}

}  // namespace cuda
}  // namespace mg
#endif
