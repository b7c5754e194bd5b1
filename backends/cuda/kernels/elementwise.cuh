// Elementwise and row/column kernels of the CUDA backend: activations and their gradients,
// broadcast binary ops, bias, row and feature sums, scaling, dropout (the counter-based mask
// of runtime/op_types.h, so a seed drops the same elements as on the CPU backends).
//
// One-dimensional work is a grid-stride loop over a functor (map); reductions run one warp
// per output with shuffles, no atomics, so every result is reproducible run to run.
#ifndef MORPHGEN_CUDA_ELEMENTWISE_CUH
#define MORPHGEN_CUDA_ELEMENTWISE_CUH

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../device.cuh"
#include "../memory.cuh"
#include "dropout.cuh"
#include "op_types.h"

namespace mg {
namespace cuda {

template <class Op>
__global__ void map_kernel(int64_t n, Op op) {
    const Op now = at_this_epoch(op, 0);   // once per thread (kernels/dropout.cuh)
    const int64_t stride = int64_t(blockDim.x) * gridDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) now(i);
}

// Runs op(i) for i in [0, n) on the device.
template <class Op>
inline void map(const char *name, int64_t n, Op op) {
    if (n > 0) launch(name, map_kernel<Op>, dim3(stride_blocks(n)), dim3(kThreads), n, op);
}

// The sum over the warp's 32 lanes, in every lane (butterfly: the same order in every lane, so
// every lane holds the same bits).
__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
// x[0] + x[stride] + ... + x[(n - 1) * stride] by a warp: lane k adds every 32nd term from the
// k-th, then warp_sum; every lane gets it.
template <class T>
__device__ __forceinline__ T warp_strided_sum(const T *x, int64_t n, int64_t stride) {
    T s = T(0);
    for (int64_t k = threadIdx.x % 32; k < n; k += 32) s += x[k * stride];
    return warp_sum(s);
}

constexpr int kWarpsPerBlock = kThreads / 32;

// Rows handled one warp each: the grid that gives every row its warp.
inline unsigned warp_blocks(int64_t rows) { return blocks_for(rows, kWarpsPerBlock); }

MG_HD float activate(Act act, float x, float alpha) {
    switch (act) {
        case Act::Relu: return x > 0.f ? x : 0.f;
        case Act::LeakyRelu: return x > 0.f ? x : alpha * x;
        case Act::Elu: return x > 0.f ? x : alpha * expm1f(x);
        default: return x;
    }
}

// ---- functors ------------------------------------------------------------------------------
enum class Unary : int { Relu, LeakyRelu, Elu, Exp, Sigmoid, Tanh, Neg, Scale, Copy };

struct UnaryOp {
    Unary kind;
    const float *x;
    float *y;
    float c;
    __device__ void operator()(int64_t i) const {
        const float v = x[i];
        float r;
        switch (kind) {
            case Unary::Relu: r = v > 0.f ? v : 0.f; break;
            case Unary::LeakyRelu: r = v > 0.f ? v : c * v; break;
            case Unary::Elu: r = v > 0.f ? v : c * expm1f(v); break;
            case Unary::Exp: r = expf(v); break;
            case Unary::Sigmoid: r = v >= 0.f ? 1.f / (1.f + expf(-v)) : expf(v) / (1.f + expf(v)); break;
            case Unary::Tanh: r = tanhf(v); break;
            case Unary::Neg: r = -v; break;
            case Unary::Scale: r = c * v; break;
            default: r = v; break;
        }
        y[i] = r;
    }
};

// dX[i] = act'(.) * (dropout_grad(G))[i], written with the forward output y (see ops.h of the
// OpenMP backend: for alpha > 0, y > 0 exactly when x > 0; elu's alpha*exp(x) = y + alpha).
struct ActGradOp {
    int kind;   // mg::op::ActKind as int
    float alpha;
    const float *g, *y;
    float *dx;
    DropStream drop;
    uint64_t thr;         // (thr == 0 and scale 1: no dropout)
    float scale;
    bool dropout;
    __device__ ActGradOp at_this_epoch() const {
        ActGradOp op = *this;
        if (dropout) op.drop = drop.at_this_epoch();
        return op;
    }
    __device__ void operator()(int64_t i) const {
        float gv = g[i];
        if (dropout) gv = dropout_detail::keep(drop.base, uint64_t(i), thr) ? gv * scale : 0.f;
        const float yv = y[i];
        float r;
        switch (kind) {
            case 0: r = yv > 0.f ? gv : 0.f; break;                   // relu
            case 1: r = yv > 0.f ? gv : alpha * gv; break;            // leaky_relu
            case 2: r = yv > 0.f ? gv : gv * (yv + alpha); break;     // elu
            case 3: r = gv * yv; break;                               // exp
            case 4: r = gv * yv * (1.f - yv); break;                  // sigmoid
            default: r = gv * (1.f - yv * yv); break;                 // tanh
        }
        dx[i] = r;
    }
};

// Row r of a [rows, cols] value drops as row row_ids[r] (distributed ranks; nullptr: r).
struct DropoutRowsOp {
    const float *x;
    float *y;
    const int64_t *row_ids;
    int64_t cols;
    DropStream drop;
    uint64_t thr;
    float scale;
    __device__ DropoutRowsOp at_this_epoch() const {
        return DropoutRowsOp{x, y, row_ids, cols, drop.at_this_epoch(), thr, scale};
    }
    __device__ void operator()(int64_t i) const {
        const int64_t r = i / cols;
        const int64_t id = (row_ids ? row_ids[r] : r) * cols + i % cols;
        y[i] = dropout_detail::keep(drop.base, uint64_t(id), thr) ? x[i] * scale : 0.f;
    }
};

__device__ __forceinline__ float operand(const float *p, Bcast s, int64_t i, int64_t j, int64_t cols) {
    switch (s) {
        case Bcast::Full: return p[i * cols + j];
        case Bcast::Col: return p[i];
        case Bcast::Row: return p[j];
        default: return p[0];
    }
}
__device__ __forceinline__ float apply(BinOp op, float a, float b) {
    switch (op) {
        case BinOp::Add: return a + b;
        case BinOp::Sub: return a - b;
        case BinOp::Mul: return a * b;
        default: return a / b;
    }
}

struct BinaryOp {
    BinOp op;
    const float *a, *b;
    Bcast sa, sb;
    float *out;
    int64_t cols;
    __device__ void operator()(int64_t k) const {
        const int64_t i = k / cols, j = k % cols;
        out[k] = apply(op, operand(a, sa, i, j, cols), operand(b, sb, i, j, cols));
    }
};

struct ScaledAddOp {      // out[k] = ca * a[k] + cb * b[k] (OpenMP: kernels/elementwise.h, scaled_add)
    float ca;
    const float *a;
    float cb;
    const float *b;
    float *out;
    __device__ void operator()(int64_t k) const { out[k] = ca * a[k] + cb * b[k]; }
};

struct EpilogueOp {       // y[r, f] = act(y[r, f] + bias[f])
    float *y;
    const float *bias;
    int64_t cols;
    Act act;
    float alpha;
    __device__ void operator()(int64_t k) const {
        const float v = y[k] + (bias ? bias[k % cols] : 0.f);
        y[k] = activate(act, v, alpha);
    }
};

// y[i] = f(x[i]) or, with g, the gradient g[i] * f'(x[i]) (backends/openmp/kernels/math.h).
struct MathOp {
    MathFn fn;
    float c;
    const float *x, *g;
    float *y;
    __device__ void operator()(int64_t i) const {
        constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
        const float v = x[i];
        if (!g) {
            float r;
            switch (fn) {
                case MathFn::Sqrt: r = sqrtf(v); break;
                case MathFn::Rsqrt: r = v == 0.f ? 0.f : 1.f / sqrtf(v); break;
                case MathFn::Log: r = logf(v); break;
                case MathFn::Abs: r = fabsf(v); break;
                case MathFn::Pow: r = powf(v, c); break;
                case MathFn::Gelu: r = 0.5f * v * (1.f + erff(v * kInvSqrt2)); break;
                case MathFn::Softplus: r = v > 0.f ? v + log1pf(expf(-v)) : log1pf(expf(v)); break;
                default: r = v + c; break;
            }
            y[i] = r;
            return;
        }
        const float gv = g[i];
        float r;
        switch (fn) {
            case MathFn::Sqrt: r = gv * 0.5f / sqrtf(v); break;
            case MathFn::Rsqrt: r = v == 0.f ? 0.f : -0.5f * gv / (v * sqrtf(v)); break;
            case MathFn::Log: r = gv / v; break;
            case MathFn::Abs: r = v > 0.f ? gv : (v < 0.f ? -gv : 0.f); break;
            case MathFn::Pow: r = gv * c * powf(v, c - 1.f); break;
            case MathFn::Gelu:
                r = gv * (0.5f * (1.f + erff(v * kInvSqrt2)) + v * kInvSqrt2Pi * expf(-0.5f * v * v));
                break;
            case MathFn::Softplus: r = gv / (1.f + expf(-v)); break;
            default: r = gv; break;
        }
        y[i] = r;
    }
};

// dst[r, dst_off + j] = src[r, src_off + j] for j < width.
struct CopyColsOp {
    const float *src;
    int64_t src_cols, src_off;
    float *dst;
    int64_t dst_cols, dst_off, width;
    __device__ void operator()(int64_t k) const {
        const int64_t r = k / width, j = k % width;
        dst[r * dst_cols + dst_off + j] = src[r * src_cols + src_off + j];
    }
};

// Per-head scaling: out[i, h, d] = x[i or 0, h, d] * s[i, h] (x_is_row: one shared weight row).
// ADD: base[i, h, d] plus that product, added as it is formed and never stored (the backward of a
// per-head dot adds its weight's share to the input gradient: dx += a * g); out may alias base.
template <bool ADD>
struct HeadProductsOp {
    const float *base, *x;
    bool x_is_row;
    const float *s;
    float *out;
    int64_t heads, dim;
    __device__ void operator()(int64_t k) const {
        const int64_t w = heads * dim, i = k / w, j = k % w;
        const float product = (x_is_row ? x[j] : x[k]) * s[i * heads + j / dim];
        out[k] = ADD ? base[k] + product : product;
    }
};

// out[i, d] = c * sum_h x[i, h, d], the heads added in order (the same sum as the CPU backend).
struct HeadSumOp {
    const float *x;
    float c;
    float *out;
    int64_t heads, dim;
    __device__ void operator()(int64_t k) const {
        const int64_t i = k / dim, d = k % dim;
        const float *xr = x + i * heads * dim + d;
        float acc = xr[0];
        for (int64_t h = 1; h < heads; ++h) acc += xr[h * dim];
        out[k] = acc * c;
    }
};

// out[i, h, d] = c * g[i, d] for every head h.
struct HeadRepeatOp {
    const float *g;
    float c;
    float *out;
    int64_t heads, dim;
    __device__ void operator()(int64_t k) const {
        const int64_t i = k / (heads * dim), d = k % dim;
        out[k] = c * g[i * dim + d];
    }
};

// Softmax or log-softmax of each row (max-shifted), one warp per row; backward from the output.
__global__ void row_softmax_kernel(const float *x, const float *g, float *y, int64_t rows, int64_t cols, bool log) {
    const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float *xr = x + r * cols;
    float *out = y + r * cols;
    if (g) {               // x is the forward output here
        const float *gr = g + r * cols;
        double acc = 0.0;
        for (int64_t j = lane; j < cols; j += 32) acc += log ? double(gr[j]) : double(gr[j]) * xr[j];
        const float s = float(warp_sum(acc));
        __syncwarp();
        for (int64_t j = lane; j < cols; j += 32) out[j] = log ? gr[j] - expf(xr[j]) * s : xr[j] * (gr[j] - s);
        return;
    }
    float top = -INFINITY;
    for (int64_t j = lane; j < cols; j += 32) top = fmaxf(top, xr[j]);
    for (int off = 16; off > 0; off >>= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, off));
    double sum = 0.0;
    for (int64_t j = lane; j < cols; j += 32) sum += exp(double(xr[j] - top));
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    __syncwarp();
    if (log) {
        const float lse = top + float(::log(sum));
        for (int64_t j = lane; j < cols; j += 32) out[j] = xr[j] - lse;
    } else {
        const float inv = float(1.0 / sum);
        for (int64_t j = lane; j < cols; j += 32) out[j] = expf(xr[j] - top) * inv;
    }
}

// The values column sums add (column_sums_of): a stored row-major matrix's...
struct StoredValue {
    const float *x;
    int64_t cols;
    __device__ float operator()(int64_t r, int64_t j) const { return x[r * cols + j]; }
};

// ...or HeadProductsOp's products, formed as they are summed (a per-head dot's weight gradient,
// row_sum(head_mul(x, s)), without the [rows, heads * dim] products stored).
struct HeadProductValue {
    const float *x, *s;
    int64_t heads, dim;
    __device__ float operator()(int64_t r, int64_t j) const { return x[r * heads * dim + j] * s[r * heads + j / dim]; }
};

// out[j] = sum_i value(i, j) over the rows in double, in two passes of a fixed order
// (reproducible, whatever the launch): partial[c, j] sums chunk c of kColumnChunk rows, a block
// per (chunk, 32 columns) with the columns on the lanes (coalesced) and the chunk's rows strided
// over its warps, the warps' sums added in warp order; then a warp per column adds the chunks'
// partials.  One warp per column walking every row (batch norm's sums, each lane reading another
// row) or a thread per (chunk of rows, column) walking hundreds of rows one load at a time (the
// bias gradients) had left the GPU nearly empty.
constexpr int64_t kColumnChunk = 256;
template <class Value>
__global__ void column_partial_kernel(Value value, int64_t rows, int64_t F, double *partial) {
    __shared__ double warp_sums[kWarpsPerBlock][32];
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
    const int64_t c = blockIdx.x, j = int64_t(blockIdx.y) * 32 + lane;
    const int64_t end = (c + 1) * kColumnChunk < rows ? (c + 1) * kColumnChunk : rows;
    double s = 0.0;
    if (j < F)
        for (int64_t i = c * kColumnChunk + warp; i < end; i += kWarpsPerBlock) s += double(value(i, j));
    warp_sums[warp][lane] = s;
    __syncthreads();
    if (warp == 0 && j < F) {
        for (int w = 1; w < kWarpsPerBlock; ++w) s += warp_sums[w][lane];
        partial[c * F + j] = s;
    }
}
template <class Out>
__global__ void column_partials_sum_kernel(const double *partial, int64_t chunks, int64_t F, Out *out) {
    const int64_t j = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    if (j >= F) return;
    const double s = warp_strided_sum(partial + j, chunks, F);
    if (threadIdx.x % 32 == 0) out[j] = Out(s);
}
// out[j] = sum_i value(i, j) (Out: float or double), by the two kernels above.
template <class Value, class Out>
inline void column_sums_of(const char *name, Value value, int64_t rows, int64_t F, Out *out) {
    if (F <= 0) return;
    static DeviceArray<double> partial;
    const int64_t chunks = std::max<int64_t>(1, (rows + kColumnChunk - 1) / kColumnChunk);
    if (partial.size() < chunks * F) partial.allocate(chunks * F);
    launch(name, column_partial_kernel<Value>, dim3(unsigned(chunks), unsigned((F + 31) / 32)), dim3(kThreads), value,
           rows, F, partial.data());
    launch("column sums: the chunks' partials (column_partials_sum_kernel)", column_partials_sum_kernel<Out>,
           dim3(warp_blocks(F)), dim3(kThreads), (const double *)partial.data(), chunks, F, out);
}

// out[r] = sum_f x[r, f]: one warp per row.
__global__ void row_total_kernel(const float *x, float *out, int64_t rows, int64_t cols) {
    const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    if (r >= rows) return;
    const float acc = warp_strided_sum(x + r * cols, cols, 1);
    if (threadIdx.x % 32 == 0) out[r] = acc;
}

// out[i, h] = sum_d a[i, h, d] * b[i or 0, h, d]: one warp per (row, head).
__global__ void rowwise_dot_kernel(const float *a, const float *b, bool b_is_row, float *out, int64_t rows,
                                   int64_t heads, int64_t dim) {
    const int64_t k = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (k >= rows * heads) return;
    const int64_t i = k / heads, h = k % heads, w = heads * dim;
    const float *ar = a + i * w + h * dim;
    const float *br = (b_is_row ? b : b + i * w) + h * dim;
    float acc = 0.f;
    for (int64_t d = lane; d < dim; d += 32) acc += ar[d] * br[d];
    acc = warp_sum(acc);
    if (lane == 0) out[k] = acc;
}

}  // namespace cuda
}  // namespace mg
#endif
