// Device memory of the CUDA backend: the buffers a generated model declares (mg::Buffer,
// mg::IndexBuffer, with the members of runtime/host_buffer.h so that the one ABI template
// serves every backend) and DeviceArray for the graph and inputs uploaded once at prepare.
// All data movement between host and device goes through these types.
#ifndef MORPHGEN_CUDA_MEMORY_CUH
#define MORPHGEN_CUDA_MEMORY_CUH

#include <cstdint>
#include <string>
#include <vector>

#include "context.h"
#include "device.cuh"

namespace mg {

namespace cuda {

// An owned device array of T; uploaded from the host in one copy.
template <class T>
class DeviceArray {
  public:
    DeviceArray() = default;
    DeviceArray(const DeviceArray &) = delete;
    DeviceArray &operator=(const DeviceArray &) = delete;
    ~DeviceArray() { reset(); }
    void allocate(int64_t n) {
        reset();
        if (n <= 0) return;
        void *p = nullptr;
        const cudaError_t status = cudaMalloc(&p, sizeof(T) * size_t(n));
        if (status != cudaSuccess)
            throw Error("out of GPU memory allocating " + std::to_string(sizeof(T) * size_t(n)) + " bytes (" +
                        cudaGetErrorString(status) + ")");
        data_ = static_cast<T *>(p);
        size_ = n;
    }
    // A device copy of host[0..n); nullptr host: left empty (an optional array).
    const T *upload(const T *host, int64_t n, const char *what) {
        if (!host) {
            reset();
            return nullptr;
        }
        allocate(n);
        if (n > 0) check(cudaMemcpy(data_, host, sizeof(T) * size_t(n), cudaMemcpyHostToDevice), what);
        return data_;
    }
    const T *upload(const std::vector<T> &host, const char *what) {
        return upload(host.data(), int64_t(host.size()), what);
    }
    std::vector<T> download() const {
        std::vector<T> out(static_cast<size_t>(size_));
        if (size_) check(cudaMemcpy(out.data(), data_, sizeof(T) * size_t(size_), cudaMemcpyDeviceToHost), "download");
        return out;
    }
    void reset() {
        if (data_) {
            cudaFree(data_);
            ++frees();
        }
        data_ = nullptr;
        size_ = 0;
    }
    T *data() const { return data_; }
    int64_t size() const { return size_; }
    int64_t bytes() const { return size_ * int64_t(sizeof(T)); }

  private:
    T *data_ = nullptr;
    int64_t size_ = 0;
};

}  // namespace cuda

// A float buffer in device memory, zeroed at allocation; `data` is a device pointer.
struct Buffer {
    float *data = nullptr;
    int64_t size = 0;
    Buffer() = default;
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    ~Buffer() {
        if (data) {
            cudaFree(data);
            ++cuda::frees();
        }
    }
    void allocate(int64_t n, int64_t &accounted) {
        release(accounted);
        if (n == 0) return;
        void *p = nullptr;
        const size_t bytes = size_t(n) * sizeof(float);
        const cudaError_t status = cudaMalloc(&p, bytes);
        if (status != cudaSuccess)
            throw Error("out of GPU memory allocating " + std::to_string(bytes) + " bytes (" +
                        cudaGetErrorString(status) + ")");
        data = static_cast<float *>(p);
        size = n;
        cuda::check(cudaMemset(data, 0, bytes), "zeroing a new buffer");
        accounted += int64_t(bytes);
    }
    void copy_to_host(float *out, int64_t n = -1) const {
        n = n < 0 ? size : n;
        if (n) cuda::check(cudaMemcpy(out, data, sizeof(float) * size_t(n), cudaMemcpyDeviceToHost), "copy to host");
    }
    void copy_from_host(const float *in) {
        if (size) cuda::check(cudaMemcpy(data, in, sizeof(float) * size_t(size), cudaMemcpyHostToDevice),
                              "copy to the device");
    }
    std::vector<float> host_copy() const {
        std::vector<float> out(static_cast<size_t>(size));
        copy_to_host(out.data());
        return out;
    }
    float first() const {
        float v = 0.f;
        copy_to_host(&v, 1);
        return v;
    }
    void release(int64_t &accounted) {
        if (data) {
            accounted -= size * int64_t(sizeof(float));
            cudaFree(data);
            ++cuda::frees();
        }
        data = nullptr;
        size = 0;
    }
};

// Integer buffer in device memory (argmax indices of max aggregation), filled with -1.
struct IndexBuffer {
    cuda::DeviceArray<int64_t> data;
    void allocate(int64_t n, int64_t &accounted) {
        accounted -= data.bytes();
        data.allocate(n);
        if (n) cuda::check(cudaMemset(data.data(), 0xff, sizeof(int64_t) * size_t(n)), "filling an index buffer");
        accounted += data.bytes();
    }
    int64_t *ptr() { return data.data(); }
};

}  // namespace mg
#endif
