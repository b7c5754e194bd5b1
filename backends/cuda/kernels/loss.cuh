// Softmax cross-entropy and accuracy on the device.  The loss is a mean over the masked rows;
// per-block partial sums (double) are added in block order by one final block, so the loss is
// the same bits every run.  Semantics match backends/openmp/kernels/loss.h.
#ifndef MORPHGEN_CUDA_LOSS_CUH
#define MORPHGEN_CUDA_LOSS_CUH

#include <cstdint>

#include "../device.cuh"
#include "elementwise.cuh"

namespace mg {
namespace cuda {

constexpr int kReduceBlocks = 256;   // partials of the two-pass reductions

// partial[blockIdx.x] = the sum of every warp's lane-0 `mine`, added in warp order (the same bits
// every run); every thread of the block must call it.
__device__ __forceinline__ void store_block_sum(double mine, double *partial) {
    __shared__ double block_sum[kWarpsPerBlock];
    if (threadIdx.x % 32 == 0) block_sum[threadIdx.x / 32] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int w = 0; w < kWarpsPerBlock; ++w) total += block_sum[w];
        partial[blockIdx.x] = total;
    }
}

// One warp per row: lse - z[y] into the row's partial; with dlogits, (softmax - onehot) * inv_n
// (zero on rows outside the mask).  partial[block] = sum of the block's rows (double).
__global__ void cross_entropy_kernel(const float *logits, const int64_t *labels, const uint8_t *mask,
                                     int64_t rows, int64_t C, float inv_n, float *dlogits, double *partial) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    double mine = 0.0;
    for (int64_t i = int64_t(blockIdx.x) * kWarpsPerBlock + warp; i < rows; i += int64_t(gridDim.x) * kWarpsPerBlock) {
        const float *z = logits + i * C;
        float *d = dlogits ? dlogits + i * C : nullptr;
        if (mask && !mask[i]) {
            if (d)
                for (int64_t c = lane; c < C; c += 32) d[c] = 0.f;
            continue;
        }
        float zmax = -INFINITY;
        for (int64_t c = lane; c < C; c += 32) zmax = fmaxf(zmax, z[c]);
        for (int off = 16; off > 0; off >>= 1) zmax = fmaxf(zmax, __shfl_xor_sync(0xffffffffu, zmax, off));
        float sum = 0.f;
        for (int64_t c = lane; c < C; c += 32) sum += expf(z[c] - zmax);
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        const int64_t y = labels[i];
        if (lane == 0) mine += double(zmax + logf(sum) - z[y]);
        if (d) {
            const float scale = inv_n / sum;
            for (int64_t c = lane; c < C; c += 32) d[c] = expf(z[c] - zmax) * scale - (c == y ? inv_n : 0.f);
        }
    }
    store_block_sum(mine, partial);
}

// out[0] = float(sum of partial[0..n) * scale), in order.
__global__ void __launch_bounds__(32) finish_sum_kernel(const double *partial, int n, double scale, float *out) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    double total = 0.0;
    for (int i = 0; i < n; ++i) total += partial[i];
    out[0] = float(total * scale);
}

// partial_count[block] = number of masked rows whose argmax (first on ties) equals the label.
__global__ void count_correct_kernel(const float *logits, const int64_t *labels, const uint8_t *mask,
                                     int64_t rows, int64_t C, unsigned long long *count) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows || (mask && !mask[i])) return;
    const float *z = logits + i * C;
    int64_t best = 0;
    for (int64_t c = 1; c < C; ++c)
        if (z[c] > z[best]) best = c;
    if (best == labels[i]) atomicAdd(count, 1ull);
}

}  // namespace cuda
}  // namespace mg
#endif
