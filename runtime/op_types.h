// What generated code and every backend's kernels agree on: index type, the enums that name
// reductions, activations and broadcasts, the fused epilogue, and the counter-based dropout
// stream.  Host-only C++ here; a backend that compiles it for a device defines MG_HD first
// (backends/cuda/device.cuh: __host__ __device__), so the dropout mask is one function on every
// target and the same seed drops the same elements on the CPU and on the GPU.
#ifndef MORPHGEN_OP_TYPES_H
#define MORPHGEN_OP_TYPES_H

#include <cstdint>

#ifndef MG_HD
#define MG_HD inline
#endif

namespace mg {

using idx_t = std::int64_t;

enum class Reduce : int { Sum = 0, Mean = 1, Max = 2 };

enum class Act : int { None = 0, Relu = 1, LeakyRelu = 2, Elu = 3 };

// Bias add + activation fused into the final write of a kernel's output.
struct Epilogue {
    const float *bias = nullptr;  // [F], [T, F] with bias_type, or nullptr
    Act act = Act::None;
    float alpha = 0.01f;
    // [rows, F] laid out as the output, added before the bias, or nullptr: the other operand of
    // an add whose one input this kernel computes (SAGE's sum of its two products).  Only the
    // CPU kernels read it; the CUDA backend never plans one.
    const float *residual = nullptr;
    // The type of each output row, or nullptr: with it, row r adds bias row bias_type[r] of a
    // [T, F] bias (a per-type bias, HGT's b[v.ntype]).  Only the CPU dense and typed products
    // read it (apply_epilogue_rows); the CUDA backend never plans one.
    const idx_t *bias_type = nullptr;
};

// Broadcast shape of a binary op's operand relative to its [rows, cols] result: Full
// [rows,cols], Col [rows,1] (width-1 operand), Row [1,cols] (bias / param row), Scalar [1].
enum class Bcast : int { Full = 0, Col = 1, Row = 2, Scalar = 3 };
enum class BinOp : int { Add = 0, Sub = 1, Mul = 2, Div = 3 };

// Where an edge traversal reads an operand's row for the edge at CSR position e: at the edge's
// destination or source (a node value), or at e itself (an edge value, stored in CSR order).
enum class RowAt : int { Destination = 0, Source = 1, Edge = 2 };

// Elementwise functions of the language's math (c: pow's exponent, shift's constant).
enum class MathFn { Sqrt, Rsqrt, Log, Abs, Pow, Gelu, Softplus, Shift };

// ---- inverted dropout's counter-based stream ---------------------------------------------------
// Whether element i is kept is a pure function of (seed, epoch, op_id, i): a splitmix64 hash, no
// generator state, so the mask is the same for any thread count, schedule or device, and the
// backward pass regenerates it instead of storing it.  morphgen/interp.py mirrors it in numpy.
// Sums of per-feature statistics across the processes that each hold part of the rows (batch
// norm): nothing to add in one process.  The MPI backend passes a functor that all-reduces.
struct LocalRows {
    void operator()(double *, int64_t) const {}
};

struct DropoutKey {
    uint64_t seed;
    uint64_t epoch;
    uint64_t op_id;  // distinguishes dropout sites within one epoch
};

namespace dropout_detail {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// splitmix64 finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
MG_HD uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// One stream per (seed, epoch, op): nested mixing so that nearby keys give unrelated streams.
MG_HD uint64_t stream_base(DropoutKey k) {
    return mix64(mix64(mix64(k.seed + kGolden) + k.epoch * kGolden) + k.op_id * kGolden);
}

// Element i is kept when the top 32 bits of its hash are >= threshold = p * 2^32, so that
// P(keep) = 1 - p up to 2^-32.
MG_HD uint64_t drop_threshold(float p) {
    return static_cast<uint64_t>(static_cast<double>(p) * 4294967296.0);
}

MG_HD bool keep(uint64_t base, uint64_t i, uint64_t threshold) {
    return (mix64(base + (i + 1) * kGolden) >> 32) >= threshold;
}

}  // namespace dropout_detail
}  // namespace mg
#endif
