// Two translation units that both include device.cuh (with simt.h) link into one program: no
// symbol of the emulation may be defined twice.  This one holds a kernel with shared memory and
// a shuffle; link_b.cu holds main.
#include "simt_case.h"

__global__ void scale_by_warp_max(float *x, int n) {
    __shared__ float tile[256];
    const unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    tile[t] = i < unsigned(n) ? x[i] : 0.0f;
    __syncthreads();
    float m = tile[t];
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (i < unsigned(n)) x[i] = tile[t] / m;
}

float run_a(int n) {
    std::vector<float> h(size_t(n), 1.0f);
    for (int i = 0; i < n; ++i) h[size_t(i)] = float(1 + i % 32);
    float *d = simt_case::to_device(h);
    mg::cuda::launch("scale_by_warp_max", scale_by_warp_max, dim3((unsigned(n) + 255) / 256), dim3(256), d, n);
    const std::vector<float> out = simt_case::to_host(d, size_t(n));
    cudaFree(d);
    float s = 0.0f;
    for (float v : out) s += v;
    return s;
}
