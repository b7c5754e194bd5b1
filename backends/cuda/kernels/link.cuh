// Link prediction on the device: DistMult scores of the epoch's triples and their binary cross
// entropy, plus the L2 term (semantics of backends/openmp/kernels/link.h).
//
//   s_i = sum_k z[h_i,k] R[r_i,k] z[t_i,k]
//   loss = mean_i (max(s_i, 0) - y_i s_i + log(1 + exp(-|s_i|))) + reg (mean z^2 + mean R^2)
//
// One warp per triple, its lanes striding the embedding. The loss's sums go through per-block
// partials in double added in block order, so the loss is the same bits every run; the gradients
// scatter with atomics into the rows of the heads, tails and relations (a node is in many triples),
// so their last bits depend on the order the warps ran in.
#ifndef MORPHGEN_CUDA_LINK_CUH
#define MORPHGEN_CUDA_LINK_CUH

#include <cstdint>

#include "../device.cuh"
#include "elementwise.cuh"
#include "loss.cuh"

namespace mg {
namespace cuda {

// The triple's score, summed in double over the warp's lanes (every lane gets it).
__device__ __forceinline__ double distmult_score(const float *z, const float *R, const int64_t *t, int64_t H, int lane) {
    const float *zh = z + t[0] * H, *rr = R + t[1] * H, *zt = z + t[2] * H;
    double s = 0.0;
    for (int64_t k = lane; k < H; k += 32) s += double(zh[k]) * double(rr[k]) * double(zt[k]);
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    return s;
}

// partial[block] = sum over the block's triples of max(s, 0) - y s + log(1 + e^-|s|).
__global__ void distmult_bce_kernel(const float *z, const float *R, int64_t H, const int64_t *triples, int64_t count,
                                    double *partial) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    double mine = 0.0;
    for (int64_t i = int64_t(blockIdx.x) * kWarpsPerBlock + warp; i < count;
         i += int64_t(gridDim.x) * kWarpsPerBlock) {
        const int64_t *t = triples + 4 * i;
        const double s = distmult_score(z, R, t, H, lane);
        if (lane == 0) mine += fmax(s, 0.0) - double(t[3]) * s + log1p(exp(-fabs(s)));
    }
    store_block_sum(mine, partial);
}

// partial[block] = sum of x^2 over the block's grid-stride elements (thread sums added in order).
__global__ void __launch_bounds__(kThreads) square_sum_kernel(const float *x, int64_t n, double *partial) {
    __shared__ double thread_sum[kThreads];
    double mine = 0.0;
    for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads)
        mine += double(x[i]) * double(x[i]);
    thread_sum[threadIdx.x] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int j = 0; j < kThreads; ++j) total += thread_sum[j];
        partial[blockIdx.x] = total;
    }
}

// out[0] = bce / count + reg (zz / nz + rr / nr), each sum over its partials in block order;
// the L2 term only when reg > 0, a mean over nothing is 0.
__global__ void __launch_bounds__(32) link_loss_finish_kernel(const double *bce, int bce_blocks, const double *zz,
                                                              const double *rr, int square_blocks, int64_t count,
                                                              int64_t nz, int64_t nr, float reg, float *out) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    double b = 0.0, z2 = 0.0, r2 = 0.0;
    for (int i = 0; i < bce_blocks; ++i) b += bce[i];
    double loss = count ? b / double(count) : 0.0;
    if (reg > 0.f) {
        for (int i = 0; i < square_blocks; ++i) {
            z2 += zz[i];
            r2 += rr[i];
        }
        loss += double(reg) * ((nz ? z2 / double(nz) : 0.0) + (nr ? r2 / double(nr) : 0.0));
    }
    out[0] = float(loss);
}

// g[i] = 2 reg x[i] / n: the gradient of reg * mean(x^2).
__global__ void l2_grad_kernel(const float *x, int64_t n, double c, float *g) {
    for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads)
        g[i] = float(c * double(x[i]));
}

// Adds each triple's score gradient d = (sigmoid(s) - y) / count into its head's and tail's rows of
// dz (d R_r z_t and d R_r z_h) and its relation's row of dR (d z_h z_t); either may be null.
__global__ void distmult_grad_kernel(const float *z, const float *R, int64_t H, const int64_t *triples, int64_t count,
                                     float *dz, float *dR) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int64_t i = int64_t(blockIdx.x) * kWarpsPerBlock + warp; i < count;
         i += int64_t(gridDim.x) * kWarpsPerBlock) {
        const int64_t *t = triples + 4 * i;
        const double s = distmult_score(z, R, t, H, lane);
        const float d = float((1.0 / (1.0 + exp(-s)) - double(t[3])) / double(count));
        const float *zh = z + t[0] * H, *rr = R + t[1] * H, *zt = z + t[2] * H;
        for (int64_t k = lane; k < H; k += 32) {
            if (dz) {
                atomicAdd(dz + t[0] * H + k, d * rr[k] * zt[k]);
                atomicAdd(dz + t[2] * H + k, d * rr[k] * zh[k]);
            }
            if (dR) atomicAdd(dR + t[1] * H + k, d * zh[k] * zt[k]);
        }
    }
}

}  // namespace cuda
}  // namespace mg
#endif
