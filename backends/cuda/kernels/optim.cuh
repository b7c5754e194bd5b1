// Optimizer steps on the device, one thread per weight (torch.optim semantics, as
// backends/openmp/kernels/optim.h): Adam, AdamW, SGD with momentum.
#ifndef MORPHGEN_CUDA_OPTIM_CUH
#define MORPHGEN_CUDA_OPTIM_CUH

#include <cstdint>

#include "../device.cuh"

namespace mg {
namespace cuda {

struct AdamOp {
    float *p, *m, *v;
    const float *g;
    float step_size, bc2_sqrt, w1, b2, w2, eps, coupled_wd, decay;
    __device__ void operator()(int64_t i) const {
        float pi = p[i] * decay;
        const float gi = g[i] + coupled_wd * p[i];
        const float mi = m[i] + w1 * (gi - m[i]);
        const float vi = b2 * v[i] + w2 * gi * gi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        pi -= step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
    }
};

struct SgdOp {
    float *p, *buf;
    const float *g;
    float lr, wd, mom;
    bool first;
    __device__ void operator()(int64_t i) const {
        const float d = g[i] + wd * p[i];
        if (mom == 0.f) {
            p[i] -= lr * d;
            return;
        }
        const float b = first ? d : mom * buf[i] + d;
        buf[i] = b;
        p[i] -= lr * b;
    }
};

}  // namespace cuda
}  // namespace mg
#endif
