// See link_a.cu: the second translation unit, with its own kernel and main.
#include "simt_case.h"

float run_a(int n);

__global__ void block_count(int *out) {
    __shared__ int count;
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    atomicAdd(&count, 1);
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = count;
}

int main() {
    int *d = simt_case::device_zeros<int>(8);
    mg::cuda::launch("block_count", block_count, dim3(8), dim3(96), d);
    const std::vector<int> counts = simt_case::to_host(d, 8);
    cudaFree(d);
    int total = 0;
    for (int c : counts) total += c;
    std::printf("a %g\nb %d\n", double(run_a(1024)), total);
    return 0;
}
