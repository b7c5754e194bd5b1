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

// The stream of every kernel, copy and cuBLAS call of the op layer, created on first use (after
// the device is selected).  It is a blocking stream, so the legacy stream's synchronous copies of
// the load-time code still wait for its work; an epoch on it can be captured into a CUDA graph
// (graph.cuh), which a stream of its own allows and the legacy stream does not.
// One per library, held at namespace scope with internal linkage: a function-local static's guard
// is a process-wide (GNU unique) symbol while a variable of the emulation's hidden stream type
// stays per library, so a second library would have found the guard set and its stream null.
static cudaStream_t g_stream = nullptr;
static inline cudaStream_t stream() {
    if (g_stream == nullptr) check(cudaStreamCreate(&g_stream), "creating the stream");
    return g_stream;
}

// Launch `kernel` on grid x block and check the launch; `name` names the kernel in errors.
// An empty grid launches nothing (CUDA refuses a zero-sized grid).
template <class... Params, class... Args>
inline void launch(const char *name, void (*kernel)(Params...), dim3 grid, dim3 block, Args... args) {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
#ifdef __CUDACC__
    kernel<<<grid, block, 0, stream()>>>(args...);
#else
    // the arguments by value: a captured launch runs when its graph is replayed
    check(simt::enqueue(stream(), [=] { simt::launch(grid, block, 0, [&] { kernel(Params(args)...); }); }), name);
#endif
    check(cudaGetLastError(), name);
}

// Device memory freed, counted: a captured epoch names its buffers by address, so a graph
// captured before a free (a scratch array grown for another model) is captured again instead of
// replayed (graph.cuh).  Process-wide, as the op layer's function-local scratch arrays are (their
// symbols are unique across libraries): a library's graph must see another library's frees.
inline uint64_t &frees() {
    static uint64_t count = 0;
    return count;
}

// Stream-ordered copies and fills of device memory (the epoch's; load-time code may copy
// synchronously).
inline void copy_async(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, const char *what) {
    if (bytes) check(cudaMemcpyAsync(dst, src, bytes, kind, stream()), what);
}
inline void fill_async(void *dst, int byte, size_t bytes, const char *what) {
    if (bytes) check(cudaMemsetAsync(dst, byte, bytes, stream()), what);
}

// Epochs since the CUDA graph being replayed was captured: its kernels' arguments hold the
// captured epoch, so what depends on the epoch (dropout streams, Adam's bias corrections, SGD's
// first step) adds this on the device.  0 whenever kernels are launched one by one; each replay
// sets it first (graph.cuh).  One per translation unit: every model library is one.
static __device__ int64_t g_epochs_since_capture = 0;
__device__ __forceinline__ int64_t epochs_since_capture() { return g_epochs_since_capture; }

}  // namespace cuda
}  // namespace mg
#endif
