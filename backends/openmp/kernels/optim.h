// Optimizers with PyTorch semantics (torch.optim.Adam, AdamW, SGD; amsgrad/maximize not
// offered), vectorised over one flat parameter tensor.
//
// The caller owns the state buffers (zero-initialised before the first step) and the step
// counter: `step` is 1 on the first update, as in PyTorch after its increment.  Scalar
// coefficients (bias corrections) are computed in double like PyTorch's Python-side floats.
#pragma once

#include <cmath>
#include <cstdint>

#include "common.h"

namespace mg {

struct AdamConfig {
    float lr = 1e-3f;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float eps = 1e-8f;
    float weight_decay = 0.0f;
};

struct SgdConfig {
    float lr = 1e-2f;
    float momentum = 0.0f;
    float dampening = 0.0f;
    float weight_decay = 0.0f;
    bool nesterov = false;
};

namespace optim_detail {
inline constexpr int64_t kParallelMin = 1 << 15;

// decoupled: AdamW's p *= 1 - lr*wd before the moment update; otherwise Adam's grad += wd*p.
inline void adam_like(float* p, const float* grad, float* m, float* v, int64_t n, const AdamConfig& c,
                      int64_t step, bool decoupled) {
    const double bc1 = 1.0 - std::pow(static_cast<double>(c.beta1), static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(c.beta2), static_cast<double>(step));
    const float step_size = static_cast<float>(c.lr / bc1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    const float w1 = 1.0f - c.beta1;  // lerp weight of exp_avg toward grad
    const float b2 = c.beta2, w2 = 1.0f - c.beta2, eps = c.eps;
    const float coupled_wd = decoupled ? 0.0f : c.weight_decay;
    const float decay = decoupled ? static_cast<float>(1.0 - static_cast<double>(c.lr) * c.weight_decay) : 1.0f;
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        float pi = p[i] * decay;
        const float g = grad[i] + coupled_wd * p[i];
        // torch.lerp with weight < 0.5: m + w * (g - m)
        const float mi = m[i] + w1 * (g - m[i]);
        const float vi = b2 * v[i] + w2 * g * g;
        const float denom = std::sqrt(vi) / bc2_sqrt + eps;
        pi -= step_size * (mi / denom);  // addcdiv: p + value * (m / denom)
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
    }
}
}  // namespace optim_detail

// torch.optim.Adam: grad += wd * p; m, v moments; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
inline void adam_step(float* p, const float* grad, float* m, float* v, int64_t n, const AdamConfig& cfg,
                      int64_t step) {
    optim_detail::adam_like(p, grad, m, v, n, cfg, step, false);
}

// torch.optim.AdamW: p *= 1 - lr * wd (decoupled), then the Adam update without weight decay.
inline void adamw_step(float* p, const float* grad, float* m, float* v, int64_t n, const AdamConfig& cfg,
                       int64_t step) {
    optim_detail::adam_like(p, grad, m, v, n, cfg, step, true);
}

// torch.optim.SGD: d = grad + wd * p; with momentum, buf = d on the first step and
// buf = momentum * buf + (1 - dampening) * d afterwards; d = nesterov ? d + momentum * buf : buf;
// p -= lr * d.  `buf` may be nullptr when momentum == 0.
inline void sgd_step(float* p, const float* grad, float* buf, int64_t n, const SgdConfig& c, int64_t step) {
    const float wd = c.weight_decay, mom = c.momentum, keep = 1.0f - c.dampening, lr = c.lr;
    const bool first = step <= 1;
    if (mom == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n > optim_detail::kParallelMin)
        for (int64_t i = 0; i < n; ++i) p[i] -= lr * (grad[i] + wd * p[i]);
        return;
    }
    const bool nesterov = c.nesterov;
#pragma omp parallel for simd schedule(static) if (n > optim_detail::kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        const float d = grad[i] + wd * p[i];
        const float b = first ? d : mom * buf[i] + keep * d;
        buf[i] = b;
        p[i] -= lr * (nesterov ? d + mom * b : b);
    }
}

}  // namespace mg
