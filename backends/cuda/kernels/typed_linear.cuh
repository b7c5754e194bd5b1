// Typed linear on the device (Hector §3-§4's gather/scatter GEMM): Y[r] = X[r] W[type[r]] for
// rows grouped by type (perm, ptr: rows perm[ptr[t] .. ptr[t+1]) have type t), without copying
// rows into per-type blocks.  A block computes one TILE x TILE output tile of one type: the
// gather list (perm) picks its input rows, the scatter list (the same perm) places its output
// rows, and every output row has one writer, so no atomics.  Tiles of a type never mix types:
// the host lists them once at load time (TypeGroups::build).
//
// The weight gradient dW[t] = X_t^T G_t gives every (chunk of a type's rows, K tile, M tile) one
// block that walks the chunk in TILE-row steps through shared memory; the chunks' partial sums are
// added per type afterwards, in chunk order.
#ifndef MORPHGEN_CUDA_TYPED_LINEAR_CUH
#define MORPHGEN_CUDA_TYPED_LINEAR_CUH

#include <cstdint>

#include "../device.cuh"

namespace mg {
namespace cuda {

constexpr int kTypedTile = 16;
// A type's rows are cut into chunks of at least kTypedChunkRows rows for the weight gradient and
// the row sums, about kTypedChunks chunks in all (ops.cuh: TypeGroups::build).
constexpr int64_t kTypedChunkRows = 256;
constexpr int64_t kTypedChunks = 1024;

// B(t, k, c) = W[t * b_type + k * b_k + c * b_c]: W itself (forward) or its transpose (input
// gradient), read in place.
struct TypedB {
    const float *w;
    int64_t b_type, b_k, b_c;
};

// C[perm[i], c] = sum_k A[a(perm[i]), k] B(t, k, c) for the rows i of tile blockIdx.x (type t),
// a(r) = a_rows[r] (a second gather list: the node row a typed edge row reads) or r.  A block
// covers TILE rows by TILE * CN columns, each thread CN of them (columns tx, tx + TILE, ...): the
// A tile in shared memory serves CN times as many columns as one output per thread would let it
// (Hector's coarsening).  Every output sums its k in the same order whatever CN is.
template <int TILE, int CN>
__global__ void __launch_bounds__(TILE *TILE) typed_gemm_kernel(const float *A, int64_t K, TypedB B, float *C,
                                                                 int64_t N, const int64_t *perm, const int64_t *ptr,
                                                                 const int64_t *tile_type, const int64_t *tile_start,
                                                                 const int64_t *a_rows) {
    __shared__ float As[TILE][TILE + 1];
    __shared__ float Bs[TILE][TILE * CN + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t t = tile_type[blockIdx.x], r0 = tile_start[blockIdx.x];
    const int64_t r_end = ptr[t + 1];
    const int64_t c0 = int64_t(blockIdx.y) * TILE * CN;
    const int64_t i = r0 + ty;
    const int64_t row = i < r_end ? perm[i] : -1;
    const int64_t a_row = row >= 0 && a_rows ? a_rows[row] : row;
    float acc[CN];
#pragma unroll
    for (int j = 0; j < CN; ++j) acc[j] = 0.f;
    for (int64_t k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row >= 0 && k0 + tx < K) ? A[a_row * K + k0 + tx] : 0.f;
        const int64_t kb = k0 + ty;
#pragma unroll
        for (int j = 0; j < CN; ++j) {
            const int64_t cb = c0 + tx + j * TILE;
            Bs[ty][tx + j * TILE] = (kb < K && cb < N) ? B.w[t * B.b_type + kb * B.b_k + cb * B.b_c] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) {
            const float a = As[ty][kk];
#pragma unroll
            for (int j = 0; j < CN; ++j) acc[j] += a * Bs[kk][tx + j * TILE];
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < CN; ++j) {
        const int64_t c = c0 + tx + j * TILE;
        if (row >= 0 && c < N) C[row * N + c] = acc[j];
    }
}

// The weight gradient and the per-type row sums split each type's rows into chunks (the host's
// TypeGroups: chunk ch holds the rows chunk_bound[ch] .. chunk_bound[ch+1] of the type order, and
// chunk_ptr[t] .. chunk_ptr[t+1] are the chunks of type t): a block sums one chunk into its own
// partial, and TypedChunkSumOp adds a type's partials in chunk order.  One block per type had
// walked every row of the type alone: HGT's weight gradients on acm_heco (3 node types, 64 x 64)
// ran as 12 blocks on a GPU with 132 SMs.  Deterministic: the same sums in the same order
// whatever the launch.
//
// partial[ch, k, c] = sum over the rows r of chunk ch of X[x(r), k] G[r, c], x(r) = x_rows[r] or
// r.  A block owns (chunk, TILE rows of k, TILE * CN columns), each thread CN columns as above.
template <int TILE, int CN>
__global__ void __launch_bounds__(TILE *TILE) typed_weight_grad_kernel(const float *X, int64_t K, const float *G,
                                                                        int64_t M, const int64_t *perm,
                                                                        const int64_t *chunk_bound, int64_t k_tiles,
                                                                        float *partial, const int64_t *x_rows) {
    __shared__ float Xs[TILE][TILE + 1];
    __shared__ float Gs[TILE][TILE * CN + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t ch = blockIdx.x / k_tiles, k0 = (blockIdx.x % k_tiles) * TILE;
    const int64_t c0 = int64_t(blockIdx.y) * TILE * CN;
    const int64_t end = chunk_bound[ch + 1];
    float acc[CN];
#pragma unroll
    for (int j = 0; j < CN; ++j) acc[j] = 0.f;
    for (int64_t i0 = chunk_bound[ch]; i0 < end; i0 += TILE) {
        const int64_t i = i0 + ty;
        const int64_t row = i < end ? perm[i] : -1;
        const int64_t x_row = row >= 0 && x_rows ? x_rows[row] : row;
        Xs[ty][tx] = (row >= 0 && k0 + tx < K) ? X[x_row * K + k0 + tx] : 0.f;
#pragma unroll
        for (int j = 0; j < CN; ++j) {
            const int64_t c = c0 + tx + j * TILE;
            Gs[ty][tx + j * TILE] = (row >= 0 && c < M) ? G[row * M + c] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int jj = 0; jj < TILE; ++jj) {
            const float x = Xs[jj][ty];
#pragma unroll
            for (int j = 0; j < CN; ++j) acc[j] += x * Gs[jj][tx + j * TILE];
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < CN; ++j) {
        const int64_t c = c0 + tx + j * TILE;
        if (k0 + ty < K && c < M) partial[ch * K * M + (k0 + ty) * M + c] = acc[j];
    }
}

// out[t, j] = sum over the chunks of type t of partial[ch, j], in chunk order; 0 for a type
// without rows.  `width` values per chunk (K * M for a weight gradient, K for a row sum).
struct TypedChunkSumOp {
    const float *partial;
    const int64_t *chunk_ptr;
    int64_t width;
    float *out;
    __device__ void operator()(int64_t i) const {
        const int64_t t = i / width, j = i % width;
        float acc = 0.f;
        for (int64_t ch = chunk_ptr[t]; ch < chunk_ptr[t + 1]; ++ch) acc += partial[ch * width + j];
        out[i] = acc;
    }
};

// A typed linear of node rows read at edge ends (runtime/edge_rows.h): products are made per
// row of the layout (a distinct (node, type) pair, or an edge) by typed_gemm_kernel with the
// row's node as its gather list, then copied to the row's edges; the edges' gradients are summed
// into rows first (ops.cuh: segment_sum).  One thread per (edge, column), one writer per output
// element, no atomics: one thread per (row, column) had left a hub's edges to a loop.
struct EdgeRowsExpandOp {      // Y[edges[j], c] = P[row_of[j], c]
    const float *product;
    const int64_t *row_of, *edges;
    int64_t M;
    float *y;
    __device__ void operator()(int64_t k) const {
        const int64_t j = k / M, c = k % M;
        y[edges[j] * M + c] = product[row_of[j] * M + c];
    }
};

// out[t, k] = sum of G[perm[i], k] over i in [ptr[t], ptr[t+1]); 0 for an empty segment: the
// chunks' partial sums of a typed parameter's rows (segments = chunks of at most a few hundred
// rows, then TypedChunkSumOp).
struct TypedRowSumOp {
    const float *g;
    const int64_t *perm, *ptr;
    int64_t K;
    float *out;
    __device__ void operator()(int64_t j) const {
        const int64_t t = j / K, k = j % K;
        float acc = 0.f;
        for (int64_t i = ptr[t]; i < ptr[t + 1]; ++i) acc += g[perm[i] * K + k];
        out[j] = acc;
    }
};

// Y[r] = table[type[r] * rows_per_type + idx[r]] (featureless input: rows of the identity times W).
struct EmbeddingRowsOp {
    const float *table;
    const int64_t *type, *idx;
    int64_t rows_per_type, M;
    float *y;
    __device__ void operator()(int64_t k) const {
        const int64_t r = k / M, j = k % M;
        const int64_t key = (type ? type[r] : 0) * rows_per_type + (idx ? idx[r] : 0);
        y[k] = table[key * M + j];
    }
};

// Featureless lookups of W_t = sum_b A[t, b] V[b] read from the bases (passes/basis_lookup.py),
// with the lookups grouped by (row, type) in row order (ops.cuh: BasisLookupPlan): V [B, P, M],
// A [T, B], segment u is one distinct pair, keys[u] = row * T + type.  Every op here is parallel
// over lookups or over segments, never a loop over a segment's lookups: the gradients read the
// segments' sums of G (S [segments, M], ops.cuh: segment_sum), so a hub's thousands of lookups of
// one (row, type) pair are not one thread's loop.
struct BasisLookupOp {      // Y[order[i], j] = sum_b A[t, b] V[b][s][j], (s, t) the pair of lookup i's segment
    const float *a, *v;
    const int64_t *order, *segment_of, *keys;
    int64_t T, B, P, M;
    float *y;
    __device__ void operator()(int64_t k) const {
        const int64_t i = k / M, j = k % M, u = segment_of[i], s = keys[u] / T, t = keys[u] % T;
        float acc = 0.f;
        for (int64_t b = 0; b < B; ++b) acc += a[t * B + b] * v[(b * P + s) * M + j];
        y[order[i] * M + j] = acc;
    }
};
struct BasisCoefGradOp {    // dA[t, b] += <V[b][s], S[u]>: one (segment, basis) per thread
    const float *v, *sums;
    const int64_t *keys;
    int64_t T, B, P, M;
    float *da;
    __device__ void operator()(int64_t k) const {
        const int64_t u = k / B, b = k % B, s = keys[u] / T, t = keys[u] % T;
        const float *vr = v + (b * P + s) * M, *su = sums + u * M;
        float dot = 0.f;
        for (int64_t j = 0; j < M; ++j) dot += vr[j] * su[j];
        atomicAdd(da + t * B + b, dot);
    }
};
struct BasisBasesGradOp {   // dV[b][s][j] = sum over row s's segments u of A[t_u, b] S[u, j]: one writer, no atomics
    const float *a, *sums;
    const int64_t *keys, *row_start;
    int64_t T, B, P, M;
    float *dv;
    __device__ void operator()(int64_t k) const {
        const int64_t r = k / M, j = k % M;
        for (int64_t u = row_start[r]; u < row_start[r + 1]; ++u) {
            const int64_t s = keys[u] / T, t = keys[u] % T;
            const float gs = sums[u * M + j];
            for (int64_t b = 0; b < B; ++b) dv[(b * P + s) * M + j] += a[t * B + b] * gs;
        }
    }
};

// The weights' own algebra (passes fold a . x into (W a) . x): T matrices [K, M], tiny.
struct MatvecOp {          // out[t, k] = sum_j W[t, k, j] a[t, j]
    const float *w, *a;
    int64_t K, M;
    float *out;
    __device__ void operator()(int64_t i) const {
        const int64_t t = i / K;
        float acc = 0.f;
        for (int64_t j = 0; j < M; ++j) acc += w[i * M + j] * a[t * M + j];
        out[i] = acc;
    }
};
struct MatvecTOp {         // out[t, j] = sum_k W[t, k, j] g[t, k]
    const float *w, *g;
    int64_t K, M;
    float *out;
    __device__ void operator()(int64_t i) const {
        const int64_t t = i / M, j = i % M;
        float acc = 0.f;
        for (int64_t k = 0; k < K; ++k) acc += w[(t * K + k) * M + j] * g[t * K + k];
        out[i] = acc;
    }
};
struct OuterOp {           // out[t, k, j] = g[t, k] a[t, j]
    const float *g, *a;
    int64_t K, M;
    float *out;
    __device__ void operator()(int64_t i) const {
        const int64_t j = i % M, tk = i / M, t = tk / K;
        out[i] = g[tk] * a[t * M + j];
    }
};

}  // namespace cuda
}  // namespace mg
#endif
