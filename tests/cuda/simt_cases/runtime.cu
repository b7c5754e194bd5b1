// Launch configuration errors, the runtime API subset, and a deadlock.
//
//   runtime invalid_launch   bad launches through mg::cuda::launch, each must throw DeviceError
//   runtime api              memory, streams, events, devices; prints "name value" lines
//   runtime deadlock         a divergent barrier; prints "finished" only if the launch returned
//   runtime graph            stream capture: work recorded, not run, then replayed; calls that
//                            would synchronise, and work on the legacy stream, end the capture
#include <cstdint>

#include "simt_case.h"

__global__ void fill(int *out, int value) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = value + int(i);
}

// Threads 0-15 wait at __syncthreads while threads 16-31 of the same warp wait at __syncwarp for
// them (and the second warp runs to its end).  Undefined on a GPU (it hangs); the emulation must
// report the deadlock and abort.
__global__ void divergent_barrier(int *out) {
    if (threadIdx.x < 16) __syncthreads();
    else __syncwarp();
    out[threadIdx.x] = 1;
}

static int deadlock() {
    int *out = simt_case::device_zeros<int>(64);
    mg::cuda::launch("divergent_barrier", divergent_barrier, dim3(1), dim3(64), out);
    mg::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::printf("finished\n");
    cudaFree(out);
    return 0;
}

static void expect_throw(const char *name, dim3 grid, dim3 block, int *out) {
    try {
        mg::cuda::launch(name, fill, grid, block, out, 0);
        std::printf("no error: %s\n", name);
    } catch (const mg::cuda::DeviceError &e) {
        std::printf("caught: %s\n", e.what());
    }
    std::printf("last error after: %s\n", cudaGetErrorName(cudaGetLastError()));
}

static int invalid_launch() {
    int *out = simt_case::device_zeros<int>(2048);
    expect_throw("planted_too_many_threads", dim3(1), dim3(1025), out);
    expect_throw("planted_block_z", dim3(1), dim3(1, 1, 65), out);
    expect_throw("planted_grid_y", dim3(1, 65536), dim3(1), out);
    // A good launch still works after the failed ones.
    mg::cuda::launch("fill", fill, dim3(2), dim3(1024), out, 5);
    const std::vector<int> host = simt_case::to_host(out, 2048);
    bool ok = true;
    for (int i = 0; i < 2048; ++i) ok = ok && host[size_t(i)] == 5 + i;
    std::printf("good launch %s\n", ok ? "ok" : "WRONG");
    cudaFree(out);
    return 0;
}

static int api() {
    int count = -1, device = -1;
    const cudaError_t count_status = cudaGetDeviceCount(&count);
    std::printf("device_count %s %d\n", cudaGetErrorName(count_status), count);
    std::printf("set_device_0 %s\n", cudaGetErrorName(cudaSetDevice(0)));
    std::printf("set_device_1 %s\n", cudaGetErrorName(cudaSetDevice(1)));
    std::printf("last_error %s\n", cudaGetErrorName(cudaPeekAtLastError()));
    std::printf("last_error %s\n", cudaGetErrorName(cudaGetLastError()));
    std::printf("last_error %s\n", cudaGetErrorName(cudaGetLastError()));
    const cudaError_t device_status = cudaGetDevice(&device);
    std::printf("get_device %s %d\n", cudaGetErrorName(device_status), device);
    cudaDeviceProp prop;
    mg::cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::printf("name %s\n", prop.name);
    std::printf("warp_size %d\n", prop.warpSize);
    std::printf("max_threads %d\n", prop.maxThreadsPerBlock);
    std::printf("sm_count_positive %d\n", int(prop.multiProcessorCount > 0));
    std::printf("shared_per_block_positive %d\n", int(prop.sharedMemPerBlock > 0));
    std::printf("props_bad_device %s\n", cudaGetErrorName(cudaGetDeviceProperties(&prop, 3)));
    cudaGetLastError();

    float *a = nullptr;
    mg::cuda::check(cudaMalloc(&a, 1000 * sizeof(float)), "cudaMalloc");
    std::printf("aligned %d\n", int(reinterpret_cast<std::uintptr_t>(a) % 256 == 0));
    std::printf("malloc_null %s\n", cudaGetErrorName(cudaMalloc(static_cast<void **>(nullptr), 16)));
    std::printf("error_string %s\n", cudaGetErrorString(cudaGetLastError()));
    void *z = &count;
    const cudaError_t zero_status = cudaMalloc(&z, 0);
    std::printf("malloc_zero %s %d\n", cudaGetErrorName(zero_status), int(z == nullptr));

    std::vector<float> h(1000), back(1000, -1.0f);
    for (int i = 0; i < 1000; ++i) h[size_t(i)] = 0.5f * float(i);
    cudaStream_t stream;
    mg::cuda::check(cudaStreamCreate(&stream), "cudaStreamCreate");
    mg::cuda::check(cudaMemsetAsync(a, 0, 1000 * sizeof(float), stream), "cudaMemsetAsync");
    mg::cuda::check(cudaMemcpyAsync(a, h.data(), 500 * sizeof(float), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    mg::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    float *b = nullptr;
    mg::cuda::check(cudaMalloc(&b, 1000 * sizeof(float)), "cudaMalloc");
    mg::cuda::check(cudaMemcpy(b, a, 1000 * sizeof(float), cudaMemcpyDeviceToDevice), "cudaMemcpy");
    mg::cuda::check(cudaMemcpy(back.data(), b, 1000 * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    bool ok = true;
    for (int i = 0; i < 1000; ++i) ok = ok && back[size_t(i)] == (i < 500 ? h[size_t(i)] : 0.0f);
    std::printf("copies %s\n", ok ? "ok" : "WRONG");
    mg::cuda::check(cudaStreamDestroy(stream), "cudaStreamDestroy");

    cudaEvent_t start, stop;
    mg::cuda::check(cudaEventCreate(&start), "cudaEventCreate");
    mg::cuda::check(cudaEventCreate(&stop), "cudaEventCreate");
    float ms = -1.0f;
    std::printf("elapsed_unrecorded %s\n", cudaGetErrorName(cudaEventElapsedTime(&ms, start, stop)));
    cudaGetLastError();
    mg::cuda::check(cudaEventRecord(start), "cudaEventRecord");
    int *out = simt_case::device_zeros<int>(256 * 64);
    mg::cuda::launch("fill", fill, dim3(64), dim3(256), out, 1);
    mg::cuda::check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    mg::cuda::check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    mg::cuda::check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    std::printf("elapsed_nonnegative %d\n", int(ms >= 0.0f));
    mg::cuda::check(cudaEventDestroy(start), "cudaEventDestroy");
    mg::cuda::check(cudaEventDestroy(stop), "cudaEventDestroy");
    mg::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    cudaFree(a);
    cudaFree(b);
    cudaFree(out);
    std::printf("final_error %s\n", cudaGetErrorName(cudaGetLastError()));
    return 0;
}

__global__ void count_up(int *counter) {
    if (threadIdx.x == 0) *counter += 1;
}

static int graph() {
    cudaStream_t s = mg::cuda::stream();
    int *out = simt_case::device_zeros<int>(64), *counter = simt_case::device_zeros<int>(1);
    cudaGraph_t g = nullptr;
    mg::cuda::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    mg::cuda::check(cudaMemsetAsync(out, 0, 64 * sizeof(int), s), "cudaMemsetAsync");
    mg::cuda::launch("fill", fill, dim3(2), dim3(32), out, 7);
    mg::cuda::launch("count_up", count_up, dim3(1), dim3(32), counter);
    mg::cuda::check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
    std::printf("captured_ran_nothing %d\n", int(simt_case::to_host(out, 64)[5] == 0 && simt_case::to_host(counter, 1)[0] == 0));
    cudaGraphExec_t exec = nullptr;
    mg::cuda::check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
    mg::cuda::check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    mg::cuda::check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    mg::cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    std::printf("replays %d fill %d\n", simt_case::to_host(counter, 1)[0], simt_case::to_host(out, 64)[5]);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);

    int host = 0;   // a synchronous copy inside a capture is refused and spoils the capture
    mg::cuda::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    mg::cuda::launch("count_up", count_up, dim3(1), dim3(32), counter);
    std::printf("sync_copy %s\n", cudaGetErrorName(cudaMemcpy(&host, counter, sizeof(int), cudaMemcpyDeviceToHost)));
    g = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(s, &g);
    std::printf("end_after_sync_copy %s graph %d\n", cudaGetErrorName(ended), int(g != nullptr));
    cudaGetLastError();

    // work on the legacy stream while another stream is captured: refused, the capture spoilt
    mg::cuda::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    std::printf("legacy_stream %s\n", cudaGetErrorName(cudaMemsetAsync(out, 0, sizeof(int), nullptr)));
    g = nullptr;
    std::printf("end_after_legacy %s graph %d\n", cudaGetErrorName(cudaStreamEndCapture(s, &g)), int(g != nullptr));
    cudaGetLastError();
    std::printf("counter_after %d\n", simt_case::to_host(counter, 1)[0]);
    cudaFree(out);
    cudaFree(counter);
    return 0;
}

int main(int argc, char **argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "graph") return graph();
    if (mode == "invalid_launch") return invalid_launch();
    if (mode == "api") return api();
    if (mode == "deadlock") return deadlock();
    simt_case::fail("usage: runtime invalid_launch|api|deadlock|graph");
}
