// Edge kernels of the CUDA backend (Hector's traversal template, node- and edge-parallel):
// gathers of node rows onto edges, segment reductions of edge rows onto nodes over either CSR,
// and the edge softmax over each destination's in-edges.  A segment belongs to one group of
// threads, so no output row has two writers and nothing needs atomics.  Semantics match
// backends/openmp/kernels/edge_ops.h and edge_softmax.h.
#ifndef MORPHGEN_CUDA_EDGES_CUH
#define MORPHGEN_CUDA_EDGES_CUH

#include <cstdint>
#include <type_traits>

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

// out[v, :] = max over the segment [indptr[v], indptr[v+1]) of m[eid(k), :]; eid nullptr: k.
// argmax is the edge position of the (first) maximum, -1 and 0 for an empty segment: the first
// entry is taken whatever its value, a later one only when greater.  Sums and means of segments
// run on the aggregation kernel instead (ops.cuh: segment_sum).  Long segments (split) are walked
// in pieces, as the aggregation's rows: each piece's first maximum and its edge go to the split's
// partial rows, a piece after the first taking only entries greater than -inf (so that it finds
// what the whole walk would compare), and SplitSegmentMaxOp keeps the first piece's and then a
// later piece's only when strictly greater: the whole walk's pick.
__global__ void __launch_bounds__(256) segment_max_kernel(const float *m, const int64_t *indptr, const int64_t *eid,
                                                            int64_t rows, int64_t F, float *out, int64_t *argmax,
                                                            int tpr, RowSplit split) {
    const int64_t group = int64_t(blockIdx.x) * (blockDim.x / tpr) + threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    int64_t seg;
    const int64_t v = split_row(split, group, seg);
    if (v >= rows) return;
    const int64_t row_begin = indptr[v];
    int64_t b = row_begin, end = indptr[v + 1];
    if (!split_range(split, seg, b, end)) return;
    const bool takes_first = b == row_begin;
    for (int64_t f = lane; f < F; f += tpr) {
        float best = takes_first ? 0.f : -INFINITY;
        int64_t arg = -1;
        for (int64_t k = b; k < end; ++k) {
            const int64_t e = eid ? eid[k] : k;
            const float x = m[e * F + f];
            if ((arg < 0 && takes_first) || x > best) {
                best = x;
                arg = e;
            }
        }
        if (seg >= 0) {
            split.partial[seg * F + f] = best;
            split.partial_arg[seg * F + f] = arg;
        } else {
            out[v * F + f] = best;
            argmax[v * F + f] = arg;
        }
    }
}

// The split segments of a max scatter, one (segment, feature) per first piece of a segment: the
// pieces' maxima in order (see segment_max_kernel).
struct SplitSegmentMaxOp {
    RowSplit split;
    int64_t F;
    float *out;
    int64_t *argmax;
    __device__ void operator()(int64_t k) const {
        const int64_t s = k / F, f = k % F;
        if (split.seg_first[s] != s) return;
        float best = 0.f;
        int64_t arg = -1;
        for (int64_t i = s; i < split.segments && split.seg_first[i] == s; ++i) {
            const int64_t e = split.partial_arg[i * F + f];
            if (e >= 0 && (arg < 0 || split.partial[i * F + f] > best)) {
                best = split.partial[i * F + f];
                arg = e;
            }
        }
        out[split.seg_row[s] * F + f] = best;
        argmax[split.seg_row[s] * F + f] = arg;
    }
};

// out[e, f] = x[dst[e], f] where argmax[dst[e], f] == e, else 0 (the max scatter's backward onto
// in-edges): edge-parallel, so a hub's thousands of in-edges are not one thread's loop.
struct ArgmaxBroadcastOp {
    const float *x;
    const int64_t *dst, *argmax;
    float *out;
    int64_t F;
    __device__ void operator()(int64_t k) const {
        const int64_t e = k / F, i = dst[e] * F + k % F;
        out[k] = argmax[i] == e ? x[i] : 0.f;
    }
};

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

// The edge softmaxes give each (destination, head) pair a group of G lanes of a warp (G = 4, 8,
// 16 or 32, chosen per launch from the graph's average in-degree, ops.cuh: softmax_lanes): one
// warp per pair left 25 of its 32 lanes idle at the arxiv-shaped graph's 7 in-edges per node.
// A group strides its segment by G and reduces with shuffles of width G; every lane of the warp
// takes part in every shuffle (a lane past the last pair walks an empty segment and writes
// nothing), so there is no early return.
template <int G>
struct LaneGroup {
    static constexpr int kSize = G;
    int64_t pair;   // destination * H + head
    int lane;       // in [0, G)
    __device__ LaneGroup() {
        const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
        pair = t / G;
        lane = int(t % G);
    }
    template <class T>
    __device__ T sum(T v) const {
        for (int off = G / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off, G);
        return v;
    }
    __device__ float max(float v) const {
        for (int off = G / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off, G));
        return v;
    }
};

// A hub's pair gets a whole block instead (G = 0 below): the destinations with more in-edges
// than a lane group should walk (ops.cuh: SoftmaxLongRows), one block per (such destination,
// head).  A lane group of 8 walking the 2,108 in-edges of the arxiv-shaped graph's largest hub,
// each step waiting on two dependent reads, set the time of the whole launch.  The block's
// reductions go through shared memory; all of its threads take part in each.
struct BlockGroup {
    static constexpr int kSize = kThreads;
    int64_t pair;
    int lane;
    __device__ BlockGroup(const int64_t *long_rows, int64_t H)
        : pair(long_rows[blockIdx.x / H] * H + blockIdx.x % H), lane(int(threadIdx.x)) {}
    template <class Op>
    __device__ float reduce(float v, Op op) const {
        __shared__ float warp_part[kThreads / 32];
        for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
        __syncthreads();   // the previous reduction has read warp_part
        if (lane % 32 == 0) warp_part[lane / 32] = v;
        __syncthreads();
        v = warp_part[0];
        for (int w = 1; w < kThreads / 32; ++w) v = op(v, warp_part[w]);
        return v;
    }
    __device__ float sum(float v) const { return reduce(v, [](float a, float b) { return a + b; }); }
    __device__ float max(float v) const { return reduce(v, [](float a, float b) { return fmaxf(a, b); }); }
};
template <int G>
using SoftmaxGroup = std::conditional_t<G == 0, BlockGroup, LaneGroup<G>>;
template <int G>
__device__ SoftmaxGroup<G> softmax_group(const int64_t *long_rows, int64_t H) {
    if constexpr (G == 0) return BlockGroup(long_rows, H);
    else return LaneGroup<G>();
}

// Softmax over the segment [first, end) of score(e) for one (destination, head) pair, by one
// group: three passes (max, sum of exponentials, normalise); the scores are written to `scores`
// too when it is not nullptr.  Each lane reads back only the elements it wrote, so the passes
// need no barrier between them; alpha may alias what score reads at (e, h).  An empty segment
// writes nothing.
template <class Group, class Score>
__device__ void group_segment_softmax(const Group &grp, int64_t first, int64_t end, int64_t H, int64_t h,
                                      Score score, float *scores, float *alpha) {
    constexpr int G = Group::kSize;
    float mx = -INFINITY;
    for (int64_t e = first + grp.lane; e < end; e += G) {
        const float y = score(e);
        if (scores != nullptr) scores[e * H + h] = y;
        alpha[e * H + h] = y;
        mx = fmaxf(mx, y);
    }
    mx = grp.max(mx);
    float sum = 0.f;
    for (int64_t e = first + grp.lane; e < end; e += G) sum += expf(alpha[e * H + h] - mx);
    sum = grp.sum(sum);
    const float inv = 1.0f / sum;
    for (int64_t e = first + grp.lane; e < end; e += G) alpha[e * H + h] = expf(alpha[e * H + h] - mx) * inv;
}

// The segment [first, end) of a group's pair (destination v = pair / H, head h).  Returns whether
// the group owns the pair: a lane group past the last pair, or whose destination has more than
// long_edges in-edges (a block's, long_edges >= 0), gets an empty segment and owns nothing.
template <class Group>
__device__ bool group_segment(const Group &grp, const int64_t *indptr, int64_t num_nodes, int64_t H,
                              int64_t long_edges, int64_t &v, int64_t &h, int64_t &first, int64_t &end) {
    bool owned = grp.pair < num_nodes * H;
    v = owned ? grp.pair / H : 0;
    h = owned ? grp.pair % H : 0;
    first = owned ? indptr[v] : 0;
    end = owned ? indptr[v + 1] : 0;
    if (!std::is_same_v<Group, BlockGroup> && long_edges >= 0 && end - first > long_edges) owned = false;
    if (!owned) first = end = 0;
    return owned;
}

// Edge softmax per (destination, head), one group per pair.  alpha may alias s.
template <int G>
__global__ void edge_softmax_kernel(const float *s, const int64_t *indptr, int64_t num_nodes, int64_t H,
                                    float *alpha, const int64_t *long_rows, int64_t long_edges) {
    const auto grp = softmax_group<G>(long_rows, H);
    int64_t v, h, first, end;
    group_segment(grp, indptr, num_nodes, H, long_edges, v, h, first, end);
    group_segment_softmax(grp, first, end, H, h, [&](int64_t e) { return s[e * H + h]; }, nullptr, alpha);
}

// GAT's attention (edge_attention_fwd of the OpenMP backend's edge_softmax.h): per
// (destination, head) one group computes s = leaky_relu(a[src] + b[v]) for the segment,
// writes s (when a reader needs it) and the softmax of it.
template <int G>
__global__ void edge_attention_kernel(const float *a, const float *b, const int64_t *indptr, const int64_t *col,
                                      int64_t num_nodes, int64_t H, float slope, float *s, float *alpha,
                                      const int64_t *long_rows, int64_t long_edges) {
    const auto grp = softmax_group<G>(long_rows, H);
    int64_t v, h, first, end;
    group_segment(grp, indptr, num_nodes, H, long_edges, v, h, first, end);
    const float bv = first < end ? b[v * H + h] : 0.f;
    group_segment_softmax(grp, first, end, H, h, [&](int64_t e) {
        const float x = a[col[e] * H + h] + bv;
        return x > 0.f ? x : slope * x;
    }, s, alpha);
}

// The backward of an edge softmax with its dropout_grad before, its leaky_relu act_grad after
// (s != nullptr) and the sum of the result at destinations (dst_sum != nullptr), per
// (destination, head) one group (edge_softmax_act_bwd of edge_softmax.h); with none of
// them (p = 0, s and dst_sum nullptr) the plain edge softmax backward.  de holds g' meanwhile;
// each lane reads back only its own elements, so de may alias g.
template <int G>
__global__ void edge_softmax_act_grad_kernel(const float *g, float p, DropoutKey key, const int64_t *edge_ids,
                                             const float *alpha, const float *s, float slope, const int64_t *indptr,
                                             int64_t num_nodes, int64_t H, float *de, float *dst_sum,
                                             const int64_t *long_rows, int64_t long_edges) {
    const auto grp = softmax_group<G>(long_rows, H);
    int64_t v, h, first, end;
    const bool owned = group_segment(grp, indptr, num_nodes, H, long_edges, v, h, first, end);
    constexpr int stride = SoftmaxGroup<G>::kSize;   // G, or a block's threads
    const bool drop = p > 0.f;
    const uint64_t base = drop ? DropStream::of(key).at_this_epoch().base : 0, thr = drop ? dropout_detail::drop_threshold(p) : 0;
    const float scale = drop ? 1.0f / (1.0f - p) : 1.0f;
    float dot = 0.f;
    for (int64_t e = first + grp.lane; e < end; e += stride) {
        const int64_t i = e * H + h;
        const uint64_t key_index = uint64_t(edge_ids != nullptr ? edge_ids[e] * H + h : i);
        const float gv = drop ? (dropout_detail::keep(base, key_index, thr) ? g[i] * scale : 0.f) : g[i];
        de[i] = gv;
        dot += alpha[i] * gv;
    }
    dot = grp.sum(dot);
    float sum = 0.f;
    for (int64_t e = first + grp.lane; e < end; e += stride) {
        const int64_t i = e * H + h;
        const float ds = alpha[i] * (de[i] - dot);
        const float d = s == nullptr ? ds : (s[i] > 0.f ? ds : slope * ds);
        de[i] = d;
        sum += d;
    }
    sum = grp.sum(sum);
    if (dst_sum != nullptr && grp.lane == 0 && owned) dst_sum[v * H + h] = sum;
}

}  // namespace cuda
}  // namespace mg
#endif
