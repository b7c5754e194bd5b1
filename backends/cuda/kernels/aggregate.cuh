// Aggregation over the CSR (Morphling §IV-D's block-per-row SpMM): a group of T threads per
// destination row, the threads striding the feature dimension, the row's sum accumulated in
// registers and written once, no atomics; normalisation (edge weights, GCN scale, mean),
// the self loop, bias and activation are fused into that one write.
//
// The backward of sum/mean runs the same kernel over the by-source CSR (t_indptr, t_col,
// t_eid): each source row gathers from its out-neighbours, again without atomics.  Max keeps
// its argmax (the neighbour's node id, the node itself for the self term, -1 for none) and its
// backward walks the by-source CSR too.  Semantics match backends/openmp/kernels/spmm.h.
// With a weight per edge and head (AggArgs::head_weight) the same kernel is GAT's
// attention-weighted sum of messages, forward and transposed.
#ifndef MORPHGEN_CUDA_AGGREGATE_CUH
#define MORPHGEN_CUDA_AGGREGATE_CUH

#include <cstdint>

#include "../device.cuh"
#include "elementwise.cuh"
#include "op_types.h"

namespace mg {
namespace cuda {

// Rows longer than `edges` edges are cut into segments of `edges` edges, each walked by its own
// group of threads: a row of a hub (25,088 in-edges in the 14M-edge reddit-1/8 graph, 8,782 in
// products-1/8) walked by one warp finished long after the rest of the grid, so that one row set
// the time of the whole aggregation.  Every segment writes its partial sums into its row of
// `partial`; the last segment of a row to finish (counted in `arrivals`, which it resets for
// the next launch) adds the partials in segment order, so the result does not depend on which
// segment ran first, and applies the row's epilogue.  edges == 0: no row is split.
struct RowSplit {
    const int64_t *seg_row = nullptr;     // the row of each segment (segments of a row are consecutive)
    const int64_t *seg_first = nullptr;   // the first segment of that row
    float *partial = nullptr;             // [segments x F] partial sums (a max: each segment's maximum)
    int64_t *partial_arg = nullptr;       // [segments x F] a max's argmax per segment (-1: no candidate)
    unsigned *arrivals = nullptr;         // [segments x kMaxWarpsPerRow]: finished segments, per warp of a group
    int64_t segments = 0, edges = 0;
};
constexpr int kMaxWarpsPerRow = 8;        // 256 threads per row at most (threads_per_row)

// The row a group walks: groups [0, s.segments) take one segment (piece) of a split row each
// (seg >= 0), the groups after them one whole row each (seg = -1).
__device__ inline int64_t split_row(const RowSplit &s, int64_t group, int64_t &seg) {
    seg = group < s.segments ? group : -1;
    return seg >= 0 ? s.seg_row[seg] : group - s.segments;
}
// Narrows the row's range [first, end) to the segment's; false for a whole row that is split,
// whose segments' groups walk it instead.
__device__ inline bool split_range(const RowSplit &s, int64_t seg, int64_t &first, int64_t &end) {
    if (seg < 0) return !(s.edges && end - first > s.edges);
    first += (seg - s.seg_first[seg]) * s.edges;
    end = end - first < s.edges ? end : first + s.edges;
    return true;
}

// out[row, f] = the sum of a split row's pieces' partial sums, in piece order (a row's pieces are
// consecutive and name their first); one thread per (first piece of a row, f), the other pieces'
// threads do nothing.
struct SplitRowSumOp {
    RowSplit split;
    int64_t F;
    float *out;
    __device__ void operator()(int64_t k) const {
        const int64_t s = k / F, f = k % F;
        if (split.seg_first[s] != s) return;
        float acc = 0.f;
        for (int64_t i = s; i < split.segments && split.seg_first[i] == s; ++i) acc += split.partial[i * F + f];
        out[split.seg_row[s] * F + f] = acc;
    }
};

// Coefficients of one aggregation: c(u -> v) = w[e] * s[u], row factor s[v] (/ count for mean).
struct AggArgs {
    // the CSR walked (col: the row of X each position reads, nullptr = the position itself, as in
    // a segmented sum of edge rows; eid: edge-weight index, nullptr = position)
    const int64_t *indptr, *col, *eid;
    const int64_t *fwd_indptr;           // by-destination row pointers (degrees for mean / backward)
    const float *edge_weight, *node_scale;
    bool mean, self_loop, transpose;
    int64_t rows, F;
    RowSplit split;
    // Per-head edge weights instead of one coefficient per edge (GAT's attention-weighted sum):
    // feature f of the edge at CSR position k is weighted by head_weight[eid(k) * heads + f / head_dim].
    const float *head_weight = nullptr;
    int64_t heads = 1, head_dim = 1;
    // The row of Y each walked row writes (a segmented sum into chosen rows), nullptr = its own.
    const int64_t *out_row = nullptr;
};

// Threads per row: the smallest power of two >= F between 8 and 256 threads (whole feature rows
// in one pass up to 256 features; wider rows loop).  Rows per block fill 256 threads.
inline int threads_per_row(int64_t F) {
    int t = 8;
    while (t < F && t < 256) t *= 2;
    return t;
}

// c(u -> v) of the CSR entry e whose neighbour is u (the transposed mean divides by u's count).
__device__ inline float edge_coefficient(const AggArgs &a, int64_t e, int64_t u) {
    float c = a.edge_weight ? a.edge_weight[a.eid ? a.eid[e] : e] : 1.f;
    if (a.node_scale) c *= a.node_scale[u];
    if (a.transpose && a.mean) c /= float(a.fwd_indptr[u + 1] - a.fwd_indptr[u] + (a.self_loop ? 1 : 0));
    return c;
}

// A row's edges are walked a chunk of up to 32 at a time: each lane of a warp's share of the row
// first loads one edge's neighbour and coefficient into shared memory (coalesced, independent
// loads), then every lane reads the chunk back and gathers the neighbours' feature rows.  The
// gathers of consecutive edges no longer wait on each other's index loads, so several are in
// flight per thread: walking edge by edge put two dependent memory latencies on every edge (6.7
// ms per 32-wide aggregation of a 14M-edge graph on an H100, against 0.2 ms of memory traffic).
// Lanes of a group narrower than a warp share their own slots; a group wider than a warp loads
// the chunk once per warp.  Only __syncwarp orders the slots: rows of one block end at
// different chunks.
// Groups [0, split.segments) take one segment of a split row each, the groups after them one
// whole row each (a split row's own group does nothing).
// HEADS: each edge's weight per head (AggArgs::head_weight): the chunk holds the edges' weight
// rows, and each lane reads its own head's weight.
template <int K, bool HEADS>   // K: features per thread in registers
__global__ void __launch_bounds__(256, K == 1 ? 4 : 2) aggregate_kernel(AggArgs a, const float *X, float *Y, Epilogue epi,
                                                          int tpr) {
    __shared__ int64_t chunk_u[kThreads];
    __shared__ float chunk_c[kThreads];
    __shared__ int64_t chunk_w[HEADS ? kThreads : 1];
    const RowSplit &sp = a.split;
    const int64_t group = int64_t(blockIdx.x) * (blockDim.x / tpr) + threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    int64_t seg;
    const int64_t row = split_row(sp, group, seg);
    if (row >= a.rows) return;   // a whole group at once: tpr divides the block
    int64_t start = a.indptr[row], end = a.indptr[row + 1];
    const int64_t row_edges = end - start;
    if (!split_range(sp, seg, start, end)) return;   // walked by its segments' groups
    const int width = tpr < 32 ? tpr : 32;                 // the lanes sharing one chunk
    const int first = int(threadIdx.x) - int(threadIdx.x) % width;
    const unsigned mask = width == 32 ? 0xffffffffu : ((1u << width) - 1u) << (first % 32);
    const float s_row = a.node_scale ? a.node_scale[row] : 1.f;
    for (int64_t f0 = 0; f0 < a.F; f0 += int64_t(tpr) * K) {
        float acc[K];
        int64_t head[K];   // the head of each of this thread's features (HEADS)
#pragma unroll
        for (int k = 0; k < K; ++k) {
            acc[k] = 0.f;
            head[k] = HEADS && a.head_dim > 0 ? (f0 + lane + int64_t(k) * tpr) / a.head_dim : 0;
        }
        // This lane's neighbour index is loaded one chunk ahead, so that the index stream's
        // memory latency passes while the previous chunk's rows are gathered; its coefficient
        // (node_scale[u] depends on u) is computed when the chunk is stored.
        const int slot = int(threadIdx.x) - first;
        int64_t u_ahead = start + slot < end ? (a.col ? a.col[start + slot] : start + slot) : 0;
        for (int64_t e0 = start; e0 < end; e0 += width) {
            const int n = int(end - e0 < width ? end - e0 : width);
            if (slot < n) {
                chunk_u[threadIdx.x] = u_ahead;
                if (HEADS) chunk_w[threadIdx.x] = (a.eid ? a.eid[e0 + slot] : e0 + slot) * a.heads;
                else chunk_c[threadIdx.x] = edge_coefficient(a, e0 + slot, u_ahead);
            }
            if (e0 + width + slot < end) u_ahead = a.col ? a.col[e0 + width + slot] : e0 + width + slot;
            __syncwarp(mask);
#pragma unroll (K == 1 ? 8 : 4)   // rows in flight per thread: 8, or 4 of four features each
            for (int j = 0; j < n; ++j) {
                const float c = HEADS ? 0.f : chunk_c[first + j];
                const float *wr = HEADS ? a.head_weight + chunk_w[first + j] : nullptr;
                const float *xr = X + chunk_u[first + j] * a.F;
#pragma unroll
                for (int k = 0; k < K; ++k) {
                    const int64_t f = f0 + lane + int64_t(k) * tpr;
                    if (f < a.F) acc[k] += (HEADS ? __ldg(wr + head[k]) : c) * __ldg(xr + f);
                }
            }
            __syncwarp(mask);      // the chunk is read before the next one overwrites it
        }
        // A segment (the launch splits rows only when one pass covers F): its partial sums out;
        // the warp (part) that finishes its row's segments last goes on with the row's sums.
        if (seg >= 0) {
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const int64_t f = lane + int64_t(k) * tpr;
                if (f < a.F) sp.partial[seg * a.F + f] = acc[k];
            }
            __threadfence();        // the partials are visible before the count says they are there
            __syncwarp(mask);
            const int leader = first % 32;
            const int64_t first_seg = sp.seg_first[seg];
            unsigned *count = sp.arrivals + first_seg * kMaxWarpsPerRow + lane / 32;
            unsigned done = 0;
            if (int(threadIdx.x % 32) == leader) done = atomicAdd(count, 1u) + 1u;
            done = __shfl_sync(mask, done, leader, 32);
            const int64_t segments = (row_edges + sp.edges - 1) / sp.edges;
            if (int64_t(done) < segments) return;
            __threadfence();
            if (int(threadIdx.x % 32) == leader) *count = 0u;   // ready for the next launch
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const int64_t f = lane + int64_t(k) * tpr;
                acc[k] = 0.f;
                if (f < a.F)
                    for (int64_t s = first_seg; s < first_seg + segments; ++s)
                        acc[k] += __ldcg(sp.partial + s * a.F + f);
            }
        }
        // Y = (sum + self_c * X[row]) * row_f: forward, row_f carries the mean's 1/count; the
        // transpose divides each neighbour's term by that neighbour's count, and the self term by
        // the row's own.
        float self_c = s_row, row_f = s_row;
        if (a.mean) {
            const int64_t cnt = a.fwd_indptr[row + 1] - a.fwd_indptr[row] + (a.self_loop ? 1 : 0);
            if (!a.transpose) row_f = cnt > 0 ? s_row / float(cnt) : s_row;
            else if (a.self_loop) self_c = s_row / float(cnt);
        }
        const int64_t out = a.out_row ? a.out_row[row] : row;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int64_t f = f0 + lane + int64_t(k) * tpr;
            if (f >= a.F) continue;
            float v = (acc[k] + (a.self_loop ? self_c * X[row * a.F + f] : 0.f)) * row_f;
            if (epi.bias) v += epi.bias[f];
            Y[out * a.F + f] = activate(epi.act, v, epi.alpha);
        }
    }
}

// A max aggregation's output element: the best candidate times the row scale (0 without one),
// then the epilogue; argmax keeps the candidate's node id (-1: none).
__device__ inline void store_max(const AggArgs &a, const Epilogue &epi, int64_t row, int64_t f, float best,
                                 int64_t arg, float s_row, float *Y, int64_t *argmax) {
    float v = arg < 0 ? 0.f : best * s_row;
    if (epi.bias) v += epi.bias[f];
    Y[row * a.F + f] = activate(epi.act, v, epi.alpha);
    if (argmax) argmax[row * a.F + f] = arg;
}

// Max: best c * X[u, f] over the candidates (self term first, then CSR order; the first maximum
// wins), times the row scale; no candidate gives 0 and argmax -1.  A split row (a.split) is
// walked in segments: each writes the first maximum of its own edges and that neighbour into the
// split's partial rows (no self term), and SplitRowMaxOp then takes the self term and the
// segments in order, keeping a later one only when strictly greater: the candidate the walk of
// the whole row picks.  Without that a hub's thousands of in-edges were one group's loop.
__global__ void __launch_bounds__(256) aggregate_max_kernel(AggArgs a, const float *X, float *Y, int64_t *argmax,
                                                              Epilogue epi, int tpr) {
    const RowSplit &sp = a.split;
    const int64_t group = int64_t(blockIdx.x) * (blockDim.x / tpr) + threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    int64_t seg;
    const int64_t row = split_row(sp, group, seg);
    if (row >= a.rows) return;
    int64_t start = a.indptr[row], end = a.indptr[row + 1];
    if (!split_range(sp, seg, start, end)) return;   // walked by its segments' groups
    const float s_row = a.node_scale ? a.node_scale[row] : 1.f;
    for (int64_t f = lane; f < a.F; f += tpr) {
        float best = -INFINITY;
        int64_t arg = -1;
        if (a.self_loop && seg < 0) {
            best = s_row * X[row * a.F + f];
            arg = row;
        }
#pragma unroll 4
        for (int64_t e = start; e < end; ++e) {
            const int64_t u = a.col[e];
            float c = a.edge_weight ? a.edge_weight[e] : 1.f;
            if (a.node_scale) c *= a.node_scale[u];
            const float v = c * X[u * a.F + f];
            if (v > best) {
                best = v;
                arg = u;
            }
        }
        if (seg >= 0) {
            sp.partial[seg * a.F + f] = best;
            sp.partial_arg[seg * a.F + f] = arg;
        } else {
            store_max(a, epi, row, f, best, arg, s_row, Y, argmax);
        }
    }
}

// The split rows of a max aggregation, one (row, feature) per first segment of a row: the self
// term, then each segment's maximum in segment order (see aggregate_max_kernel).
struct SplitRowMaxOp {
    AggArgs a;
    const float *X;
    float *Y;
    int64_t *argmax;
    Epilogue epi;
    __device__ void operator()(int64_t k) const {
        const RowSplit &sp = a.split;
        const int64_t s = k / a.F, f = k % a.F;
        if (sp.seg_first[s] != s) return;
        const int64_t row = sp.seg_row[s];
        const float s_row = a.node_scale ? a.node_scale[row] : 1.f;
        float best = -INFINITY;
        int64_t arg = -1;
        if (a.self_loop) {
            best = s_row * X[row * a.F + f];
            arg = row;
        }
        for (int64_t i = s; i < sp.segments && sp.seg_first[i] == s; ++i) {
            const int64_t u = sp.partial_arg[i * a.F + f];
            if (u >= 0 && sp.partial[i * a.F + f] > best) {
                best = sp.partial[i * a.F + f];
                arg = u;
            }
        }
        store_max(a, epi, row, f, best, arg, s_row, Y, argmax);
    }
};

// dX[u, f] = sum over out-edges (u -> v) with argmax[v, f] == u of c * G[v, f] (+ the self term);
// parallel edges u -> v share one argmax entry and pass the gradient once.  A split row (a.split:
// a source with many out-edges) is walked in segments whose sums go to the split's partial rows,
// the self term with the last segment's, for SplitRowSumOp to add in segment order.
__global__ void __launch_bounds__(256) aggregate_max_grad_kernel(AggArgs a, const int64_t *argmax, const float *G,
                                                                   float *dX, int tpr) {
    const RowSplit &sp = a.split;
    const int64_t group = int64_t(blockIdx.x) * (blockDim.x / tpr) + threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    int64_t seg;
    const int64_t u = split_row(sp, group, seg);
    if (u >= a.rows) return;
    const int64_t row_start = a.indptr[u], row_end = a.indptr[u + 1];
    int64_t start = row_start, end = row_end;
    if (!split_range(sp, seg, start, end)) return;
    const float su = a.node_scale ? a.node_scale[u] : 1.f;
    float *out = seg >= 0 ? sp.partial + seg * a.F : dX + u * a.F;
    for (int64_t f = lane; f < a.F; f += tpr) {
        float acc = 0.f;
#pragma unroll 4
        for (int64_t k = start; k < end; ++k) {
            const int64_t v = a.col[k];
            if (k > row_start && a.col[k - 1] == v) continue;   // parallel edge: counted once, across segments too
            if (a.self_loop && v == u) continue;                // folded into the self term
            float c = a.edge_weight ? a.edge_weight[a.eid[k]] : 1.f;
            if (a.node_scale) c *= su * a.node_scale[v];
            if (argmax[v * a.F + f] == u) acc += c * G[v * a.F + f];
        }
        if (end == row_end && a.self_loop && argmax[u * a.F + f] == u) acc += su * su * G[u * a.F + f];
        out[f] = acc;
    }
}

// The implicit transpose (Morphling §IV-D): the backward of a sum or mean aggregation walked over
// the forward CSR, a group per destination v adding c(u -> v) * rowf(v) * G[v] into dX[u] for
// each in-edge by atomics (and the self term into dX[v]); dX zeroed first.  The by-source walk
// of aggregate_kernel needs no atomics and gives the same sums every run; this one needs no
// by-source CSR and reads G row by row.  Which is faster depends on the GPU and the graph
// ($MORPHGEN_CUDA_TRANSPOSE, ops.cuh).  No head weights: GAT's transposed sums stay by source.
__global__ void __launch_bounds__(256) aggregate_transpose_atomic_kernel(AggArgs a, const float *G, float *dX,
                                                                           int tpr) {
    const int64_t v = int64_t(blockIdx.x) * (blockDim.x / tpr) + threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    if (v >= a.rows) return;
    const int64_t start = a.indptr[v], end = a.indptr[v + 1];
    const float s_v = a.node_scale ? a.node_scale[v] : 1.f;
    float row_f = s_v;
    if (a.mean) {
        const int64_t cnt = end - start + (a.self_loop ? 1 : 0);
        row_f = cnt > 0 ? s_v / float(cnt) : s_v;
    }
    for (int64_t f = lane; f < a.F; f += tpr) {
        const float g = G[v * a.F + f] * row_f;
        if (a.self_loop) atomicAdd(dX + v * a.F + f, s_v * g);
        for (int64_t e = start; e < end; ++e) {
            const int64_t u = a.col[e];
            // edge_coefficient of the forward CSR, without its transposed mean's division (never
            // taken here), whose branch made ptxas spill 16 bytes in this loop
            float c = a.edge_weight ? a.edge_weight[e] : 1.f;
            if (a.node_scale) c *= a.node_scale[u];
            atomicAdd(dX + u * a.F + f, c * g);
        }
    }
}

inline void launch_aggregate(const char *name, AggArgs a, const float *X, float *Y, const Epilogue &epi) {
    const int tpr = threads_per_row(a.F);
    const int K = a.F <= tpr ? 1 : 4;
    if (a.F > int64_t(tpr) * K) a.split = RowSplit{};   // several passes over F: rows stay whole
    const dim3 grid(blocks_for(a.split.segments + a.rows, kThreads / tpr));
    auto run = [&](auto kernel) { launch(name, kernel, grid, dim3(kThreads), a, X, Y, epi, tpr); };
    if (a.head_weight) K == 1 ? run(aggregate_kernel<1, true>) : run(aggregate_kernel<4, true>);
    else K == 1 ? run(aggregate_kernel<1, false>) : run(aggregate_kernel<4, false>);
}

}  // namespace cuda
}  // namespace mg
#endif
