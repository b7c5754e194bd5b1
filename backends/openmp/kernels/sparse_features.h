// Sparse input-feature path (Morphling IV-B): X is a sparse [rows x K] matrix, W is dense.
//
//   forward      Y  = X * W        rows streamed through a cache-resident slab of W
//   weight grad  dW = X^T * G      rows scattered into thread-local slabs of dW, one reduction,
//                                  no atomics
//
// Both run over one column-blocked copy of X (`SparseFeatureBlocks`): the K columns are cut into
// blocks of `block_cols`, and each block holds the CSR of its columns with 16-bit column
// offsets. A block of W (or of dW) is block_cols x TILE floats, sized to stay in the per-core L2,
// so the random row reads of W (forward) and read-modify-writes of dW (backward) hit L2 instead
// of L3/DRAM. Wide bag-of-words inputs are where this matters: K = 61,278 makes W 7.8 MB, and
// every non-zero of X touches a random 128-byte row of it.
//
// Why not a CSC for the gradient: the CSC is a second copy of the largest array in the program
// (on NELL-shaped inputs 32M non-zeros, 390 MB with 64-bit indices), and its random reads of G
// have the same cache problem. The blocked copy costs 6 bytes per non-zero and serves both
// directions.
//
// Dropout on X (`FeatureDropout`) is applied inside both kernels from the counter-based mask of
// element (r, c), index r * K + c: the mask is the one the dense path draws for the same element,
// and no dropped copy of X is ever stored. The mask of the stored entries is hashed once per key
// into one bit per entry (`KeepBits`): the forward's column tiles and the weight gradient of the
// same epoch read those bits instead of hashing every entry again (the hash cost as much as the
// product itself).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include <sys/mman.h>

#include "common.h"
#include "dropout.h"
#include "spmm.h"

#ifndef MG_FEATURE_BLOCK_BYTES
#define MG_FEATURE_BLOCK_BYTES (1 << 19)  // a quarter of a 2 MiB L2: room for the streamed rows (measured best)
#endif

namespace mg {

// Dropout on X (p = 0: none).  Row r's mask is that of row row_ids[r] when given (a rank of a
// distributed run holds rows of a larger matrix).
struct FeatureDropout {
    float p = 0.f;
    DropoutKey key{0, 0, 0};
    const std::int64_t* row_ids = nullptr;
};

// The keep mask of every stored entry of X under one FeatureDropout, bit j for entry j of the
// blocked order, with the dropout it was drawn for: recomputed only when that changes.
struct KeepBits {
    std::vector<std::uint64_t> words;
    bool valid = false;
    FeatureDropout drawn_for;
    bool holds(const FeatureDropout& d) const {
        return valid && d.p == drawn_for.p && d.key.seed == drawn_for.key.seed && d.key.epoch == drawn_for.key.epoch &&
               d.key.op_id == drawn_for.key.op_id && d.row_ids == drawn_for.row_ids;
    }
};

struct SparseFeatureBlocks {
    idx_t rows = 0, cols = 0;
    idx_t block_cols = 0;                // columns per block: a power of two <= 65,536 (16-bit offsets)
    idx_t blocks = 0;
    std::vector<std::int64_t> ptr;       // [blocks * rows + 1]; (block b, row r) is ptr[b*rows + r] ..
    std::vector<std::uint16_t> col;      // column offset inside the block
    std::vector<float> val;

    // Thread-local dW slabs of the weight gradient, from 2 MiB on a huge page region: the scatter
    // updates random rows of them, and on 4 KiB pages those updates also miss the TLB.
    struct Slabs {
        float* data = nullptr;
        size_t bytes = 0;
        Slabs() = default;
        Slabs(const Slabs&) = delete;
        Slabs& operator=(const Slabs&) = delete;
        ~Slabs() { std::free(data); }
        float* get(size_t floats) {
            const size_t want = (floats * sizeof(float) + 63) / 64 * 64;
            if (want > bytes) {
                std::free(data);
                const bool huge = want >= kHuge;   // small slabs (narrow inputs) stay on 4 KiB pages
                data = static_cast<float*>(std::aligned_alloc(huge ? kHuge : 64, want));
                bytes = data ? want : 0;
#ifdef MADV_HUGEPAGE
                if (data && huge) madvise(data, want, MADV_HUGEPAGE);  // advice only
#endif
            }
            return data;
        }
        static constexpr size_t kHuge = size_t(2) << 20;
    } scratch;

    // Mutable: a cache of the mask, filled by the kernels that take X const.
    mutable KeepBits keep;

    std::int64_t bytes() const {
        return std::int64_t(ptr.size() * sizeof(std::int64_t) + col.size() * sizeof(std::uint16_t) +
                            val.size() * sizeof(float) + scratch.bytes +
                            keep.words.capacity() * sizeof(std::uint64_t));
    }
};

// Columns per block such that a block of a TILE-wide weight fits MG_FEATURE_BLOCK_BYTES.
template <int TILE = MG_SPMM_TILE>
constexpr idx_t feature_block_cols() {
    constexpr idx_t c = MG_FEATURE_BLOCK_BYTES / (TILE * idx_t(sizeof(float)));
    static_assert(c >= 1 && c <= 65536 && (c & (c - 1)) == 0,
                  "MG_FEATURE_BLOCK_BYTES / (4 * TILE) must be a power of two in [1, 65536]");
    return c;
}

// Build the blocked copy from a CSR (int64 row pointers, int32 column indices: the layout scipy
// uses). Returns kErrArgument for a bad size, a block width that is not a power of two, a
// decreasing indptr or a column out of range.
inline int build_feature_blocks(idx_t rows, idx_t cols, const std::int64_t* indptr, const std::int32_t* indices,
                                const float* data, idx_t block_cols, SparseFeatureBlocks& out) {
    if (rows < 0 || cols < 0 || block_cols < 1 || block_cols > 65536 || (block_cols & (block_cols - 1)) || !indptr)
        return kErrArgument;
    int shift = 0;
    while ((idx_t(1) << shift) < block_cols) ++shift;
    if (indptr[0] != 0) return kErrArgument;
    for (idx_t r = 0; r < rows; ++r)
        if (indptr[r + 1] < indptr[r]) return kErrArgument;
    const std::int64_t nnz = indptr[rows];
    const idx_t blocks = cols == 0 ? 1 : (cols + block_cols - 1) / block_cols;
    out.keep.valid = false;
    out.rows = rows;
    out.cols = cols;
    out.block_cols = block_cols;
    out.blocks = blocks;
    out.ptr.assign(size_t(blocks * rows + 1), 0);
    out.col.resize(size_t(nnz));
    out.val.resize(size_t(nnz));
    std::int64_t* ptr = out.ptr.data();
    int bad = 0;
    // Count the entries of every (block, row) into ptr[b*rows + r + 1]; rows are independent.
#pragma omp parallel for schedule(dynamic, 256) reduction(| : bad)
    for (idx_t r = 0; r < rows; ++r) {
        for (std::int64_t j = indptr[r]; j < indptr[r + 1]; ++j) {
            const idx_t c = indices[j];
            if (c < 0 || c >= cols) {
                bad = 1;
                continue;
            }
            ++ptr[(c >> shift) * rows + r + 1];
        }
    }
    if (bad) return kErrArgument;
    for (idx_t i = 0; i < blocks * rows; ++i) ptr[i + 1] += ptr[i];
    std::uint16_t* col = out.col.data();
    float* val = out.val.data();
#pragma omp parallel
    {
        std::vector<std::int64_t> cursor(size_t(blocks), 0);
#pragma omp for schedule(dynamic, 256)
        for (idx_t r = 0; r < rows; ++r) {
            for (idx_t b = 0; b < blocks; ++b) cursor[size_t(b)] = ptr[b * rows + r];
            for (std::int64_t j = indptr[r]; j < indptr[r + 1]; ++j) {
                const idx_t c = indices[j], b = c >> shift;
                const std::int64_t at = cursor[size_t(b)]++;
                col[at] = static_cast<std::uint16_t>(c & (block_cols - 1));
                val[at] = data ? data[j] : 1.f;
            }
        }
    }
    return kOk;
}

namespace sparse_detail {

// Fills X.keep for `drop` unless it already holds it (call outside a parallel region). Entry j
// of segment (block b, row r) is element (r, b * block_cols + col[j]), dropout index
// row * K + column, as in the dense layout.  Threads take whole 64-bit words of the mask.
inline const std::uint64_t* keep_bits(const SparseFeatureBlocks& X, const FeatureDropout& drop) {
    KeepBits& kb = X.keep;
    if (kb.holds(drop)) return kb.words.data();
    const std::int64_t nnz = X.ptr.empty() ? 0 : X.ptr.back();
    const std::int64_t nwords = (nnz + 63) / 64;
    kb.words.resize(size_t(nwords));
    const std::uint64_t base = dropout_detail::stream_base(drop.key), threshold = dropout_detail::drop_threshold(drop.p);
    const std::int64_t* ptr = X.ptr.data();
    const std::int64_t segments = std::int64_t(X.ptr.size()) - 1;
    constexpr std::int64_t kWordsPerChunk = 256;
#pragma omp parallel for schedule(static) if (nnz > (std::int64_t(1) << 16))
    for (std::int64_t w0 = 0; w0 < nwords; w0 += kWordsPerChunk) {
        // The segment holding the chunk's first entry: the last s with ptr[s] <= that entry.
        std::int64_t s = std::upper_bound(ptr, ptr + segments + 1, w0 * 64) - ptr - 1;
        // Index of the segment's column 0 (row * K + b * block_cols), updated as s advances.
        auto segment_origin = [&](std::int64_t seg) {
            const idx_t b = seg / X.rows, r = seg % X.rows;
            return std::uint64_t((drop.row_ids ? drop.row_ids[r] : r) * X.cols + b * X.block_cols);
        };
        std::uint64_t origin = segment_origin(s);
        const std::int64_t w1 = std::min(nwords, w0 + kWordsPerChunk);
        for (std::int64_t w = w0; w < w1; ++w) {
            alignas(64) std::uint64_t index[64];
            const std::int64_t j0 = w * 64, n = std::min<std::int64_t>(64, nnz - j0);
            for (std::int64_t j = 0; j < n; ++j) {
                if (ptr[s + 1] <= j0 + j) {
                    while (ptr[s + 1] <= j0 + j) ++s;
                    origin = segment_origin(s);
                }
                index[j] = origin + X.col[size_t(j0 + j)];
            }
            std::uint64_t word = 0;
#pragma omp simd reduction(| : word)
            for (std::int64_t j = 0; j < n; ++j)
                word |= std::uint64_t(dropout_detail::keep(base, index[j], threshold)) << j;
            kb.words[size_t(w)] = word;
        }
    }
    kb.valid = true;
    kb.drawn_for = drop;
    return kb.words.data();
}

// Coefficient of entry j of a segment: the stored value, or with a dropout the value rescaled
// where its keep bit is set and 0 where not (branch-free: the bits are random).
struct Plain {
    const float* v;
    MG_INLINE float operator()(idx_t j) const { return v[j]; }
};
struct Kept {
    const float* v;
    const std::uint64_t* bits;
    std::int64_t first;  // the segment's first entry in the blocked order
    float scale;
    MG_INLINE float operator()(idx_t j) const {
        const std::uint64_t at = std::uint64_t(first + j);
        return v[j] * (scale * float((bits[at >> 6] >> (at & 63)) & 1u));
    }
};

// Calls body(coef) with the coefficient functor of the segment starting at entry `start`;
// `bits` is keep_bits(X, drop) when drop.p > 0.
template <class Body>
MG_INLINE void with_coef(const SparseFeatureBlocks& X, const FeatureDropout& drop, const std::uint64_t* bits,
                         std::int64_t start, const Body& body) {
    if (drop.p <= 0.f) {
        body(Plain{X.val.data() + start});
        return;
    }
    body(Kept{X.val.data() + start, bits, start, 1.f / (1.f - drop.p)});
}

// slab[c[j], 0:width) += coef(j) * g[0:width) for the n entries of one row (the row of G is
// loaded once and kept in registers).
template <int TILE, bool MASKED, class Coef>
MG_INLINE void scatter_row(const std::uint16_t* MG_RESTRICT c, std::int64_t n, const Coef& coef,
                           const float* MG_RESTRICT g, int width, float* MG_RESTRICT slab) {
#if MG_HAVE_SIMD
    using namespace simd;
    constexpr int NV = TILE / kLanes;
    vf gv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
        gv[v] = MASKED ? load(lanes(width - kLanes * v), g + kLanes * v) : load(g + kLanes * v);
    for (std::int64_t j = 0; j < n; ++j) {
        float* d = slab + idx_t(c[j]) * TILE;
        const vf x = set1(coef(j));
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v)
            store_aligned(d + kLanes * v, fmadd(x, gv[v], load_aligned(d + kLanes * v)));
    }
#else
    const int w = MASKED ? width : TILE;
    for (std::int64_t j = 0; j < n; ++j) {
        float* d = slab + idx_t(c[j]) * TILE;
        const float x = coef(j);
#pragma omp simd
        for (int f = 0; f < w; ++f) d[f] += x * g[f];
    }
#endif
}

}  // namespace sparse_detail

// Y = drop(X) * W, W row-major [K x F] with leading dimension F, Y [rows x F].
template <int TILE = MG_SPMM_TILE>
int sparse_linear_forward(const SparseFeatureBlocks& X, const float* W, idx_t F, float* Y,
                          const FeatureDropout& drop = FeatureDropout{}) {
    static_assert(TILE > 0 && TILE <= 256, "tile width must lie in (0, 256]");
    if (F < 0 || X.blocks < 1) return kErrArgument;
    using namespace spmm_detail;
    const idx_t rows = X.rows;
    const Epilogue none{};
    const std::uint64_t* bits = drop.p > 0.f ? sparse_detail::keep_bits(X, drop) : nullptr;
#pragma omp parallel
    {
        alignas(64) float vals[TILE];
        for (idx_t f0 = 0; f0 < F; f0 += TILE) {
            const int width = static_cast<int>(F - f0 < TILE ? F - f0 : TILE);
            for (idx_t b = 0; b < X.blocks; ++b) {
                const float* Wb = W + b * X.block_cols * F;
                // The implicit barrier at the end of each block orders the accumulation into Y.
#pragma omp for schedule(dynamic, 64)
                for (idx_t r = 0; r < rows; ++r) {
                    const std::int64_t start = X.ptr[size_t(b * rows + r)];
                    const std::int64_t n = X.ptr[size_t(b * rows + r + 1)] - start;
                    if (n == 0 && b > 0) continue;
                    sparse_detail::with_coef(X, drop, bits, start, [&](const auto& coef) {
                        if (width == TILE) gather_sum<TILE, 0, false>(X.col.data() + start, n, n, coef, Wb, F, f0, width, vals);
                        else gather_sum<TILE, 0, true>(X.col.data() + start, n, n, coef, Wb, F, f0, width, vals);
                    });
                    finish_tile(vals, width, 1.f, nullptr, 0.f, none, nullptr, b > 0, Y + r * F + f0);
                }
            }
        }
    }
    return kOk;
}

// dW (+)= drop(X)^T * G, G [rows x F], dW [K x F]. Each thread scatters its rows into a private
// block_cols x TILE slab; the slabs of one block are then summed into dW, rows split over threads.
template <int TILE = MG_SPMM_TILE>
int sparse_weight_grad(SparseFeatureBlocks& X, const float* G, idx_t F, float* dW, bool accumulate = false,
                       const FeatureDropout& drop = FeatureDropout{}) {
    static_assert(TILE > 0 && TILE <= 256 && TILE % 16 == 0, "tile width must be a multiple of 16 in (0, 256]");
    if (F < 0 || X.blocks < 1) return kErrArgument;
    const int T = omp_get_max_threads();
    // A block is never wider than the matrix; a multiple of 16 floats keeps every slab 64-byte aligned.
    const idx_t slab_rows = std::min(X.block_cols, (X.cols + 15) / 16 * 16);
    const size_t slab_floats = size_t(slab_rows) * TILE;
    float* base = X.scratch.get(size_t(T) * slab_floats);
    if (!base) return kErrNoMemory;
    const idx_t rows = X.rows;
    const std::uint64_t* bits = drop.p > 0.f ? sparse_detail::keep_bits(X, drop) : nullptr;
#pragma omp parallel num_threads(T)
    {
        const int t = omp_get_thread_num(), team = omp_get_num_threads();
        float* mine = base + size_t(t) * slab_floats;
        for (idx_t f0 = 0; f0 < F; f0 += TILE) {
            const int width = static_cast<int>(F - f0 < TILE ? F - f0 : TILE);
            for (idx_t b = 0; b < X.blocks; ++b) {
                const idx_t k0 = b * X.block_cols;
                const idx_t kn = (X.cols - k0 < X.block_cols ? X.cols - k0 : X.block_cols);
                std::fill(mine, mine + size_t(kn) * TILE, 0.f);
                // Static chunks: which rows land in which thread's slab must not depend on timing,
                // or the slabs' sums (and the run's bits) would change from run to run.
#pragma omp for schedule(static, 64)
                for (idx_t r = 0; r < rows; ++r) {
                    const std::int64_t start = X.ptr[size_t(b * rows + r)];
                    const std::int64_t n = X.ptr[size_t(b * rows + r + 1)] - start;
                    if (n == 0) continue;
                    const float* g = G + r * F + f0;
                    sparse_detail::with_coef(X, drop, bits, start, [&](const auto& coef) {
                        if (width == TILE) sparse_detail::scatter_row<TILE, false>(X.col.data() + start, n, coef, g, width, mine);
                        else sparse_detail::scatter_row<TILE, true>(X.col.data() + start, n, coef, g, width, mine);
                    });
                }
                // (implicit barrier: every slab of this block is complete)
#pragma omp for schedule(static)
                for (idx_t k = 0; k < kn; ++k) {
                    float* MG_RESTRICT out = dW + (k0 + k) * F + f0;
                    float sum[TILE];
#pragma omp simd
                    for (int f = 0; f < TILE; ++f) sum[f] = 0.f;
                    for (int s = 0; s < team; ++s) {
                        const float* MG_RESTRICT part = base + size_t(s) * slab_floats + size_t(k) * TILE;
#pragma omp simd
                        for (int f = 0; f < TILE; ++f) sum[f] += part[f];
                    }
                    for (int f = 0; f < width; ++f) out[f] = (accumulate ? out[f] : 0.f) + sum[f];
                }
                // (implicit barrier: the slabs are reused by the next block)
            }
        }
    }
    return kOk;
}

}  // namespace mg
