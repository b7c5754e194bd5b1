// Optimizers with PyTorch semantics (torch.optim.Adam, AdamW, SGD; amsgrad/maximize not
// offered), vectorised over one flat parameter tensor.
//
// The caller owns the state buffers (zero-initialised before the first step) and the step
// counter: `step` is 1 on the first update, as in PyTorch after its increment.  Hyper-parameters
// are doubles and every scalar coefficient (1 - beta2, lr / bias_correction1, ...) is formed in
// double and only then rounded to float, as PyTorch does with its Python-float hyper-parameters;
// forming 1 - beta2 in float would already differ by 1e-5 relative.
#pragma once

#include <algorithm>
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

// The coefficients of one Adam step, each formed in double and rounded once (see above).
struct AdamStep {
    float step_size, bc2_sqrt, w1, b2, w2, eps, coupled_wd, decay;
    AdamStep(const AdamConfig& c, int64_t step, bool decoupled) {
        const double bc1 = 1.0 - std::pow(c.beta1, static_cast<double>(step));
        const double bc2 = 1.0 - std::pow(c.beta2, static_cast<double>(step));
        step_size = static_cast<float>(c.lr / bc1);
        bc2_sqrt = static_cast<float>(std::sqrt(bc2));
        w1 = static_cast<float>(1.0 - c.beta1);  // lerp weight of exp_avg toward grad
        b2 = static_cast<float>(c.beta2);
        w2 = static_cast<float>(1.0 - c.beta2);
        eps = static_cast<float>(c.eps);
        coupled_wd = decoupled ? 0.0f : static_cast<float>(c.weight_decay);
        decay = decoupled ? static_cast<float>(1.0 - c.lr * c.weight_decay) : 1.0f;
    }
};

// Elements [0, n) of one step, in the calling thread.  ZERO_GRAD: the gradient is zero there
// (rows an embedding lookup did not read) and `grad` is not read.
// decoupled: AdamW's p *= 1 - lr*wd before the moment update; otherwise Adam's grad += wd*p.
template <bool ZERO_GRAD>
MG_INLINE void adam_span(float* p, const float* grad, float* m, float* v, int64_t n, const AdamStep& k) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
        float pi = p[i] * k.decay;
        const float g = (ZERO_GRAD ? 0.0f : grad[i]) + k.coupled_wd * p[i];
        // torch.lerp with weight < 0.5: m + w * (g - m)
        const float mi = m[i] + k.w1 * (g - m[i]);
        const float vi = k.b2 * v[i] + k.w2 * g * g;
        const float denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
        pi -= k.step_size * (mi / denom);  // addcdiv: p + value * (m / denom)
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
    }
}

inline void adam_like(float* p, const float* grad, float* m, float* v, int64_t n, const AdamConfig& c,
                      int64_t step, bool decoupled) {
    const AdamStep k(c, step, decoupled);
    constexpr int64_t kChunk = 4096;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
    for (int64_t c0 = 0; c0 < chunks; ++c0) {
        const int64_t b = c0 * kChunk, e = std::min(n, b + kChunk);
        adam_span<false>(p + b, grad + b, m + b, v + b, e - b, k);
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

// Adam / AdamW on a [rows, width] table whose gradient is zero except in rows keys[0 .. num_keys)
// (increasing): those rows are read from `grad`, no other row of it is.  The same numbers as
// adam_step on the gradient with every other row zeroed, without writing or reading the zeros
// (an embedding table's gradient: R-GCN's per-relation weights on featureless input).
inline void adam_rows_step(float* p, const float* grad, float* m, float* v, int64_t rows, int64_t width,
                           const int64_t* keys, int64_t num_keys, const AdamConfig& cfg, int64_t step, bool decoupled) {
    const optim_detail::AdamStep k(cfg, step, decoupled);
#pragma omp parallel if (rows * width > optim_detail::kParallelMin)
    {
        const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
        const int64_t r0 = rows * id / nt, r1 = rows * (id + 1) / nt;
        int64_t next = std::lower_bound(keys, keys + num_keys, r0) - keys;   // first key row at or after r0
        for (int64_t r = r0; r < r1;) {
            // rows up to the next key row have no gradient; then a run of consecutive key rows
            const int64_t gap_end = next < num_keys ? std::min(keys[next], r1) : r1;
            optim_detail::adam_span<true>(p + r * width, nullptr, m + r * width, v + r * width, (gap_end - r) * width, k);
            int64_t run_end = gap_end;
            while (run_end < r1 && next < num_keys && keys[next] == run_end) ++next, ++run_end;
            const int64_t b = gap_end * width;
            optim_detail::adam_span<false>(p + b, grad + b, m + b, v + b, (run_end - gap_end) * width, k);
            r = run_end;
        }
    }
}

// Adam / AdamW on the listed rows of a [*, width] table only (no row twice): row rows[i] with
// its gradient where has_grad[i], with a zero gradient elsewhere; no other row is read or
// written.  Each listed row gets adam_step's numbers (the MPI backend's share of a table whose
// other rows other ranks step: mpi/distributed.h, TableRows).
// With `packed`, p, grad, m and v hold the listed rows only, row i of them being table row
// rows[i] (the MPI backend's packed share of a table).
inline void adam_listed_rows_step(float* p, const float* grad, float* m, float* v, int64_t width, const int64_t* rows,
                                  const uint8_t* has_grad, int64_t n, const AdamConfig& cfg, int64_t step,
                                  bool decoupled, bool packed = false) {
    const optim_detail::AdamStep k(cfg, step, decoupled);
#pragma omp parallel for schedule(static) if (n * width > optim_detail::kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        const int64_t b = (packed ? i : rows[i]) * width;
        if (has_grad[i]) optim_detail::adam_span<false>(p + b, grad + b, m + b, v + b, width, k);
        else optim_detail::adam_span<true>(p + b, nullptr, m + b, v + b, width, k);
    }
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
