// The CUDA backend's device layer: the CUDA runtime under nvcc, or the SIMT emulation of simt.h
// under a host C++ compiler (MORPHGEN_SIMT_EMULATION), so that the same kernel sources run on a
// GPU and, in tests on machines without one, on the CPU.  Every kernel launch and runtime call
// goes through check(), whose error names the kernel or the operation that failed.
#ifndef MORPHGEN_CUDA_DEVICE_CUH
#define MORPHGEN_CUDA_DEVICE_CUH

#include <cstdint>
#include <stdexcept>
#include <string>

#ifdef __CUDACC__
#include <cuda_runtime.h>
#else
#include "simt.h"
#endif

// Functions that run on the host and on the device (the dropout hash, activations).
#define MG_HD __host__ __device__ __forceinline__

namespace mg {
namespace cuda {

struct DeviceError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

inline void check(cudaError_t status, const char *what) {
    if (status != cudaSuccess)
        throw DeviceError(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(status));
}

// Threads per block of the one-dimensional kernels.
constexpr int kThreads = 256;

// Blocks that give each of n items one of `per_block` slots (rows per block, or threads): one
// item per slot, so the grid must cover all of them (CUDA allows 2^31 - 1 blocks in x).
inline unsigned blocks_for(int64_t n, int per_block = kThreads) {
    const int64_t b = (n + per_block - 1) / per_block;
    if (b > int64_t(0x7fffffff)) throw DeviceError("a kernel's grid exceeds 2^31 - 1 blocks");
    return unsigned(b < 1 ? 1 : b);
}
// Blocks of a grid-stride loop over n items: enough to fill the GPU, the loop takes the rest.
inline unsigned stride_blocks(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return unsigned(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

// Launch `kernel` on grid x block and check the launch; `name` names the kernel in errors.
// An empty grid launches nothing (CUDA refuses a zero-sized grid).
template <class... Params, class... Args>
inline void launch(const char *name, void (*kernel)(Params...), dim3 grid, dim3 block, Args... args) {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
#ifdef __CUDACC__
    kernel<<<grid, block>>>(args...);
#else
    simt::launch(grid, block, 0, [&] { kernel(Params(args)...); });
#endif
    check(cudaGetLastError(), name);
}

}  // namespace cuda
}  // namespace mg
#endif
