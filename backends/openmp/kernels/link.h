// Link prediction: DistMult scores of (head, relation, tail, target) triples and their binary
// cross entropy, mean over the triples, plus an L2 term on the embeddings and the relation rows.
//
//   s_i = sum_k z[h_i,k] R[r_i,k] z[t_i,k]
//   loss = mean_i (max(s_i, 0) - y_i s_i + log(1 + exp(-|s_i|))) + reg (mean z^2 + mean R^2)
//
// The triples are int64 rows of 4 (head, relation, tail, target in {0, 1}), set by the caller for
// each epoch (positives and fresh negatives).  Sums of float terms are accumulated in double; the
// gradients scatter into the rows of their heads and tails in triple order, each row by one
// thread, so every run gives the same bits.
#ifndef MORPHGEN_KERNELS_LINK_H
#define MORPHGEN_KERNELS_LINK_H

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace mg {
namespace link_detail {

inline double score(const float* z, const float* R, const int64_t* t, int64_t H) {
    const float* zh = z + t[0] * H;
    const float* rr = R + t[1] * H;
    const float* zt = z + t[2] * H;
    double s = 0.0;
    for (int64_t k = 0; k < H; ++k) s += double(zh[k]) * double(rr[k]) * double(zt[k]);
    return s;
}

inline double mean_square(const float* a, int64_t n) {
    double s = 0.0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) s += double(a[i]) * double(a[i]);
    return n ? s / double(n) : 0.0;
}

// the gradient of reg * mean(x^2): 2 reg x / n
inline void l2_grad(const float* x, int64_t n, float reg, float* g) {
    const double c = 2.0 * double(reg) / double(n);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) g[i] = float(c * double(x[i]));
}

// d loss / d s_i, the same for every quantity the score depends on
inline double score_grad(const float* z, const float* R, const int64_t* t, int64_t H, int64_t count) {
    const double s = score(z, R, t, H);
    return (1.0 / (1.0 + std::exp(-s)) - double(t[3])) / double(count);
}

}  // namespace link_detail

// mean_over: the count the mean divides by, when `triples` are a share of a longer list (0: count;
// a distributed run scores a share on each rank and sums the shares).
inline float distmult_loss(const float* z, int64_t nodes, const float* R, int64_t rel_rows, int64_t H,
                           const int64_t* triples, int64_t count, float reg, int64_t mean_over = 0) {
    double bce = 0.0;
#pragma omp parallel for reduction(+ : bce) schedule(static) if (count > 4096)
    for (int64_t i = 0; i < count; ++i) {
        const int64_t* t = triples + 4 * i;
        const double s = link_detail::score(z, R, t, H);
        bce += std::fmax(s, 0.0) - double(t[3]) * s + std::log1p(std::exp(-std::fabs(s)));
    }
    if (mean_over <= 0) mean_over = count;
    double loss = mean_over ? bce / double(mean_over) : 0.0;
    if (reg > 0.0f)
        loss += double(reg) * (link_detail::mean_square(z, nodes * H) + link_detail::mean_square(R, rel_rows * H));
    return float(loss);
}

// The gradients with respect to z (dz) and to R (dR), either of which may be null: first the L2
// term, 2 reg x / numel(x), then each triple's score gradient d into its head's and tail's rows of
// dz (d R_r * z_t and d R_r * z_h) and into its relation's row of dR (d z_h * z_t).
//
// The scores' gradients are computed in parallel; then each thread owns a slice of dz's rows and
// one of dR's, walks every triple in order and adds only the terms of its own rows.  Every row
// receives its terms in triple order, head before tail, as one thread adding them all would: the
// same bits at any thread count.
inline void distmult_loss_grad(const float* z, int64_t nodes, const float* R, int64_t rel_rows, int64_t H,
                               const int64_t* triples, int64_t count, float reg, float* dz, float* dR,
                               int64_t mean_over = 0) {
    if (mean_over <= 0) mean_over = count;
    if (dz) link_detail::l2_grad(z, nodes * H, reg, dz);
    if (dR) link_detail::l2_grad(R, rel_rows * H, reg, dR);
    std::vector<float> d(size_t(count > 0 ? count : 0));
#pragma omp parallel for schedule(static) if (count > 4096)
    for (int64_t i = 0; i < count; ++i)
        d[size_t(i)] = float(link_detail::score_grad(z, R, triples + 4 * i, H, mean_over));
#pragma omp parallel if (count > 4096)
    {
        const int64_t T = omp_get_num_threads(), id = omp_get_thread_num();
        const int64_t n0 = nodes * id / T, n1 = nodes * (id + 1) / T;
        const int64_t q0 = rel_rows * id / T, q1 = rel_rows * (id + 1) / T;
        for (int64_t i = 0; i < count; ++i) {
            const int64_t* t = triples + 4 * i;
            const float di = d[size_t(i)];
            const float* zh = z + t[0] * H;
            const float* rr = R + t[1] * H;
            const float* zt = z + t[2] * H;
            if (dz && t[0] >= n0 && t[0] < n1)
                for (int64_t k = 0; k < H; ++k) dz[t[0] * H + k] += di * rr[k] * zt[k];
            if (dz && t[2] >= n0 && t[2] < n1)
                for (int64_t k = 0; k < H; ++k) dz[t[2] * H + k] += di * rr[k] * zh[k];
            if (dR && t[1] >= q0 && t[1] < q1)
                for (int64_t k = 0; k < H; ++k) dR[t[1] * H + k] += di * zh[k] * zt[k];
        }
    }
}

}  // namespace mg

#endif
