// Elementwise kernels: activations, broadcasting binary ops, bias, row reductions, rowwise dot,
// concat/slice along the feature axis, each with its backward.
//
// Layout: float32 row-major [rows, cols], int64 sizes.  Backward kernels OVERWRITE their
// gradient outputs (the caller accumulates with `add` when a value has several consumers).
// A nullptr gradient output means "not needed" and is skipped.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common.h"
#include "vexp.h"

namespace mg {

namespace ew_detail {
// Below this many elements the fork/join costs more than the loop.
inline constexpr int64_t kParallelMin = 1 << 15;

// Runs f(i) for i in [0, n), vectorised, split over threads when n is large (common.h).
template <class F>
inline void each(int64_t n, F f) {
    parallel_each(n, kParallelMin, f);
}
}  // namespace ew_detail

// ---------------------------------------------------------------------------------------
// Activations.  Backward takes the forward OUTPUT where the derivative is a function of it
// (relu, exp, sigmoid, tanh) and the forward INPUT otherwise (leaky_relu, elu).
// ---------------------------------------------------------------------------------------

inline void relu_fwd(const float* x, float* y, int64_t n) {
    ew_detail::each(n, [=](int64_t i) { y[i] = x[i] > 0.0f ? x[i] : 0.0f; });
}
// gx = gy where y > 0 (PyTorch: zero gradient at x == 0).
inline void relu_bwd(const float* y, const float* gy, float* gx, int64_t n) {
    ew_detail::each(n, [=](int64_t i) { gx[i] = y[i] > 0.0f ? gy[i] : 0.0f; });
}

inline void leaky_relu_fwd(const float* x, float* y, int64_t n, float alpha) {
    ew_detail::each(n, [=](int64_t i) { y[i] = x[i] > 0.0f ? x[i] : alpha * x[i]; });
}
inline void leaky_relu_bwd(const float* x, const float* gy, float* gx, int64_t n, float alpha) {
    ew_detail::each(n, [=](int64_t i) { gx[i] = x[i] > 0.0f ? gy[i] : alpha * gy[i]; });
}

inline void elu_fwd(const float* x, float* y, int64_t n, float alpha) {
    ew_detail::each(n, [=](int64_t i) { y[i] = select_bits(x[i] > 0.0f, x[i], alpha * vexpm1(x[i])); });
}
// Given the input so that any alpha (including alpha <= 0) is handled.
inline void elu_bwd(const float* x, const float* gy, float* gx, int64_t n, float alpha) {
    ew_detail::each(n, [=](int64_t i) { gx[i] = select_bits(x[i] > 0.0f, gy[i], gy[i] * alpha * vexp(x[i])); });
}

inline void exp_fwd(const float* x, float* y, int64_t n) {
    ew_detail::each(n, [=](int64_t i) { y[i] = vexp(x[i]); });
}
inline void exp_bwd(const float* y, const float* gy, float* gx, int64_t n) {
    ew_detail::each(n, [=](int64_t i) { gx[i] = gy[i] * y[i]; });
}

inline void sigmoid_fwd(const float* x, float* y, int64_t n) {
    ew_detail::each(n, [=](int64_t i) { y[i] = vsigmoid(x[i]); });
}
inline void sigmoid_bwd(const float* y, const float* gy, float* gx, int64_t n) {
    ew_detail::each(n, [=](int64_t i) { gx[i] = gy[i] * y[i] * (1.0f - y[i]); });
}

inline void tanh_fwd(const float* x, float* y, int64_t n) {
    ew_detail::each(n, [=](int64_t i) { y[i] = vtanh(x[i]); });
}
inline void tanh_bwd(const float* y, const float* gy, float* gx, int64_t n) {
    ew_detail::each(n, [=](int64_t i) { gx[i] = gy[i] * (1.0f - y[i] * y[i]); });
}

inline void neg_fwd(const float* x, float* y, int64_t n) {
    ew_detail::each(n, [=](int64_t i) { y[i] = -x[i]; });
}

// y = c * x; its backward is scale(gy, c).
inline void scale(const float* x, float* y, int64_t n, float c) {
    ew_detail::each(n, [=](int64_t i) { y[i] = c * x[i]; });
}

inline void copy_values(const float* x, float* y, int64_t n) {
    ew_detail::each(n, [=](int64_t i) { y[i] = x[i]; });
}
inline void fill_values(float* y, int64_t n, float v) {
    ew_detail::each(n, [=](int64_t i) { y[i] = v; });
}
// y += x, the accumulation of a gradient with several contributions.
inline void accumulate(const float* x, float* y, int64_t n) {
    ew_detail::each(n, [=](int64_t i) { y[i] += x[i]; });
}

// ---------------------------------------------------------------------------------------
// Binary ops with broadcasting.  Each operand has a shape relative to the [rows, cols]
// result: Full [rows,cols], Col [rows,1] (width-1 operand), Row [1,cols] (bias / param row),
// Scalar [1].
// ---------------------------------------------------------------------------------------

// Bcast and BinOp: runtime/op_types.h.

namespace ew_detail {

template <BinOp op>
inline float apply(float a, float b) {
    if constexpr (op == BinOp::Add) return a + b;
    if constexpr (op == BinOp::Sub) return a - b;
    if constexpr (op == BinOp::Mul) return a * b;
    return a / b;
}

// Start of operand row i, and whether it varies along the columns.
inline const float* row_ptr(const float* p, Bcast s, int64_t i, int64_t cols) {
    switch (s) {
        case Bcast::Full: return p + i * cols;
        case Bcast::Col: return p + i;
        default: return p;
    }
}
inline bool varies_along_cols(Bcast s) { return s == Bcast::Full || s == Bcast::Row; }

// epi: a fused bias/activation tail applied to each row right after it is written (or nullptr).
template <BinOp op, bool a_vec, bool b_vec>
void binary_rows(const float* a, Bcast sa, const float* b, Bcast sb, float* out, int64_t rows,
                 int64_t cols, const Epilogue* epi) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
        const float* ar = row_ptr(a, sa, i, cols);
        const float* br = row_ptr(b, sb, i, cols);
        float* o = out + i * cols;
        if constexpr (a_vec && b_vec) {
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) o[j] = apply<op>(ar[j], br[j]);
        } else if constexpr (a_vec) {
            const float bv = br[0];
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) o[j] = apply<op>(ar[j], bv);
        } else if constexpr (b_vec) {
            const float av = ar[0];
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) o[j] = apply<op>(av, br[j]);
        } else {
            const float v = apply<op>(ar[0], br[0]);
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) o[j] = v;
        }
        if (epi) apply_epilogue(epi->act, epi->alpha, epi->bias, o, cols);
    }
}

template <BinOp op>
void binary_dispatch(const float* a, Bcast sa, const float* b, Bcast sb, float* out, int64_t rows,
                     int64_t cols, const Epilogue* epi = nullptr) {
    const bool av = varies_along_cols(sa), bv = varies_along_cols(sb);
    if (av && bv) binary_rows<op, true, true>(a, sa, b, sb, out, rows, cols, epi);
    else if (av) binary_rows<op, true, false>(a, sa, b, sb, out, rows, cols, epi);
    else if (bv) binary_rows<op, false, true>(a, sa, b, sb, out, rows, cols, epi);
    else binary_rows<op, false, false>(a, sa, b, sb, out, rows, cols, epi);
}

// out[0, width) = the sums over all rows of what add_row(i, acc) adds into acc (a thread's double
// partials of the `width` sums) for row i of `cols` terms: each thread accumulates its static
// block of rows, then one serial pass adds the per-thread partials, so the result does not
// depend on scheduling noise and no atomics are needed.  ``Out`` is float, or double where the
// sums go on (batch norm's statistics, added across MPI ranks before they are rounded).
template <class AddRow, class Out = float>
void sum_rows_to(int64_t rows, int64_t cols, int64_t width, Out* out, AddRow add_row) {
    // One cache line of padding between the threads' partials: they are updated on every row,
    // and a line shared by two threads would bounce between their cores each time.
    const int64_t stride = (width + 7) / 8 * 8 + 8;
    const int nthreads = rows * cols > kParallelMin ? omp_get_max_threads() : 1;
    std::vector<double> partial(static_cast<size_t>(nthreads) * stride, 0.0);
#pragma omp parallel num_threads(nthreads)
    {
        double* acc = partial.data() + static_cast<int64_t>(omp_get_thread_num()) * stride;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < rows; ++i) add_row(i, acc);
    }
    for (int64_t j = 0; j < width; ++j) {
        double s = 0.0;
        for (int t = 0; t < nthreads; ++t) s += partial[static_cast<size_t>(t) * stride + j];
        out[j] = static_cast<Out>(s);
    }
}

// Writes into `out` (shaped by `shape`) the sum of f(i, j) over the broadcast dimensions.
// The Row and Scalar reductions run over all rows (sum_rows_to).
template <class F, class Out = float>
void reduce_to(Bcast shape, int64_t rows, int64_t cols, Out* out, F f) {
    if (shape == Bcast::Full) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
        for (int64_t i = 0; i < rows; ++i)
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = f(i, j);
        return;
    }
    if (shape == Bcast::Col) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
        for (int64_t i = 0; i < rows; ++i) {
            double s = 0.0;
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < cols; ++j) s += f(i, j);
            out[i] = static_cast<Out>(s);
        }
        return;
    }
    if (shape == Bcast::Row) {
        sum_rows_to(rows, cols, cols, out, [&](int64_t i, double* acc) {
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) acc[j] += f(i, j);
        });
        return;
    }
    sum_rows_to(rows, cols, 1, out, [&](int64_t i, double* acc) {
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < cols; ++j) s += f(i, j);
        acc[0] += s;
    });
}

inline float at(const float* p, Bcast s, int64_t i, int64_t j, int64_t cols) {
    switch (s) {
        case Bcast::Full: return p[i * cols + j];
        case Bcast::Col: return p[i];
        case Bcast::Row: return p[j];
        default: return p[0];
    }
}

}  // namespace ew_detail

// out[rows, cols] = epi(a op b) with each operand broadcast according to its shape; the
// bias/activation epilogue (none by default) runs on each row while it is in cache.
inline void binary_fwd(BinOp op, const float* a, Bcast sa, const float* b, Bcast sb, float* out,
                       int64_t rows, int64_t cols, const Epilogue& epilogue = Epilogue{}) {
    const Epilogue* epi = epilogue.bias || epilogue.act != Act::None ? &epilogue : nullptr;
    switch (op) {
        case BinOp::Add: ew_detail::binary_dispatch<BinOp::Add>(a, sa, b, sb, out, rows, cols, epi); break;
        case BinOp::Sub: ew_detail::binary_dispatch<BinOp::Sub>(a, sa, b, sb, out, rows, cols, epi); break;
        case BinOp::Mul: ew_detail::binary_dispatch<BinOp::Mul>(a, sa, b, sb, out, rows, cols, epi); break;
        case BinOp::Div: ew_detail::binary_dispatch<BinOp::Div>(a, sa, b, sb, out, rows, cols, epi); break;
    }
}

// out[rows, cols] = epi(ca * a + cb * b), a and b full [rows, cols] arrays: an add or sub whose
// operands a constant `scale` fed (the emitter's plan_scaled_operands; a sub passes -cb), one
// pass where the scales and the add took three.  APPNP's 0.9 * A_hat h + 0.1 * h0 per step.
inline void scaled_add(float ca, const float* a, float cb, const float* b, float* out, int64_t rows, int64_t cols,
                       const Epilogue& epilogue = Epilogue{}) {
    if (!epilogue.bias && epilogue.act == Act::None) {
        ew_detail::each(rows * cols, [=](int64_t i) { out[i] = ca * a[i] + cb * b[i]; });
        return;
    }
#pragma omp parallel for schedule(static) if (rows * cols > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
        const float* ar = a + i * cols;
        const float* br = b + i * cols;
        float* o = out + i * cols;
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) o[j] = ca * ar[j] + cb * br[j];
        apply_epilogue(epilogue.act, epilogue.alpha, epilogue.bias, o, cols);
    }
}

// Gradients of binary_fwd: ga (shaped like a) and gb (shaped like b), each the sum of the
// elementwise partial derivatives over the dimensions that operand was broadcast along.
inline void binary_bwd(BinOp op, const float* a, Bcast sa, const float* b, Bcast sb, const float* g,
                       float* ga, float* gb, int64_t rows, int64_t cols) {
    using ew_detail::at;
    if (ga) {
        switch (op) {
            case BinOp::Add:
            case BinOp::Sub:
                ew_detail::reduce_to(sa, rows, cols, ga, [&](int64_t i, int64_t j) { return g[i * cols + j]; });
                break;
            case BinOp::Mul:
                ew_detail::reduce_to(sa, rows, cols, ga, [&](int64_t i, int64_t j) {
                    return g[i * cols + j] * at(b, sb, i, j, cols);
                });
                break;
            case BinOp::Div:
                ew_detail::reduce_to(sa, rows, cols, ga, [&](int64_t i, int64_t j) {
                    return g[i * cols + j] / at(b, sb, i, j, cols);
                });
                break;
        }
    }
    if (gb) {
        switch (op) {
            case BinOp::Add:
                ew_detail::reduce_to(sb, rows, cols, gb, [&](int64_t i, int64_t j) { return g[i * cols + j]; });
                break;
            case BinOp::Sub:
                ew_detail::reduce_to(sb, rows, cols, gb, [&](int64_t i, int64_t j) { return -g[i * cols + j]; });
                break;
            case BinOp::Mul:
                ew_detail::reduce_to(sb, rows, cols, gb, [&](int64_t i, int64_t j) {
                    return g[i * cols + j] * at(a, sa, i, j, cols);
                });
                break;
            case BinOp::Div:
                ew_detail::reduce_to(sb, rows, cols, gb, [&](int64_t i, int64_t j) {
                    const float bv = at(b, sb, i, j, cols);
                    return -g[i * cols + j] * at(a, sa, i, j, cols) / (bv * bv);
                });
                break;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Bias and row reductions.
// ---------------------------------------------------------------------------------------

// y[i, :] = x[i, :] + bias[:]  (x may alias y).
inline void bias_add(const float* x, const float* bias, float* y, int64_t rows, int64_t cols) {
    ew_detail::binary_dispatch<BinOp::Add>(x, Bcast::Full, bias, Bcast::Row, y, rows, cols);
}

// out[j] = sum_i x[i, j]: sums the rows together (the bias gradient).  Thread-local partials
// and one reduction, no atomics.
inline void row_sum(const float* x, float* out, int64_t rows, int64_t cols) {
    ew_detail::reduce_to(Bcast::Row, rows, cols, out, [&](int64_t i, int64_t j) { return x[i * cols + j]; });
}

// Rowwise dot per head: a, b are [rows, heads*dim], out[i, h] = sum_d a[i,h,d] * b[i,h,d].
// With b_is_row, b is a single [heads*dim] parameter row shared by every row (GAT's a·x).
inline void rowwise_dot_fwd(const float* a, const float* b, bool b_is_row, float* out, int64_t rows,
                            int64_t heads, int64_t dim) {
    const int64_t w = heads * dim;
#pragma omp parallel for schedule(static) if (rows * w > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
        const float* ar = a + i * w;
        const float* br = b_is_row ? b : b + i * w;
        for (int64_t h = 0; h < heads; ++h) {
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t d = 0; d < dim; ++d) s += ar[h * dim + d] * br[h * dim + d];
            out[i * heads + h] = s;
        }
    }
}

// ga[i,h,d] = g[i,h] * b[i,h,d]; gb likewise (summed over rows when b_is_row).
inline void rowwise_dot_bwd(const float* a, const float* b, bool b_is_row, const float* g, float* ga,
                            float* gb, int64_t rows, int64_t heads, int64_t dim) {
    const int64_t w = heads * dim;
    if (ga) {
#pragma omp parallel for schedule(static) if (rows * w > ew_detail::kParallelMin)
        for (int64_t i = 0; i < rows; ++i) {
            const float* br = b_is_row ? b : b + i * w;
            for (int64_t h = 0; h < heads; ++h) {
                const float gv = g[i * heads + h];
#pragma omp simd
                for (int64_t d = 0; d < dim; ++d) ga[i * w + h * dim + d] = gv * br[h * dim + d];
            }
        }
    }
    if (gb) {
        ew_detail::reduce_to(b_is_row ? Bcast::Row : Bcast::Full, rows, w, gb, [&](int64_t i, int64_t j) {
            return g[i * heads + j / dim] * a[i * w + j];
        });
    }
}

namespace ew_detail {

// out[i, h, d] = x[i or 0, h, d] * s[i, h], plus base[i, h, d] when ADD.
template <bool ADD>
void head_products(const float* base, const float* x, bool x_is_row, const float* s, float* out, int64_t rows,
                   int64_t heads, int64_t dim) {
    const int64_t w = heads * dim;
#pragma omp parallel for schedule(static) if (rows * w > kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
        const float* xr = x_is_row ? x : x + i * w;
        for (int64_t h = 0; h < heads; ++h) {
            const float sv = s[i * heads + h];
            float* o = out + i * w + h * dim;
            if constexpr (ADD) {
                const float* b = base + i * w + h * dim;
#pragma omp simd
                for (int64_t d = 0; d < dim; ++d) o[d] = b[d] + xr[h * dim + d] * sv;
            } else {
#pragma omp simd
                for (int64_t d = 0; d < dim; ++d) o[d] = xr[h * dim + d] * sv;
            }
        }
    }
}

}  // namespace ew_detail

// Per-head scaling: out[i, h, d] = x[i or 0, h, d] * s[i, h].  With x_is_row, x is one
// [heads*dim] parameter row shared by every row (the gradient of a per-head dot with a weight).
inline void head_mul(const float* x, bool x_is_row, const float* s, float* out, int64_t rows, int64_t heads,
                     int64_t dim) {
    ew_detail::head_products<false>(nullptr, x, x_is_row, s, out, rows, heads, dim);
}

// out = base + head_mul(x, s): the products added as they are formed, never stored (the backward
// of a per-head dot adds its weight's share to the input gradient: dx += a * g).  The same sums
// as binary_fwd's add of head_mul's output.  out may alias base.
inline void head_mul_add(const float* base, const float* x, bool x_is_row, const float* s, float* out, int64_t rows,
                         int64_t heads, int64_t dim) {
    ew_detail::head_products<true>(base, x, x_is_row, s, out, rows, heads, dim);
}

// out[h*dim + d] = sum_i x[i, h, d] * s[i, h]: row_sum of head_mul(x, s) without the products
// stored (a per-head dot's weight gradient: da = row_sum(x * g)).  The products and the sums are
// row_sum's over head_mul's output, so the result is the same to the bit.
inline void head_mul_row_sum(const float* x, const float* s, float* out, int64_t rows, int64_t heads, int64_t dim) {
    const int64_t w = heads * dim;
    ew_detail::sum_rows_to(rows, w, w, out, [&](int64_t i, double* acc) {
        for (int64_t h = 0; h < heads; ++h) {
            const float sv = s[i * heads + h];
#pragma omp simd
            for (int64_t d = 0; d < dim; ++d) acc[h * dim + d] += x[i * w + h * dim + d] * sv;
        }
    });
}

// out[i, d] = c * sum_h x[i, h, d]: c = 1/heads averages the heads.
inline void head_sum(const float* x, float c, float* out, int64_t rows, int64_t heads, int64_t dim) {
#pragma omp parallel for schedule(static) if (rows * heads * dim > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
        const float* xr = x + i * heads * dim;
        float* o = out + i * dim;
#pragma omp simd
        for (int64_t d = 0; d < dim; ++d) o[d] = xr[d];
        for (int64_t h = 1; h < heads; ++h) {
#pragma omp simd
            for (int64_t d = 0; d < dim; ++d) o[d] += xr[h * dim + d];
        }
#pragma omp simd
        for (int64_t d = 0; d < dim; ++d) o[d] *= c;
    }
}

// out[i, h, d] = c * g[i, d] for every head h (the gradient of the mean over heads).
inline void head_repeat(const float* g, float c, float* out, int64_t rows, int64_t heads, int64_t dim) {
#pragma omp parallel for schedule(static) if (rows * heads * dim > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
        const float* gr = g + i * dim;
        for (int64_t h = 0; h < heads; ++h) {
#pragma omp simd
            for (int64_t d = 0; d < dim; ++d) out[(i * heads + h) * dim + d] = c * gr[d];
        }
    }
}

// ---------------------------------------------------------------------------------------
// Concat / slice along the feature axis.
// ---------------------------------------------------------------------------------------

// dst[i, dst_off : dst_off+width] (=|+=) src[i, src_off : src_off+width]
inline void copy_cols(const float* src, int64_t src_cols, int64_t src_off, float* dst, int64_t dst_cols,
                      int64_t dst_off, int64_t rows, int64_t width, bool accumulate = false) {
#pragma omp parallel for schedule(static) if (rows * width > ew_detail::kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
        const float* s = src + i * src_cols + src_off;
        float* d = dst + i * dst_cols + dst_off;
        if (accumulate) {
#pragma omp simd
            for (int64_t j = 0; j < width; ++j) d[j] += s[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < width; ++j) d[j] = s[j];
        }
    }
}

// out[rows, sum(widths)] = [parts[0] | parts[1] | ...]
inline void concat_fwd(const float* const* parts, const int64_t* widths, int64_t nparts, float* out,
                       int64_t rows) {
    int64_t total = 0;
    for (int64_t p = 0; p < nparts; ++p) total += widths[p];
    int64_t off = 0;
    for (int64_t p = 0; p < nparts; ++p) {
        copy_cols(parts[p], widths[p], 0, out, total, off, rows, widths[p]);
        off += widths[p];
    }
}

// Splits the gradient of a concat back into its parts (nullptr parts are skipped).
inline void concat_bwd(const float* g, const int64_t* widths, int64_t nparts, float* const* grads,
                       int64_t rows) {
    int64_t total = 0;
    for (int64_t p = 0; p < nparts; ++p) total += widths[p];
    int64_t off = 0;
    for (int64_t p = 0; p < nparts; ++p) {
        if (grads[p]) copy_cols(g, total, off, grads[p], widths[p], 0, rows, widths[p]);
        off += widths[p];
    }
}

// y[rows, width] = x[:, start : start+width]
inline void slice_fwd(const float* x, int64_t rows, int64_t cols, int64_t start, int64_t width, float* y) {
    copy_cols(x, cols, start, y, width, 0, rows, width);
}

// gx[rows, cols] = 0 except gx[:, start : start+width] = gy.
inline void slice_bwd(const float* gy, int64_t rows, int64_t cols, int64_t start, int64_t width, float* gx) {
    fill_values(gx, rows * cols, 0.0f);
    copy_cols(gy, width, 0, gx, cols, start, rows, width);
}

}  // namespace mg
