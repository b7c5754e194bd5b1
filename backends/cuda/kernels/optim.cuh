// Optimizer steps on the device, one thread per weight (torch.optim semantics, as
// backends/openmp/kernels/optim.h): Adam, AdamW, SGD with momentum.
#ifndef MORPHGEN_CUDA_OPTIM_CUH
#define MORPHGEN_CUDA_OPTIM_CUH

#include <cmath>
#include <cstdint>

#include "../device.cuh"

namespace mg {
namespace cuda {

struct AdamOp {
    float *p, *m, *v;
    const float *g;
    float step_size, bc2_sqrt, w1, b2, w2, eps, coupled_wd, decay;   // step_size, bc2_sqrt: at `step`
    // For a replayed CUDA graph, whose arguments hold the captured step: the bias corrections of
    // a later step are derived here, in double as on the host (ops.cuh: adam_op).
    double lr, beta1, beta2;
    int64_t step;
    __device__ AdamOp at_this_epoch() const {
        AdamOp op = *this;
        if (const int64_t later = epochs_since_capture()) {
            const double t = double(step + later);
            op.step_size = float(lr / (1.0 - pow(beta1, t)));
            op.bc2_sqrt = float(sqrt(1.0 - pow(beta2, t)));
            op.step = step + later;
        }
        return op;
    }
    // A table's row-wise step (adam_rows): only the rows flagged here have a gradient in g (the
    // looked-up rows of an embedding table); the others step with a zero gradient, unread.
    const uint8_t *row_has_grad = nullptr;
    int64_t width = 1;
    __device__ void operator()(int64_t i) const {
        float pi = p[i] * decay;
        const float raw = row_has_grad && !row_has_grad[i / width] ? 0.f : g[i];
        const float gi = raw + coupled_wd * p[i];
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
    int64_t step;   // the first (step 1) starts the momentum buffer
    __device__ SgdOp at_this_epoch() const {
        SgdOp op = *this;
        op.step += epochs_since_capture();
        return op;
    }
    __device__ void operator()(int64_t i) const {
        const bool first = step <= 1;
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
