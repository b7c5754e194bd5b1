// Block-wide shared-memory reductions, and the same with a planted race (one __syncthreads
// removed), for the emulation's normal and shuffled schedules.
//
//   reduce KERNEL BLOCK IN OUT [SEEDS]
//     KERNEL: tree | neighbor | cross_warp, each also as KERNEL_racy;  BLOCK: BX, BXxBY or BXxBYxBZ;
//     IN: float32 array;  OUT: float32 results, once per seed of SEEDS ("1,2,3": each run with
//     simt::set_shuffle(seed)) or once with the schedule of MORPHGEN_SIMT_SHUFFLE.
#include <cstring>

#include "simt_case.h"

// Sum of each block's slice of x (blocks of any size up to 1024, threads numbered linearly).
template <bool kRacy>
__global__ void tree_sum(const float *x, float *out, int n) {
    __shared__ float partial[1024];
    const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned i = blockIdx.x * threads + t;
    partial[t] = i < unsigned(n) ? x[i] : 0.0f;
    if (!kRacy) __syncthreads();  // planted race: without it, a partner's slot may not be written yet
    unsigned half = 1;
    while (half < threads) half <<= 1;
    for (half >>= 1; half > 0; half >>= 1) {
        if (t < half && t + half < threads) partial[t] += partial[t + half];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = partial[0];
}

// out[i] = x[i] - x[i - 1] within each block (the first of a block keeps x[i]), through shared
// memory.  The racy version is right whenever threads run in index order, as they do in the
// emulation's normal schedule: only shuffling exposes it.
template <bool kRacy>
__global__ void neighbor_diff(const float *x, float *out, int n) {
    __shared__ float tile[1024];
    const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned i = blockIdx.x * threads + t;
    tile[t] = i < unsigned(n) ? x[i] : 0.0f;
    if (!kRacy) __syncthreads();
    if (i < unsigned(n)) out[i] = tile[t] - (t > 0 ? tile[t - 1] : 0.0f);
}

// out[i] = the value of the thread 32 places earlier in the block (the first warp keeps its own):
// data crosses warps, so __syncwarp is the wrong barrier -- right in index order, a race
// otherwise.
template <bool kRacy>
__global__ void cross_warp(const float *x, float *out, int n) {
    __shared__ float tile[1024];
    const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned i = blockIdx.x * threads + t;
    tile[t] = i < unsigned(n) ? x[i] : 0.0f;
    if (kRacy) __syncwarp();
    else __syncthreads();
    if (i < unsigned(n)) out[i] = t >= 32 ? tile[t - 32] : tile[t];
}

int main(int argc, char **argv) {
    if (argc < 5) simt_case::fail("usage: reduce KERNEL BLOCK IN OUT [SEEDS]");
    const std::string kernel = argv[1];
    const dim3 block = simt_case::parse_dim(argv[2]);
    const std::vector<float> x = simt_case::read_array<float>(argv[3]);
    const int n = int(x.size());
    const unsigned threads = block.x * block.y * block.z;
    const unsigned blocks = (unsigned(n) + threads - 1) / threads;
    const bool per_block = kernel.rfind("tree", 0) == 0;
    const size_t out_size = per_block ? blocks : size_t(n);

    std::vector<long long> seeds;
    if (argc > 5)
        for (const char *p = argv[5]; *p != '\0';) {
            char *end = nullptr;
            seeds.push_back(std::strtoll(p, &end, 10));
            p = *end == ',' ? end + 1 : end;
        }
    const bool use_seeds = !seeds.empty();
    if (!use_seeds) seeds.push_back(-1);

    float *dx = simt_case::to_device(x);
    float *dout = simt_case::device_zeros<float>(out_size);
    std::vector<float> all;
    for (const long long seed : seeds) {
        if (use_seeds) simt_case::set_shuffle((unsigned long long)seed);
        if (kernel == "tree") mg::cuda::launch("tree_sum", tree_sum<false>, dim3(blocks), block, dx, dout, n);
        else if (kernel == "tree_racy") mg::cuda::launch("tree_sum_racy", tree_sum<true>, dim3(blocks), block, dx, dout, n);
        else if (kernel == "neighbor") mg::cuda::launch("neighbor_diff", neighbor_diff<false>, dim3(blocks), block, dx, dout, n);
        else if (kernel == "neighbor_racy") mg::cuda::launch("neighbor_diff_racy", neighbor_diff<true>, dim3(blocks), block, dx, dout, n);
        else if (kernel == "cross_warp") mg::cuda::launch("cross_warp", cross_warp<false>, dim3(blocks), block, dx, dout, n);
        else if (kernel == "cross_warp_racy") mg::cuda::launch("cross_warp_racy", cross_warp<true>, dim3(blocks), block, dx, dout, n);
        else simt_case::fail("unknown kernel " + kernel);
        const std::vector<float> out = simt_case::to_host(dout, out_size);
        all.insert(all.end(), out.begin(), out.end());
    }
    simt_case::write_array(argv[4], all);
    mg::cuda::check(cudaFree(dx), "cudaFree");
    mg::cuda::check(cudaFree(dout), "cudaFree");
    return 0;
}
