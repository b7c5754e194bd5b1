// SIMT emulation: CUDA kernel sources compiled by a host C++ compiler (g++ -std=c++17 -fopenmp)
// run on the CPU with the semantics of the CUDA execution model that our kernels rely on.
//
//  * Every thread of a block is a fiber; all fibers of a block run cooperatively on ONE OS thread,
//    each until it exits or reaches a barrier.  __syncthreads() is the block barrier; the warp
//    intrinsics (__shfl*_sync, __ballot_sync, __any_sync, __all_sync, __syncwarp) meet at a warp
//    barrier, where the values are exchanged.  Exited threads count as arrived, as on current GPUs.
//    When no fiber can run and some have not exited, the block is deadlocked (divergent barriers):
//    "simt: deadlock in block (x,y,z): ..." goes to stderr and the process aborts.
//  * Blocks run in parallel over OpenMP threads (unless the launch comes from inside a parallel
//    region); one OS thread runs one block at a time, so `__shared__` is `static thread_local`.
//  * Atomics are real atomic read-modify-writes (blocks may run concurrently).
//  * Schedule shuffling (simt::set_shuffle(seed) or MORPHGEN_SIMT_SHUFFLE=seed, read once): the
//    start order of a block's threads, the order in which they resume after every barrier (and,
//    whenever a thread waits or exits, the choice between resuming a released thread and starting
//    a new one) and the block order are pseudo-random, derived from the seed, the block and the
//    barrier count, so a missing __syncthreads shows up as a wrong result.  Without shuffling,
//    threads start in linear order and resume in the order they reached the barrier.
//  * The runtime API subset treats host memory as device memory; everything is synchronous, except
//    that a stream being captured (cudaStreamBeginCapture) records its work, kernel launches
//    included, into a graph that cudaGraphLaunch replays in order.  As in the CUDA runtime's global
//    capture mode, a synchronous copy, memset, allocation or wait during a capture, or work on any
//    other stream, is refused and invalidates the capture (cudaStreamEndCapture then fails).
//
// Limits: no dynamic shared memory (`extern __shared__` does not compile; a launch with dynamic
// shared memory fails with cudaErrorInvalidConfiguration); no preemption between barriers, so races
// are exposed only at barrier granularity; the CUDA memory model's weakness is not emulated;
// __activemask() is the set of non-exited lanes of the warp (a lane that ran to its end before
// the others reached it is not active); a shuffle from a lane that does not take part returns the
// caller's own value; no global min/max overloads (use fminf/fmaxf or the std functions); no
// dynamic parallelism (launching from a kernel aborts); __CUDA_ARCH__ is not defined;
// __noinline__ is not defined (it is GCC's own attribute spelling).
//
// Fiber stacks come from a per-OS-thread pool (64 KiB each, MORPHGEN_SIMT_STACK=bytes[k|m] changes
// it), carved 64 at a time from one mapping; a canary at the bottom of each stack reports an
// overflow when the stack returns to the pool.  A fiber whose thread exits starts
// the next thread itself, so a kernel without barriers runs without any context switch.  On
// x86-64 ELF the context switch is a few instructions of assembly; elsewhere (or with
// -DMORPHGEN_SIMT_UCONTEXT) it is ucontext's swapcontext, which is much slower (a system call).
#ifndef MORPHGEN_CUDA_SIMT_H
#define MORPHGEN_CUDA_SIMT_H

#ifdef __CUDACC__
#error "simt.h emulates CUDA on the host; under nvcc include <cuda_runtime.h> instead"
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <type_traits>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef MORPHGEN_SIMT_EMULATION
#define MORPHGEN_SIMT_EMULATION 1
#endif

#if defined(__x86_64__) && defined(__ELF__) && !defined(MORPHGEN_SIMT_UCONTEXT)
#define MORPHGEN_SIMT_ASM_SWITCH 1
#else
#define MORPHGEN_SIMT_ASM_SWITCH 0
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define MORPHGEN_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MORPHGEN_SIMT_ASAN 1
#endif
#endif
#ifndef MORPHGEN_SIMT_ASAN
#define MORPHGEN_SIMT_ASAN 0
#endif

#if MORPHGEN_SIMT_ASAN
extern "C" {
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
}
#endif

// Everything below is hidden: a shared library that includes this header keeps its emulation
// state (thread-local scheduler, threadIdx, ...) to itself, even beside another library built
// from a different version of this header.  (Inline variables are otherwise GNU_UNIQUE symbols,
// one per process.)
#pragma GCC visibility push(hidden)

// ------------------------------------------------------------------------------------------------
// Built-in types and variables
// ------------------------------------------------------------------------------------------------

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

inline thread_local uint3 threadIdx{0, 0, 0};
inline thread_local uint3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{1, 1, 1};
inline thread_local dim3 gridDim{1, 1, 1};
inline constexpr int warpSize = 32;

// ------------------------------------------------------------------------------------------------
// Qualifiers
// ------------------------------------------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
// One variable per OS thread = one per block: an OS thread runs one block at a time, with all of
// that block's threads as fibers on it.
#define __shared__ static thread_local

// ------------------------------------------------------------------------------------------------
// Runtime API: types and errors
// ------------------------------------------------------------------------------------------------

enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureUnmatched = 903,
    cudaErrorStreamCaptureImplicit = 906,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

// A stream runs its work at once (the emulation is synchronous), except while it is captured: then
// its work is recorded, in order, into the graph that cudaStreamEndCapture returns.
struct CUgraph_st {
    std::vector<std::function<void()>> work;
};
typedef CUgraph_st *cudaGraph_t;

struct CUstream_st {
    int unused;
    CUgraph_st *captured = nullptr;   // the graph being recorded, or none
    bool invalidated = false;         // a refused call ended the capture's use
};
typedef CUstream_st *cudaStream_t;
struct CUgraphExec_st {
    std::vector<std::function<void()>> work;
};
typedef CUgraphExec_st *cudaGraphExec_t;

enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1,
                             cudaStreamCaptureModeRelaxed = 2 };
enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone = 0, cudaStreamCaptureStatusActive = 1,
                               cudaStreamCaptureStatusInvalidated = 2 };

struct CUevent_st {
    std::chrono::steady_clock::time_point when;
    bool recorded;
};
typedef CUevent_st *cudaEvent_t;

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate;
    size_t totalConstMem;
    int major;
    int minor;
    int multiProcessorCount;
    int maxThreadsPerMultiProcessor;
    size_t sharedMemPerMultiprocessor;
    int l2CacheSize;
};

namespace simt {
namespace detail {
inline thread_local cudaError_t last_error = cudaSuccess;
inline cudaError_t fail(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}
// The stream being captured (one at a time, in the global capture mode: the strictest).
inline cudaStream_t &capturing() {
    static cudaStream_t stream = nullptr;
    return stream;
}
// A call that synchronises with the device (a synchronous copy or memset, an allocation, a wait)
// is refused while a capture is active and invalidates that capture, as on a GPU: work the
// epoch's graph would have to replay must never hide in such a call.
inline bool refused_in_capture() {
    if (capturing() == nullptr) return false;
    capturing()->invalidated = true;
    fail(cudaErrorStreamCaptureUnsupported);
    return true;
}
}  // namespace detail

// Work on `stream`: done now, or recorded while the stream is captured.  Work on another stream
// (the legacy default stream included) during a capture is refused and invalidates the capture.
template <class Work>
inline cudaError_t enqueue(cudaStream_t stream, Work &&work) {
    cudaStream_t captured = detail::capturing();
    if (captured == nullptr) {
        work();
        return cudaSuccess;
    }
    if (stream != captured) {
        captured->invalidated = true;
        return detail::fail(cudaErrorStreamCaptureImplicit);
    }
    captured->captured->work.emplace_back(std::forward<Work>(work));
    return cudaSuccess;
}
}  // namespace simt

inline const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    }
    return "cudaErrorUnknown";
}

inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    }
    return "unrecognized error code";
}

inline cudaError_t cudaGetLastError() {
    const cudaError_t e = simt::detail::last_error;
    simt::detail::last_error = cudaSuccess;
    return e;
}

inline cudaError_t cudaPeekAtLastError() { return simt::detail::last_error; }

// ------------------------------------------------------------------------------------------------
// Runtime API: memory (host memory stands for device memory), streams, events, devices
// ------------------------------------------------------------------------------------------------

inline cudaError_t cudaMalloc(void **ptr, size_t bytes) {
    if (ptr == nullptr) return simt::detail::fail(cudaErrorInvalidValue);
    if (simt::detail::refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    *ptr = nullptr;
    if (bytes == 0) return cudaSuccess;
    if (bytes > SIZE_MAX - 255) return simt::detail::fail(cudaErrorMemoryAllocation);
    void *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (p == nullptr) return simt::detail::fail(cudaErrorMemoryAllocation);
    *ptr = p;
    return cudaSuccess;
}

template <class T>
inline cudaError_t cudaMalloc(T **ptr, size_t bytes) {
    return cudaMalloc(reinterpret_cast<void **>(ptr), bytes);
}

inline cudaError_t cudaFree(void *ptr) {
    if (simt::detail::refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    std::free(ptr);
    return cudaSuccess;
}

inline cudaError_t cudaMallocHost(void **ptr, size_t bytes) { return cudaMalloc(ptr, bytes); }
template <class T>
inline cudaError_t cudaMallocHost(T **ptr, size_t bytes) {
    return cudaMalloc(reinterpret_cast<void **>(ptr), bytes);
}
inline cudaError_t cudaFreeHost(void *ptr) { return cudaFree(ptr); }

inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                                   cudaStream_t stream = nullptr) {
    if (unsigned(kind) > unsigned(cudaMemcpyDefault)) return simt::detail::fail(cudaErrorInvalidValue);
    if (bytes == 0) return cudaSuccess;
    if (dst == nullptr || src == nullptr) return simt::detail::fail(cudaErrorInvalidValue);
    return simt::enqueue(stream, [=] { std::memmove(dst, src, bytes); });
}

inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (simt::detail::refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    return cudaMemcpyAsync(dst, src, bytes, kind);
}

inline cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream = nullptr) {
    if (bytes == 0) return cudaSuccess;
    if (ptr == nullptr) return simt::detail::fail(cudaErrorInvalidValue);
    return simt::enqueue(stream, [=] { std::memset(ptr, value, bytes); });
}

inline cudaError_t cudaMemset(void *ptr, int value, size_t bytes) {
    if (simt::detail::refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    return cudaMemsetAsync(ptr, value, bytes);
}

// __constant__ and __device__ variables are ordinary globals.
template <class T>
inline cudaError_t cudaMemcpyToSymbol(T &symbol, const void *src, size_t bytes, size_t offset = 0,
                                      cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    if (offset + bytes > sizeof(T)) return simt::detail::fail(cudaErrorInvalidValue);
    return cudaMemcpy(reinterpret_cast<char *>(&symbol) + offset, src, bytes, kind);
}

template <class T>
inline cudaError_t cudaMemcpyToSymbolAsync(T &symbol, const void *src, size_t bytes, size_t offset = 0,
                                           cudaMemcpyKind kind = cudaMemcpyHostToDevice, cudaStream_t stream = nullptr) {
    if (offset + bytes > sizeof(T)) return simt::detail::fail(cudaErrorInvalidValue);
    return cudaMemcpyAsync(reinterpret_cast<char *>(&symbol) + offset, src, bytes, kind, stream);
}

template <class T>
inline cudaError_t cudaMemcpyFromSymbol(void *dst, const T &symbol, size_t bytes, size_t offset = 0,
                                        cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
    if (offset + bytes > sizeof(T)) return simt::detail::fail(cudaErrorInvalidValue);
    return cudaMemcpy(dst, reinterpret_cast<const char *>(&symbol) + offset, bytes, kind);
}

inline cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    if (free_bytes == nullptr || total_bytes == nullptr) return simt::detail::fail(cudaErrorInvalidValue);
    const long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    *total_bytes = pages > 0 && page > 0 ? size_t(pages) * size_t(page) : 0;
    *free_bytes = avail > 0 && page > 0 ? size_t(avail) * size_t(page) : 0;
    return cudaSuccess;
}

inline cudaError_t cudaStreamCreate(cudaStream_t *stream) {
    if (stream == nullptr) return simt::detail::fail(cudaErrorInvalidValue);
    *stream = new CUstream_st{0};
    return cudaSuccess;
}

enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags) {
    (void)flags;
    return cudaStreamCreate(stream);
}

inline cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0) {
    (void)stream, (void)event, (void)flags;
    return cudaSuccess;
}

inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    delete stream;
    return cudaSuccess;
}

inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    (void)stream;
    if (simt::detail::refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    return cudaSuccess;
}

inline cudaError_t cudaDeviceSynchronize() {
    if (simt::detail::refused_in_capture()) return cudaErrorStreamCaptureUnsupported;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceReset() { return cudaSuccess; }

inline cudaError_t cudaSetDevice(int device) {
    return device == 0 ? cudaSuccess : simt::detail::fail(cudaErrorInvalidDevice);
}

inline cudaError_t cudaGetDevice(int *device) {
    if (device == nullptr) return simt::detail::fail(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}

inline cudaError_t cudaGetDeviceCount(int *count) {
    if (count == nullptr) return simt::detail::fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}

inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
    if (prop == nullptr) return simt::detail::fail(cudaErrorInvalidValue);
    if (device != 0) return simt::detail::fail(cudaErrorInvalidDevice);
    std::memset(prop, 0, sizeof(*prop));
    std::snprintf(prop->name, sizeof(prop->name), "%s", "morphgen SIMT emulation");
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    prop->totalGlobalMem = total_bytes;
    prop->sharedMemPerBlock = 48 * 1024;
    prop->regsPerBlock = 65536;
    prop->warpSize = warpSize;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = INT_MAX;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->clockRate = 1000000;
    prop->totalConstMem = 65536;
    prop->major = 8;
    prop->minor = 0;
#ifdef _OPENMP
    prop->multiProcessorCount = omp_get_num_procs();
#else
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    prop->multiProcessorCount = cpus > 0 ? int(cpus) : 1;
#endif
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->sharedMemPerMultiprocessor = 164 * 1024;
    prop->l2CacheSize = 40 * 1024 * 1024;
    return cudaSuccess;
}

inline cudaError_t cudaEventCreate(cudaEvent_t *event) {
    if (event == nullptr) return simt::detail::fail(cudaErrorInvalidValue);
    *event = new CUevent_st{std::chrono::steady_clock::time_point(), false};
    return cudaSuccess;
}

inline cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr) {
    (void)stream;
    if (event == nullptr) return simt::detail::fail(cudaErrorInvalidResourceHandle);
    event->when = std::chrono::steady_clock::now();
    event->recorded = true;
    return cudaSuccess;
}

inline cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (event == nullptr) return simt::detail::fail(cudaErrorInvalidResourceHandle);
    return cudaSuccess;
}

inline cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (event == nullptr) return simt::detail::fail(cudaErrorInvalidResourceHandle);
    return cudaSuccess;
}

inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t stop) {
    if (ms == nullptr) return simt::detail::fail(cudaErrorInvalidValue);
    if (start == nullptr || stop == nullptr || !start->recorded || !stop->recorded)
        return simt::detail::fail(cudaErrorInvalidResourceHandle);
    *ms = std::chrono::duration<float, std::milli>(stop->when - start->when).count();
    return cudaSuccess;
}

inline cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete event;
    return cudaSuccess;
}

// ---- stream capture and graphs: a graph is the captured stream's work, replayed in order --------

inline cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    (void)mode;   // every capture is global: the strictest mode refuses the most
    if (stream == nullptr || simt::detail::capturing() != nullptr)
        return simt::detail::fail(cudaErrorStreamCaptureUnsupported);
    stream->captured = new CUgraph_st();
    stream->invalidated = false;
    simt::detail::capturing() = stream;
    return cudaSuccess;
}

inline cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    if (graph == nullptr) return simt::detail::fail(cudaErrorInvalidValue);
    *graph = nullptr;
    if (stream == nullptr || stream != simt::detail::capturing())
        return simt::detail::fail(cudaErrorStreamCaptureUnmatched);
    simt::detail::capturing() = nullptr;
    CUgraph_st *recorded = stream->captured;
    stream->captured = nullptr;
    if (stream->invalidated) {
        delete recorded;
        return simt::detail::fail(cudaErrorStreamCaptureInvalidated);
    }
    *graph = recorded;
    return cudaSuccess;
}

inline cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus *status) {
    if (status == nullptr) return simt::detail::fail(cudaErrorInvalidValue);
    const bool active = stream != nullptr && stream == simt::detail::capturing();
    *status = !active ? cudaStreamCaptureStatusNone
                      : stream->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags = 0) {
    (void)flags;
    if (exec == nullptr || graph == nullptr) return simt::detail::fail(cudaErrorInvalidValue);
    *exec = new CUgraphExec_st{graph->work};
    return cudaSuccess;
}

inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    if (exec == nullptr) return simt::detail::fail(cudaErrorInvalidResourceHandle);
    return simt::enqueue(stream, [exec] {
        for (const std::function<void()> &work : exec->work) work();
    });
}

inline cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}

inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}

// ------------------------------------------------------------------------------------------------
// The scheduler: fibers, barriers, warp exchanges
// ------------------------------------------------------------------------------------------------

#if MORPHGEN_SIMT_ASM_SWITCH
// morphgen_simt_switch(save, to): pushes the callee-saved registers (and MXCSR, x87 control word)
// on the current stack, stores the stack pointer in *save, switches to `to` and pops the same
// there.  morphgen_simt_trampoline is where a new fiber starts: entry function in rbx, argument in
// r12.  Both live in COMDAT sections, so every translation unit may emit them (like inline
// functions); they are hidden, so two libraries that include this header do not interpose.
__asm__(
    ".pushsection .text.morphgen_simt_switch,\"axG\",@progbits,morphgen_simt_switch,comdat\n"
    ".weak morphgen_simt_switch\n"
    ".hidden morphgen_simt_switch\n"
    ".type morphgen_simt_switch,@function\n"
    ".p2align 4\n"
    "morphgen_simt_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    subq $8, %rsp\n"
    "    stmxcsr (%rsp)\n"
    "    fnstcw 4(%rsp)\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    ldmxcsr (%rsp)\n"
    "    fldcw 4(%rsp)\n"
    "    addq $8, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size morphgen_simt_switch,.-morphgen_simt_switch\n"
    ".popsection\n"
    ".pushsection .text.morphgen_simt_trampoline,\"axG\",@progbits,morphgen_simt_trampoline,comdat\n"
    ".weak morphgen_simt_trampoline\n"
    ".hidden morphgen_simt_trampoline\n"
    ".type morphgen_simt_trampoline,@function\n"
    ".p2align 4\n"
    "morphgen_simt_trampoline:\n"
    "    .cfi_startproc\n"
    "    .cfi_undefined rip\n"
    "    movq %r12, %rdi\n"
    "    callq *%rbx\n"
    "    ud2\n"
    "    .cfi_endproc\n"
    ".size morphgen_simt_trampoline,.-morphgen_simt_trampoline\n"
    ".popsection\n");
extern "C" __attribute__((visibility("hidden"))) void morphgen_simt_switch(void **save, void *to);
extern "C" __attribute__((visibility("hidden"))) void morphgen_simt_trampoline();
#endif

namespace simt {
namespace detail {

#if MORPHGEN_SIMT_ASM_SWITCH
struct Context {
    void *sp = nullptr;
};
inline void ctx_switch(Context &from, Context &to) { morphgen_simt_switch(&from.sp, to.sp); }
// The control words a new fiber starts with (those of the thread that starts it).
inline uint64_t control_words() {
    uint32_t mxcsr = 0;
    uint16_t fcw = 0;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fcw));
    return uint64_t(mxcsr) | (uint64_t(fcw) << 32);
}
// Lay out the frame morphgen_simt_switch pops, returning into the trampoline, which calls
// entry(arg) with the stack aligned as after a call.
inline void ctx_init(Context &c, char *lo, size_t size, void (*entry)(void *), void *arg, uint64_t cw) {
    const uintptr_t top = (reinterpret_cast<uintptr_t>(lo) + size) & ~uintptr_t(15);
    uint64_t *sp = reinterpret_cast<uint64_t *>(top - 16 - 64);
    sp[0] = cw;                                                        // MXCSR, x87 control word
    sp[1] = sp[2] = sp[3] = 0;                                         // r15, r14, r13
    sp[4] = uint64_t(reinterpret_cast<uintptr_t>(arg));                // r12
    sp[5] = uint64_t(reinterpret_cast<uintptr_t>(entry));              // rbx
    sp[6] = 0;                                                         // rbp
    sp[7] = uint64_t(reinterpret_cast<uintptr_t>(&morphgen_simt_trampoline));  // return address
    sp[8] = sp[9] = 0;
    c.sp = sp;
}
#else
struct Context {
    ucontext_t uc;
};
inline void ctx_switch(Context &from, Context &to) {
    if (swapcontext(&from.uc, &to.uc) != 0) {
        std::fprintf(stderr, "simt: swapcontext failed\n");
        std::abort();
    }
}
inline uint64_t control_words() { return 0; }
inline void uc_entry();
inline void ctx_init(Context &c, char *lo, size_t size, void (*)(void *), void *, uint64_t) {
    if (getcontext(&c.uc) != 0) {
        std::fprintf(stderr, "simt: getcontext failed\n");
        std::abort();
    }
    c.uc.uc_stack.ss_sp = lo;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, &uc_entry, 0);
}
#endif

inline void asan_start(void **fake, const void *bottom, size_t size) {
#if MORPHGEN_SIMT_ASAN
    __sanitizer_start_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}
inline void asan_finish(void *fake, const void **bottom, size_t *size) {
#if MORPHGEN_SIMT_ASAN
    __sanitizer_finish_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}

[[noreturn]] inline void die(const char *what) {
    std::fprintf(stderr, "simt: %s\n", what);
    std::fflush(stderr);
    std::abort();
}

// Fiber stack size: 64 KiB, or MORPHGEN_SIMT_STACK (bytes, or with a k/m suffix; at least 16 KiB).
inline size_t stack_size() {
    static const size_t size = [] {
        size_t bytes = 64 * 1024;
        if (const char *env = std::getenv("MORPHGEN_SIMT_STACK")) {
            char *end = nullptr;
            unsigned long long v = std::strtoull(env, &end, 10);
            if (end != env) {
                if (*end == 'k' || *end == 'K') v <<= 10;
                else if (*end == 'm' || *end == 'M') v <<= 20;
                if (v >= 16 * 1024 && v <= (1ull << 30)) bytes = size_t(v);
                else std::fprintf(stderr, "simt: MORPHGEN_SIMT_STACK=%s out of range, using 64 KiB\n", env);
            }
        }
        const long page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
        return (bytes + size_t(page) - 1) / size_t(page) * size_t(page);
    }();
    return size;
}

inline uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

template <class T>
inline void permute(T *a, size_t n, uint64_t key) {
    for (size_t i = n; i > 1; --i) {
        const size_t j = size_t(mix64(key + i) % i);
        std::swap(a[i - 1], a[j]);
    }
}

inline std::atomic<uint64_t> &shuffle_state() {
    static std::atomic<uint64_t> seed{[] {
        const char *env = std::getenv("MORPHGEN_SIMT_SHUFFLE");
        return env != nullptr ? uint64_t(std::strtoull(env, nullptr, 0)) : uint64_t(0);
    }()};
    return seed;
}

enum : uint8_t { kNew, kRunning, kReady, kBlockWait, kWarpWait, kDone };
enum : uint8_t { kOpSync, kOpIdx, kOpUp, kOpDown, kOpXor, kOpBallot, kOpAny, kOpAll };

struct Fiber {
    Context ctx;
    char *stack = nullptr;  // lowest usable byte; nullptr while not running
    void *fake = nullptr;   // AddressSanitizer's fake stack while suspended
    uint3 tid{0, 0, 0};
    uint8_t state = kNew;
    uint8_t op = kOpSync;
    int32_t arg = 0;     // shuffle source lane / delta / lane mask
    int32_t width = 32;  // shuffle width
    uint32_t mask = 0;   // the _sync mask
    uint64_t val = 0;    // the value (bits) or predicate offered at the barrier
    uint64_t result = 0;
};

struct Warp {
    uint32_t live = 0;     // lanes that exist and have not exited
    uint32_t waiting = 0;  // lanes waiting at the warp barrier
};

struct Launch {
    dim3 grid, block;
    void (*fn)(void *);
    void *ctx;
    uint64_t seed;
};

struct Sched;
inline thread_local Sched *current = nullptr;  // the scheduler running a block on this OS thread
inline void fiber_entry(void *sched);

struct Sched {
    Context main;
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    std::vector<unsigned> ring;   // ready fibers, FIFO
    std::vector<unsigned> bwait;  // fibers waiting at __syncthreads, in arrival order
    std::vector<unsigned> order;  // start order (shuffle mode)
    std::vector<char *> stacks;   // free stacks
    std::vector<std::pair<void *, size_t>> chunks;   // the mappings the stacks are carved from
    size_t stack_bytes = 0, guard_bytes = 0;
    unsigned n = 0, live = 0, started = 0, running = 0;
    unsigned rhead = 0, rcount = 0, nbwait = 0, bsum = 0;
    unsigned bx = 1, bxy = 1;
    uint64_t releases = 0, picks = 0, block_key = 0, seed = 0, cw = 0;
    uint3 bid{0, 0, 0};
    void (*fn)(void *) = nullptr;
    void *body = nullptr;
    std::exception_ptr error;
    const void *main_bottom = nullptr;  // the OS thread's stack, for AddressSanitizer
    size_t main_size = 0;
    void *main_fake = nullptr;
    bool from_main = false;

    Sched() = default;
    Sched(const Sched &) = delete;
    Sched &operator=(const Sched &) = delete;
    ~Sched() {
        for (auto &c : chunks) munmap(c.first, c.second);
    }

    // Stacks are carved kStacksPerChunk at a time from one mapping with one guard page below it.
    // A guard page per stack would cost two memory mappings per stack, and a process that loads
    // many emulated libraries (each keeps its own pools) ran into vm.max_map_count.  Instead each
    // stack's lowest bytes hold a canary, checked when the stack comes back to the pool: an
    // overflow into the stack below is reported then, naming MORPHGEN_SIMT_STACK.
    static constexpr unsigned kStacksPerChunk = 64;
    static constexpr uint64_t kCanary = 0x5afe57ac6c0ffee5ull;

    char *get_stack() {
        if (stacks.empty()) {
            if (stack_bytes == 0) {
                stack_bytes = stack_size();
                const long page = sysconf(_SC_PAGESIZE);
                guard_bytes = page > 0 ? size_t(page) : 4096;
            }
            const size_t bytes = guard_bytes + size_t(kStacksPerChunk) * stack_bytes;
            void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED) die("cannot allocate fiber stacks (mmap failed)");
            mprotect(p, guard_bytes, PROT_NONE);  // the lowest stack's overflow faults
            chunks.emplace_back(p, bytes);
            for (unsigned k = kStacksPerChunk; k-- > 0;) {
                char *s = static_cast<char *>(p) + guard_bytes + size_t(k) * stack_bytes;
                std::memcpy(s, &kCanary, sizeof kCanary);
                stacks.push_back(s);
            }
        }
        char *s = stacks.back();
        stacks.pop_back();
        return s;
    }

    void put_stack(char *s) {
        uint64_t canary;
        std::memcpy(&canary, s, sizeof canary);
        if (canary != kCanary)
            die("a fiber overflowed its stack (raise MORPHGEN_SIMT_STACK, now the stack size in bytes)");
        stacks.push_back(s);
    }

    void begin_launch(const Launch &L) {
        fn = L.fn;
        body = L.ctx;
        seed = L.seed;
        error = nullptr;
        n = L.block.x * L.block.y * L.block.z;
        bx = L.block.x;
        bxy = L.block.x * L.block.y;
        if (fibers.size() < n) fibers.resize(n);
        if (ring.size() < n) ring.resize(n);
        if (bwait.size() < n) bwait.resize(n);
        if (seed != 0 && order.size() < n) order.resize(n);
        if (warps.size() < (n + 31) / 32) warps.resize((n + 31) / 32);
        cw = control_words();
        blockDim = L.block;
        gridDim = L.grid;
    }

    void push(unsigned i) {
        unsigned slot = rhead + rcount;
        if (slot >= n) slot -= n;
        ring[slot] = i;
        ++rcount;
    }

    unsigned pop() {
        const unsigned i = ring[rhead];
        if (++rhead == n) rhead = 0;
        --rcount;
        return i;
    }

    // Runs every thread of block `b` to completion.  The scheduler only starts the first fiber:
    // fibers switch directly to one another (switch_from) and come back here when no thread can
    // run -- all have exited, or the block is deadlocked.
    void run_block(uint3 b, uint64_t linear_block) {
        bid = b;
        blockIdx = b;
        live = n;
        started = rhead = rcount = nbwait = bsum = 0;
        releases = picks = 0;
        for (unsigned w = 0, nw = (n + 31) / 32; w < nw; ++w) {
            const unsigned lanes = std::min(32u, n - 32 * w);
            warps[w].live = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
            warps[w].waiting = 0;
        }
        if (seed != 0) {
            block_key = mix64(seed ^ mix64(linear_block + 0x5851f42d4c957f2dull));
            for (unsigned i = 0; i < n; ++i) order[i] = i;
            permute(order.data(), n, block_key);
        }
        current = this;
        const unsigned i = next_start();
        start(i);
        Fiber &f = fibers[i];
        f.state = kRunning;
        threadIdx = f.tid;
        running = i;
        from_main = true;
        asan_start(&main_fake, f.stack, stack_bytes);
        ctx_switch(main, f.ctx);
        asan_finish(main_fake, nullptr, nullptr);
        current = nullptr;
        if (live != 0) deadlock();
    }

    unsigned next_start() {
        const unsigned i = seed != 0 ? order[started] : started;
        ++started;
        return i;
    }

    void set_tid(Fiber &f, unsigned i) const {
        if (bx == n) f.tid = uint3{i, 0, 0};
        else f.tid = uint3{i % bx, (i % bxy) / bx, i / bxy};
    }

    // A new fiber for thread i on a stack from the pool.  The top of each stack is offset by a
    // different multiple of 64 bytes, so that the hot frames of many fibers do not all map to the
    // same L1 cache sets.
    void start(unsigned i) {
        Fiber &f = fibers[i];
        f.stack = get_stack();
#if MORPHGEN_SIMT_ASAN
        // The frames of the fiber that last ran on this stack never returned: clear their poison.
        __asan_unpoison_memory_region(f.stack, stack_bytes);
#endif
        const size_t color = ((reinterpret_cast<uintptr_t>(f.stack) >> 12) & 63) * 64;
        ctx_init(f.ctx, f.stack, stack_bytes - color, &fiber_entry, this, cw);
        set_tid(f, i);
        f.fake = nullptr;
    }

    static constexpr unsigned kNone = ~0u, kFresh = 1u << 31;

    // The thread to run next: a released one (FIFO), else one not started yet (its index |
    // kFresh), else kNone.  Shuffled, a pseudo-random choice among all of those.
    unsigned pick() {
        const unsigned fresh = n - started;
        if (rcount == 0 && fresh == 0) return kNone;
        if (seed != 0) {
            const uint64_t r = mix64(block_key ^ (++picks * 0x9e3779b97f4a7c15ull)) % (rcount + fresh);
            if (r >= rcount) return next_start() | kFresh;
            unsigned pos = rhead + unsigned(r);
            if (pos >= n) pos -= n;
            const unsigned i = ring[pos];
            ring[pos] = ring[rhead];
            pop();
            return i;
        }
        return rcount != 0 ? pop() : next_start() | kFresh;
    }

    // Called on fiber `self` once its thread waits at a barrier (arrival counted) or has exited:
    // switch to the next thread to run -- see pick() -- or, when no thread can run, back to the
    // scheduler.  Returns when the waiting thread is released.  (An exited thread's fiber starts
    // a fresh thread itself, in fiber_entry, so `next` is never fresh when exiting.)
    void switch_from(unsigned self, unsigned next, bool exiting) {
        Fiber &f = fibers[self];
        if (next == kNone) {
            if (exiting) {
                put_stack(f.stack);
                f.stack = nullptr;
            }
            asan_start(exiting ? nullptr : &f.fake, main_bottom, main_size);
            ctx_switch(f.ctx, main);
            asan_finish(f.fake, nullptr, nullptr);
            return;
        }
        const unsigned i = next & ~kFresh;
        if (next & kFresh) {
            start(i);
        } else if (i == self) {  // released and chosen at once: go on without a switch
            f.state = kRunning;
            return;
        }
        Fiber &g = fibers[i];
        g.state = kRunning;
        running = i;
        threadIdx = g.tid;
        if (exiting) {  // the stack is free once we are off it; nothing takes it before
            put_stack(f.stack);
            f.stack = nullptr;
        }
        asan_start(exiting ? nullptr : &f.fake, g.stack, stack_bytes);
        ctx_switch(f.ctx, g.ctx);
        asan_finish(f.fake, nullptr, nullptr);
    }

    // Bookkeeping for an exited thread (runs on its fiber, which then either starts the next
    // thread or returns to the scheduler, which takes its stack back).
    void exited(unsigned i) {
        --live;
        Warp &w = warps[i >> 5];
        w.live &= ~(1u << (i & 31));
        if (nbwait != 0 && nbwait == live) release_block();
        if (w.waiting != 0) try_release_warp(i >> 5);
    }

    void block_arrive(unsigned i) {
        bwait[nbwait++] = i;
        bsum += fibers[i].val != 0;
        if (nbwait == live) release_block();
    }

    void release_block() {
        if (seed != 0) permute(bwait.data(), nbwait, mix64(block_key + ++releases));
        const uint64_t result = uint64_t(bsum) | (uint64_t(nbwait) << 32);
        for (unsigned k = 0; k < nbwait; ++k) {
            Fiber &f = fibers[bwait[k]];
            f.result = result;
            f.state = kReady;
            push(bwait[k]);
        }
        nbwait = bsum = 0;
    }

    void warp_arrive(unsigned i) {
        const unsigned w = i >> 5;
        Warp &W = warps[w];
        W.waiting |= 1u << (i & 31);
        if (W.waiting == W.live) release_warp(w, W.waiting);
        else if ((fibers[i].mask & W.live & ~W.waiting) == 0) try_release_warp(w);
    }

    // Release the largest set R of waiting lanes in which every lane's mask (less exited lanes)
    // lies within R: those lanes' _sync calls have all their partners.
    void try_release_warp(unsigned w) {
        Warp &W = warps[w];
        uint32_t R = W.waiting;
        const Fiber *lanes = &fibers[32 * w];
        for (bool changed = true; changed && R != 0;) {
            changed = false;
            for (uint32_t m = R; m != 0; m &= m - 1) {
                const unsigned l = unsigned(__builtin_ctz(m));
                if (lanes[l].mask & W.live & ~R) {
                    R &= ~(1u << l);
                    changed = true;
                }
            }
        }
        if (R != 0) release_warp(w, R);
    }

    void release_warp(unsigned w, uint32_t R) {
        Fiber *lanes = &fibers[32 * w];
        uint32_t preds = 0;
        unsigned list[32], k = 0;
        for (uint32_t m = R; m != 0; m &= m - 1) {
            const unsigned l = unsigned(__builtin_ctz(m));
            if (lanes[l].val != 0) preds |= 1u << l;
            list[k++] = l;
        }
        for (unsigned j = 0; j < k; ++j) lanes[list[j]].result = lane_result(lanes, list[j], R, preds);
        if (seed != 0) permute(list, k, mix64(block_key + ++releases));
        for (unsigned j = 0; j < k; ++j) {
            lanes[list[j]].state = kReady;
            push(32 * w + list[j]);
        }
        warps[w].waiting &= ~R;
    }

    // The value lane l receives, with the lane selection of PTX shfl.sync (c = width segment mask):
    // a source outside the lane's segment, or one not taking part, yields the lane's own value.
    static uint64_t lane_result(const Fiber *lanes, unsigned l, uint32_t R, uint32_t preds) {
        const Fiber &f = lanes[l];
        switch (f.op) {
        case kOpSync: return 0;
        case kOpBallot: return preds & f.mask;
        case kOpAny: return (preds & f.mask) != 0;
        case kOpAll: return ((R & f.mask) & ~preds) == 0;
        default: break;
        }
        const int lane = int(l), b = f.arg & 31, seg = (32 - f.width) & 31;
        const int lo = lane & seg, hi = lo | (31 & ~seg);
        int j;
        bool ok;
        switch (f.op) {
        case kOpUp: j = lane - b; ok = j >= lo; break;
        case kOpDown: j = lane + b; ok = j <= hi; break;
        case kOpXor: j = lane ^ b; ok = j <= hi; break;
        default: j = lo | (b & ~seg); ok = j <= hi; break;
        }
        if (!ok || !((R >> j) & 1u)) j = lane;
        return lanes[j].val;
    }

    [[noreturn]] void deadlock() {
        unsigned at_warp = 0, at_block = nbwait;
        for (unsigned i = 0; i < n; ++i) at_warp += fibers[i].state == kWarpWait;
        std::fprintf(stderr,
                     "simt: deadlock in block (%u,%u,%u): %u of %u threads not exited; %u waiting at "
                     "__syncthreads, %u at warp barriers (shuffle/vote/__syncwarp)\n",
                     bid.x, bid.y, bid.z, live, n, at_block, at_warp);
        for (unsigned k = 0; k < nbwait && k < 8; ++k) {
            const uint3 t = fibers[bwait[k]].tid;
            std::fprintf(stderr, "simt:   thread (%u,%u,%u) waits at __syncthreads\n", t.x, t.y, t.z);
        }
        if (nbwait > 8) std::fprintf(stderr, "simt:   ... and %u more threads at __syncthreads\n", nbwait - 8);
        for (unsigned w = 0; w < (n + 31) / 32; ++w)
            if (warps[w].waiting != 0)
                std::fprintf(stderr, "simt:   warp %u: lanes 0x%08x wait at a warp barrier, live lanes 0x%08x\n",
                             w, warps[w].waiting, warps[w].live);
        std::fflush(stderr);
        std::abort();
    }
};

inline Sched &sched() {
    static thread_local Sched s;
    return s;
}

// A fiber runs threads of the block until one of them waits at a barrier: when a thread exits
// and nothing is ready to resume, the next thread starts right here, on the same stack, with no
// context switch -- a kernel without barriers costs about a function call per thread.
inline void fiber_entry(void *p) {
    Sched *s = static_cast<Sched *>(p);
    if (s->from_main) {
        s->from_main = false;
        asan_finish(nullptr, &s->main_bottom, &s->main_size);
    } else {
        asan_finish(nullptr, nullptr, nullptr);
    }
    for (;;) {
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
        try {
            s->fn(s->body);
        } catch (...) {
            if (!s->error) s->error = std::current_exception();
        }
#else
        s->fn(s->body);
#endif
        const unsigned i = s->running;
        Fiber &f = s->fibers[i];
        f.state = kDone;
        s->exited(i);
        const unsigned next = s->pick();
        if (next == Sched::kNone || !(next & Sched::kFresh)) {
            s->switch_from(i, next, true);
            die("internal error: an exited fiber was resumed");
        }
        const unsigned j = next & ~Sched::kFresh;
        Fiber &g = s->fibers[j];
        g.stack = f.stack;
        f.stack = nullptr;
        s->set_tid(g, j);
        g.state = kRunning;
        s->running = j;
        threadIdx = g.tid;
    }
}

#if !MORPHGEN_SIMT_ASM_SWITCH
inline void uc_entry() { fiber_entry(current); }
#endif

inline Sched &in_kernel(const char *what) {
    Sched *s = current;
    if (s == nullptr) {
        std::fprintf(stderr, "simt: %s called outside a kernel\n", what);
        std::abort();
    }
    return *s;
}

inline uint64_t block_barrier(int pred) {
    Sched &s = in_kernel("__syncthreads");
    Fiber &f = s.fibers[s.running];
    f.val = pred != 0;
    f.state = kBlockWait;
    const unsigned self = s.running;
    s.block_arrive(self);
    s.switch_from(self, s.pick(), false);
    return f.result;
}

inline uint64_t warp_exchange(uint8_t op, unsigned mask, uint64_t val, int arg, int width) {
    Sched &s = in_kernel("a warp intrinsic");
    Fiber &f = s.fibers[s.running];
    f.op = op;
    f.mask = mask;
    f.val = val;
    f.arg = arg;
    f.width = width;
    f.state = kWarpWait;
    const unsigned self = s.running;
    s.warp_arrive(self);
    s.switch_from(self, s.pick(), false);
    return f.result;
}

template <class T>
inline uint64_t to_bits(T v) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8,
                  "warp shuffles take values of at most 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}

template <class T>
inline T from_bits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}

template <class Body>
inline void call_body(void *body) {
    (*static_cast<Body *>(body))();
}

inline void run_launch(const Launch &L) {
    const uint64_t nblocks = uint64_t(L.grid.x) * L.grid.y * L.grid.z;
    const uint64_t gx = L.grid.x, gxy = uint64_t(L.grid.x) * L.grid.y;
    std::vector<uint64_t> perm;
    if (L.seed != 0) {
        perm.resize(nblocks);
        for (uint64_t b = 0; b < nblocks; ++b) perm[b] = b;
        permute(perm.data(), perm.size(), mix64(L.seed ^ 0xb10cb10cb10cull));
    }
    auto block_at = [&](uint64_t k) {
        const uint64_t b = perm.empty() ? k : perm[k];
        return std::make_pair(uint3{unsigned(b % gx), unsigned((b % gxy) / gx), unsigned(b / gxy)}, b);
    };
    std::exception_ptr error;
#ifdef _OPENMP
    if (nblocks > 1 && !omp_in_parallel() && omp_get_max_threads() > 1) {
        const int64_t count = int64_t(nblocks);
        std::vector<std::exception_ptr> errors(static_cast<size_t>(omp_get_max_threads()));
#pragma omp parallel
        {
            Sched &s = sched();
            s.begin_launch(L);
#pragma omp for schedule(dynamic)
            for (int64_t k = 0; k < count; ++k) {
                const auto b = block_at(uint64_t(k));
                s.run_block(b.first, b.second);
            }
            errors[size_t(omp_get_thread_num())] = s.error;
            s.error = nullptr;
        }
        for (const std::exception_ptr &e : errors)
            if (e) std::rethrow_exception(e);
        return;
    }
#endif
    Sched &s = sched();
    s.begin_launch(L);
    for (uint64_t k = 0; k < nblocks; ++k) {
        const auto b = block_at(k);
        s.run_block(b.first, b.second);
    }
    error = s.error;
    s.error = nullptr;
    if (error) std::rethrow_exception(error);
}

}  // namespace detail

// Schedule shuffling: 0 turns it off (the default, or MORPHGEN_SIMT_SHUFFLE read at first use).
inline void set_shuffle(uint64_t seed) { detail::shuffle_state().store(seed, std::memory_order_relaxed); }
inline uint64_t shuffle() { return detail::shuffle_state().load(std::memory_order_relaxed); }

// Run body() once per thread of grid x block, as the kernel launch <<<grid, block, dynamic_smem>>>.
// An invalid configuration sets the last error (cudaErrorInvalidConfiguration) and runs nothing;
// an exception thrown by a kernel thread ends that thread and is rethrown once all blocks ran.
template <class Body>
inline void launch(dim3 grid, dim3 block, size_t dynamic_smem, Body body) {
    const uint64_t threads = uint64_t(block.x) * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x == 0 ||
        grid.y == 0 || grid.z == 0 || grid.x > unsigned(INT_MAX) || grid.y > 65535 || grid.z > 65535 ||
        dynamic_smem != 0) {
        detail::fail(cudaErrorInvalidConfiguration);
        return;
    }
    if (detail::current != nullptr) detail::die("kernel launch from inside a kernel is not supported");
    detail::run_launch(detail::Launch{grid, block, &detail::call_body<Body>, &body, shuffle()});
}

}  // namespace simt

// ------------------------------------------------------------------------------------------------
// Barriers and warp intrinsics
// ------------------------------------------------------------------------------------------------

inline void __syncthreads() { simt::detail::block_barrier(0); }
inline int __syncthreads_count(int pred) { return int(uint32_t(simt::detail::block_barrier(pred))); }
inline int __syncthreads_and(int pred) {
    const uint64_t r = simt::detail::block_barrier(pred);
    return uint32_t(r) == uint32_t(r >> 32);
}
inline int __syncthreads_or(int pred) { return uint32_t(simt::detail::block_barrier(pred)) != 0; }

inline void __syncwarp(unsigned mask = 0xffffffffu) {
    simt::detail::warp_exchange(simt::detail::kOpSync, mask, 0, 0, 32);
}

// The lanes of the caller's warp that have not exited (the emulation cannot see divergence).
inline unsigned __activemask() {
    simt::detail::Sched &s = simt::detail::in_kernel("__activemask");
    return s.warps[s.running >> 5].live;
}

inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

template <class T>
inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize) {
    using namespace simt::detail;
    return from_bits<T>(warp_exchange(kOpIdx, mask, to_bits(var), srcLane, width));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    using namespace simt::detail;
    return from_bits<T>(warp_exchange(kOpUp, mask, to_bits(var), int(delta), width));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    using namespace simt::detail;
    return from_bits<T>(warp_exchange(kOpDown, mask, to_bits(var), int(delta), width));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize) {
    using namespace simt::detail;
    return from_bits<T>(warp_exchange(kOpXor, mask, to_bits(var), laneMask, width));
}

inline unsigned __ballot_sync(unsigned mask, int pred) {
    return unsigned(simt::detail::warp_exchange(simt::detail::kOpBallot, mask, pred != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int pred) {
    return int(simt::detail::warp_exchange(simt::detail::kOpAny, mask, pred != 0, 0, 32));
}
inline int __all_sync(unsigned mask, int pred) {
    return int(simt::detail::warp_exchange(simt::detail::kOpAll, mask, pred != 0, 0, 32));
}

// ------------------------------------------------------------------------------------------------
// Atomics (relaxed, like CUDA's; real atomics because blocks run on several OS threads)
// ------------------------------------------------------------------------------------------------

namespace simt {
namespace detail {
template <class T, class F>
inline T atomic_update(T *address, F f) {
    T old;
    __atomic_load(address, &old, __ATOMIC_RELAXED);
    T desired = f(old);
    while (!__atomic_compare_exchange(address, &old, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        desired = f(old);
    return old;
}
}  // namespace detail
}  // namespace simt

#define MORPHGEN_SIMT_INT_ATOMICS(T)                                                                 \
    inline T atomicAdd(T *a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }           \
    inline T atomicSub(T *a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }           \
    inline T atomicExch(T *a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }         \
    inline T atomicAnd(T *a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }           \
    inline T atomicOr(T *a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }             \
    inline T atomicXor(T *a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }           \
    inline T atomicCAS(T *a, T compare, T v) {                                                     \
        __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);    \
        return compare;                                                                            \
    }
MORPHGEN_SIMT_INT_ATOMICS(int)
MORPHGEN_SIMT_INT_ATOMICS(unsigned)
MORPHGEN_SIMT_INT_ATOMICS(unsigned long long)
#undef MORPHGEN_SIMT_INT_ATOMICS

#define MORPHGEN_SIMT_MINMAX_ATOMICS(T)                                                              \
    inline T atomicMax(T *a, T v) {                                                                \
        return simt::detail::atomic_update(a, [v](T old) { return old < v ? v : old; });           \
    }                                                                                              \
    inline T atomicMin(T *a, T v) {                                                                \
        return simt::detail::atomic_update(a, [v](T old) { return v < old ? v : old; });           \
    }
MORPHGEN_SIMT_MINMAX_ATOMICS(int)
MORPHGEN_SIMT_MINMAX_ATOMICS(unsigned)
MORPHGEN_SIMT_MINMAX_ATOMICS(long long)
MORPHGEN_SIMT_MINMAX_ATOMICS(unsigned long long)
#undef MORPHGEN_SIMT_MINMAX_ATOMICS

inline float atomicAdd(float *a, float v) {
    return simt::detail::atomic_update(a, [v](float old) { return old + v; });
}
inline double atomicAdd(double *a, double v) {
    return simt::detail::atomic_update(a, [v](double old) { return old + v; });
}
inline float atomicExch(float *a, float v) {
    float old;
    __atomic_exchange(a, &v, &old, __ATOMIC_RELAXED);
    return old;
}
// ((old >= v) ? 0 : old + 1) and ((old == 0 || old > v) ? v : old - 1), as CUDA.
inline unsigned atomicInc(unsigned *a, unsigned v) {
    return simt::detail::atomic_update(a, [v](unsigned old) { return old >= v ? 0u : old + 1; });
}
inline unsigned atomicDec(unsigned *a, unsigned v) {
    return simt::detail::atomic_update(a, [v](unsigned old) { return (old == 0 || old > v) ? v : old - 1; });
}

// ------------------------------------------------------------------------------------------------
// Math and bit intrinsics.  glibc's <math.h> declares __expf, __logf, __powf, ... itself (and a
// C23 library may declare rsqrtf), so those are macros onto simt::intrin rather than definitions.
// ------------------------------------------------------------------------------------------------

namespace simt {
namespace intrin {
inline float expf_(float x) { return std::exp(x); }
inline float logf_(float x) { return std::log(x); }
inline float log2f_(float x) { return std::log2(x); }
inline float log10f_(float x) { return std::log10(x); }
inline float exp10f_(float x) { return std::pow(10.0f, x); }
inline float powf_(float x, float y) { return std::pow(x, y); }
inline float sinf_(float x) { return std::sin(x); }
inline float cosf_(float x) { return std::cos(x); }
inline float tanf_(float x) { return std::tan(x); }
inline float rsqrtf_(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt_(double x) { return 1.0 / std::sqrt(x); }
}  // namespace intrin
}  // namespace simt

#define __expf(x) ::simt::intrin::expf_(x)
#define __logf(x) ::simt::intrin::logf_(x)
#define __log2f(x) ::simt::intrin::log2f_(x)
#define __log10f(x) ::simt::intrin::log10f_(x)
#define __exp10f(x) ::simt::intrin::exp10f_(x)
#define __powf(x, y) ::simt::intrin::powf_(x, y)
#define __sinf(x) ::simt::intrin::sinf_(x)
#define __cosf(x) ::simt::intrin::cosf_(x)
#define __tanf(x) ::simt::intrin::tanf_(x)
#define rsqrtf(x) ::simt::intrin::rsqrtf_(x)
#define rsqrt(x) ::simt::intrin::rsqrt_(x)

inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x == x ? x : 0.0f)); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
// The product rounded to float, never contracted into an FMA with a later add (as on the device).
inline float __fmul_rn(float a, float b) {
    float r = a * b;
    __asm__("" : "+x"(r));
    return r;
}

template <class T>
inline T __ldg(const T *p) {
    return *p;
}
template <class T>
inline T __ldcg(const T *p) {
    return *p;
}

inline int __float_as_int(float x) {
    int i;
    std::memcpy(&i, &x, sizeof i);
    return i;
}
inline unsigned __float_as_uint(float x) {
    unsigned u;
    std::memcpy(&u, &x, sizeof u);
    return u;
}
inline float __int_as_float(int i) {
    float x;
    std::memcpy(&x, &i, sizeof x);
    return x;
}
inline float __uint_as_float(unsigned u) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}
inline long long __double_as_longlong(double x) {
    long long i;
    std::memcpy(&i, &x, sizeof i);
    return i;
}
inline double __longlong_as_double(long long i) {
    double x;
    std::memcpy(&x, &i, sizeof x);
    return x;
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
    return (x >> 16) | (x << 16);
}

#pragma GCC visibility pop

#endif  // MORPHGEN_CUDA_SIMT_H
