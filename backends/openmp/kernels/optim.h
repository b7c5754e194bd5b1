// Optimizers with PyTorch semantics (torch.optim.Adam, AdamW, SGD; amsgrad/maximize not
// offered), vectorised over one flat parameter tensor.
//
// The caller owns the state buffers (zero-initialised before the first step) and the step
// counter: `step` is 1 on the first update, as in PyTorch after its increment.  Hyper-parameters
// are doubles and every scalar coefficient (1 - beta2, lr / bias_correction1, ...) is formed in
// double and only then rounded to float, as PyTorch does with its Python-float hyper-parameters;
// forming 1 - beta2 in float would already differ by 1e-5 relative.
#pragma once

#include <cmath>
#include <cstdint>

#include "common.h"

namespace mg {

struct AdamConfig {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.0;
};

struct SgdConfig {
    double lr = 1e-2;
    double momentum = 0.0;
    double dampening = 0.0;
    double weight_decay = 0.0;
    bool nesterov = false;
};

namespace optim_detail {
inline constexpr int64_t kParallelMin = 1 << 15;

// decoupled: AdamW's p *= 1 - lr*wd before the moment update; otherwise Adam's grad += wd*p.
inline void adam_like(float* p, const float* grad, float* m, float* v, int64_t n, const AdamConfig& c,
                      int64_t step, bool decoupled) {
    const double bc1 = 1.0 - std::pow(c.beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(c.beta2, static_cast<double>(step));
    const float step_size = static_cast<float>(c.lr / bc1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    const float w1 = static_cast<float>(1.0 - c.beta1);  // lerp weight of exp_avg toward grad
    const float b2 = static_cast<float>(c.beta2), w2 = static_cast<float>(1.0 - c.beta2);
    const float eps = static_cast<float>(c.eps);
    const float coupled_wd = decoupled ? 0.0f : static_cast<float>(c.weight_decay);
    const float decay = decoupled ? static_cast<float>(1.0 - c.lr * c.weight_decay) : 1.0f;
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
    const float wd = static_cast<float>(c.weight_decay), mom = static_cast<float>(c.momentum);
    const float keep = static_cast<float>(1.0 - c.dampening), lr = static_cast<float>(c.lr);
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
