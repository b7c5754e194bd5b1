// Warp intrinsics (shuffles of several types and widths, votes, __syncwarp, __activemask),
// __syncthreads_count, and the built-in index variables, including blocks whose last warp is
// partial and multi-dimensional blocks (lanes follow the linear thread id).
//
//   warp ops BLOCK IN OUT     IN: float32, one value per thread (whole blocks); OUT: float64
//                             [threads, kColumns] (see the columns below)
//   warp index GRID BLOCK OUT OUT: int32 [threads, 8] in linear (block, thread) order
#include "simt_case.h"

constexpr int kColumns = 15;

__global__ void warp_ops(const float *x, double *out) {
    __shared__ float exchange[1024];
    const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned lane = t % 32, warp = t / 32;
    const unsigned lanes = threads - 32 * warp < 32 ? threads - 32 * warp : 32;
    const unsigned g = blockIdx.x * threads + t;
    const float v = x[g];
    double *row = out + size_t(g) * kColumns;

    // Before any lane of the warp has exited (in the emulation a lane that has run to its end is
    // no longer active), the active lanes are the lanes that exist.
    row[14] = double(__activemask());
    const unsigned mask = __ballot_sync(0xffffffffu, 1);  // the lanes that exist

    float down = v;  // lane 0 ends with the warp's sum
    for (unsigned o = 16; o > 0; o >>= 1) {
        const float other = __shfl_down_sync(mask, down, o);
        if (lane + o < lanes) down += other;
    }
    row[0] = down;

    float butterfly = v;  // every lane ends with the sum (full warps)
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(mask, butterfly, o);
        if ((lane ^ unsigned(o)) < lanes) butterfly += other;
    }
    row[1] = butterfly;

    row[2] = double(__ballot_sync(mask, v > 0.0f));
    row[3] = double(__any_sync(mask, v > 5.0f) | (__all_sync(mask, v > -100.0f) << 1) |
                    (__all_sync(mask, v > 0.0f) << 2));

    float scan = v;  // inclusive prefix sums within segments of 8 lanes
    for (unsigned d = 1; d < 8; d <<= 1) {
        const float other = __shfl_up_sync(mask, scan, d, 8);
        if ((lane & 7) >= d) scan += other;
    }
    row[4] = scan;

    row[5] = __shfl_sync(mask, v, 3, 16);  // lane 3 of each 16-lane segment

    const unsigned next = (lane + 1) % lanes;  // rotate through every shuffle type
    row[6] = __shfl_sync(mask, double(v) * 0.5, int(next));
    row[7] = double(__shfl_sync(mask, (long long)v * (1ll << 33), int(next)) / (1ll << 33));
    row[8] = double(__shfl_sync(mask, int(v) - 7, int(next)));
    row[9] = double(__shfl_sync(mask, unsigned(v + 1000.0f), int(next)));

    exchange[t] = v;  // shared memory between the lanes of a warp, ordered by __syncwarp
    __syncwarp(mask);
    row[10] = (lane ^ 1u) < lanes ? exchange[t ^ 1u] : v;
    __syncwarp(mask);

    row[11] = double(__syncthreads_count(v > 0.0f));
    row[12] = __shfl_xor_sync(mask, v, 8, 8);  // reaches into the earlier 8-lane group only
    row[13] = __shfl_down_sync(mask, v, 4, 16);
}

__global__ void indices(int *out) {
    const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int *row = out + (size_t(b) * threads + t) * 8;
    row[0] = int(threadIdx.x);
    row[1] = int(threadIdx.y);
    row[2] = int(threadIdx.z);
    row[3] = int(blockIdx.x);
    row[4] = int(blockIdx.y);
    row[5] = int(blockIdx.z);
    row[6] = int(blockDim.x * 10000 + blockDim.y * 100 + blockDim.z);
    row[7] = int(gridDim.x * 10000 + gridDim.y * 100 + gridDim.z);
}

int main(int argc, char **argv) {
    if (argc < 2) simt_case::fail("usage: warp ops|index ...");
    const std::string mode = argv[1];
    if (mode == "ops" && argc == 5) {
        const dim3 block = simt_case::parse_dim(argv[2]);
        const std::vector<float> x = simt_case::read_array<float>(argv[3]);
        const unsigned threads = block.x * block.y * block.z;
        if (x.size() % threads != 0) simt_case::fail("input is not whole blocks");
        const unsigned blocks = unsigned(x.size() / threads);
        float *dx = simt_case::to_device(x);
        double *dout = simt_case::device_zeros<double>(x.size() * kColumns);
        mg::cuda::launch("warp_ops", warp_ops, dim3(blocks), block, (const float *)dx, dout);
        simt_case::write_array(argv[4], simt_case::to_host(dout, x.size() * kColumns));
        cudaFree(dx);
        cudaFree(dout);
    } else if (mode == "index" && argc == 5) {
        const dim3 grid = simt_case::parse_dim(argv[2]), block = simt_case::parse_dim(argv[3]);
        const size_t total = size_t(grid.x) * grid.y * grid.z * block.x * block.y * block.z;
        int *dout = simt_case::device_zeros<int>(total * 8);
        mg::cuda::launch("indices", indices, grid, block, dout);
        simt_case::write_array(argv[4], simt_case::to_host(dout, total * 8));
        cudaFree(dout);
    } else {
        simt_case::fail("bad arguments");
    }
    return 0;
}
