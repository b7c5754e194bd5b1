// Host-side helpers shared by the SIMT test cases: binary array files in and out, device buffers,
// and the shuffle seed (only the emulation has one).  The cases are plain CUDA programs: under
// nvcc they build against the CUDA runtime, under g++ against backends/cuda/simt.h.
#ifndef MORPHGEN_TESTS_SIMT_CASE_H
#define MORPHGEN_TESTS_SIMT_CASE_H

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "device.cuh"

namespace simt_case {

[[noreturn]] inline void fail(const std::string &what) {
    std::fprintf(stderr, "case error: %s\n", what.c_str());
    std::exit(2);
}

template <class T>
std::vector<T> read_array(const char *path) {
    FILE *f = std::fopen(path, "rb");
    if (f == nullptr) fail(std::string("cannot open ") + path);
    std::fseek(f, 0, SEEK_END);
    const long bytes = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    std::vector<T> v(size_t(bytes) / sizeof(T));
    if (!v.empty() && std::fread(v.data(), sizeof(T), v.size(), f) != v.size()) fail("short read");
    std::fclose(f);
    return v;
}

template <class T>
void write_array(const char *path, const std::vector<T> &v) {
    FILE *f = std::fopen(path, "wb");
    if (f == nullptr) fail(std::string("cannot create ") + path);
    if (!v.empty() && std::fwrite(v.data(), sizeof(T), v.size(), f) != v.size()) fail("short write");
    std::fclose(f);
}

template <class T>
T *to_device(const std::vector<T> &host) {
    T *d = nullptr;
    mg::cuda::check(cudaMalloc(&d, host.size() * sizeof(T) + 1), "cudaMalloc");
    mg::cuda::check(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
    return d;
}

template <class T>
T *device_zeros(size_t n) {
    T *d = nullptr;
    mg::cuda::check(cudaMalloc(&d, n * sizeof(T) + 1), "cudaMalloc");
    mg::cuda::check(cudaMemset(d, 0, n * sizeof(T) + 1), "cudaMemset");
    return d;
}

template <class T>
std::vector<T> to_host(const T *d, size_t n) {
    std::vector<T> host(n);
    mg::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    mg::cuda::check(cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return host;
}

// Schedule shuffling of the emulation (a no-op on a GPU).
inline void set_shuffle(unsigned long long seed) {
#ifdef MORPHGEN_SIMT_EMULATION
    simt::set_shuffle(seed);
#else
    (void)seed;
#endif
}

// "BX" or "BXxBY" or "BXxBYxBZ".
inline dim3 parse_dim(const char *text) {
    unsigned v[3] = {1, 1, 1};
    int k = 0;
    for (const char *p = text; *p != '\0' && k < 3; ++k) {
        char *end = nullptr;
        v[k] = unsigned(std::strtoul(p, &end, 10));
        if (end == p) fail(std::string("bad dimension ") + text);
        p = *end == 'x' ? end + 1 : end;
    }
    return dim3(v[0], v[1], v[2]);
}

}  // namespace simt_case
#endif
