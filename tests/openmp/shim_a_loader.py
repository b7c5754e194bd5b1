"""Build and load tests/openmp/shim_a.cpp (the part-A kernels behind extern "C") through cffi."""
from __future__ import annotations

import functools
from pathlib import Path

import cffi
import numpy as np

from morphgen.toolchain import compile_shared, cpu_flags

SHIM_PATH = Path(__file__).with_name("shim_a.cpp")

CDEF = """
typedef long long int64_t;
void mgt_set_threads(int n);
int mgt_max_threads(void);
int mgt_simd_lanes(void);
int mgt_spmm(int64_t n, const int64_t* indptr, const int64_t* col, const float* X, int64_t F, float* Y,
             int reduce, const float* w, const float* scale, int self_loop, const float* bias, int act,
             float alpha, int64_t* argmax);
int mgt_spmm_rows(int64_t n, const int64_t* rows, int64_t count, const int64_t* indptr, const int64_t* col,
                  const float* X, int64_t F, float* Y, int reduce, const float* w, const float* scale,
                  int self_loop, int64_t* argmax);
int mgt_spmm_variant(int tile, int lookahead, int64_t n, const int64_t* indptr, const int64_t* col,
                     const float* X, int64_t F, float* Y, int reduce, const float* w, const float* scale,
                     int self_loop, const float* bias, int act, float alpha, int64_t* argmax);
int mgt_spmm_tile_for(int64_t F);
int mgt_spmm_width_tiled(int64_t n, const int64_t* indptr, const int64_t* col, const float* X, int64_t F, float* Y,
                         int reduce, const float* w, const float* scale, int self_loop, int64_t* argmax);
int mgt_spmm_transpose_width_tiled(int64_t n_src, const int64_t* indptr, const int64_t* t_indptr,
                                   const int64_t* t_col, const int64_t* t_eid, const float* G, int64_t F,
                                   float* dX, int reduce, const float* w, const float* scale, int self_loop);
int mgt_spmm_transpose(int64_t n_src, const int64_t* indptr, const int64_t* t_indptr, const int64_t* t_col,
                       const int64_t* t_eid, const float* G, int64_t F, float* dX, int reduce, const float* w,
                       const float* scale, int self_loop, int accumulate);
int mgt_spmm_max_backward(int64_t n_src, const int64_t* t_indptr, const int64_t* t_col, const int64_t* t_eid,
                          const int64_t* argmax, const float* G, int64_t F, float* dX, const float* w,
                          const float* scale, int self_loop, int accumulate);
int mgt_spmm_edge_weight_grad(int64_t n, const int64_t* indptr, const int64_t* col, const float* X,
                              const float* G, int64_t F, float* dw, int reduce, const float* scale,
                              int self_loop);
int mgt_transpose_csr(int64_t n_rows, int64_t n_cols, const int64_t* indptr, const int64_t* col,
                      int64_t* t_indptr, int64_t* t_row, int64_t* t_pos);
void mgt_gcn_node_scale(int64_t n, const int64_t* indptr, int self_loop, float* scale);
int mgt_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
int mgt_linear_forward(int64_t rows, int64_t in, int64_t out, const float* X, const float* W, float* Y, float beta);
int mgt_linear_weight_grad(int64_t rows, int64_t in, int64_t out, const float* X, const float* G, float* dW,
                           float beta);
int mgt_linear_input_grad(int64_t rows, int64_t in, int64_t out, const float* G, const float* W, float* dX,
                          float beta);
int mgt_gemm_inside_parallel(const float* A, const float* B, float* C);
void mgt_blas_set_threads(int n);
int mgt_blas_threads(void);
void* mgt_sparse_blocks_build(int64_t rows, int64_t K, const int64_t* indptr, const int32_t* col,
                              const float* val, int64_t block_cols, int* status);
void mgt_sparse_blocks_free(void* X);
int mgt_sparse_blocks_forward(void* X, int64_t F, const float* W, float* Y, float p, uint64_t seed,
                              uint64_t epoch, uint64_t site);
int mgt_sparse_blocks_grad(void* X, int64_t F, const float* G, float* dW, int accumulate, float p,
                           uint64_t seed, uint64_t epoch, uint64_t site);
int mgt_tall_skinny_nn(int64_t rows, int64_t K, int64_t M, const float* X, const float* W, float* Y);
int mgt_gemm_rows_epilogue(int64_t rows, int64_t K, int64_t M, const float* X, const float* W, float* Y,
                           const float* bias, int act, float alpha, const float* residual);
int mgt_tall_skinny_tn(int64_t rows, int64_t K, int64_t M, const float* X, const float* G, float* dW);
int mgt_tall_skinny_tn_width(int width, int64_t rows, int64_t K, int64_t M, const float* X, const float* G, float* dW);
int mgt_dropout_keep(uint64_t seed, uint64_t epoch, uint64_t site, float p, int64_t i);
"""

SUM, MEAN, MAX = 0, 1, 2
ACT_NONE, ACT_RELU, ACT_LEAKY, ACT_ELU = 0, 1, 2, 3

ffi = cffi.FFI()
ffi.cdef(CDEF)


# The kernel variants a test can build (kernels/simd.h): "native" takes the widest vector ISA of
# this CPU, "avx2" drops AVX-512 for the 8-lane path, "portable" uses no intrinsics at all.
VARIANT_FLAGS = {"native": (), "avx2": ("-DMG_NO_AVX512",), "portable": ("-DMG_NO_SIMD",)}


# Every distinct code path this CPU can run: the AVX2 build differs from the native one only on
# an AVX-512 machine, and is the native one elsewhere (built once, not twice).
VARIANTS = ("native", "avx2", "portable") if "avx512f" in cpu_flags() else ("native", "portable")


def build(variant: str = "native", sanitize: bool = False, cache_dir=None) -> Path:
    """Build the shim for one kernel variant (VARIANT_FLAGS)."""
    flags = ("-Wall", "-Werror") + VARIANT_FLAGS[variant]
    if sanitize:
        flags += ("-DMGT_DEFAULT_ONLY",)
    return compile_shared({"shim_a.cpp": SHIM_PATH.read_text()}, name=f"shim_a_{variant}",
                          flags=flags, sanitize=sanitize, cache_dir=cache_dir)


@functools.lru_cache(maxsize=None)
def load(variant: str = "native"):
    return ffi.dlopen(str(build(variant)))


def ptr(arr, ctype: str):
    """Pointer to a contiguous numpy array's data (None -> NULL)."""
    if arr is None:
        return ffi.NULL
    assert arr.flags["C_CONTIGUOUS"], "kernel arguments must be C-contiguous"
    return ffi.cast(ctype, arr.ctypes.data)


def f32(a):
    return ptr(a, "float *")


def i64(a):
    return ptr(a, "int64_t *")


def i32(a):
    return ptr(a, "int32_t *")


class SparseBlocks:
    """A column-blocked sparse feature matrix built by the kernel library (freed with the object)."""

    def __init__(self, lib, rows, K, indptr, col, val, block_cols):
        status = ffi.new("int *")
        self.lib, self.arrays = lib, (indptr, col, val)
        self.handle = lib.mgt_sparse_blocks_build(rows, K, i64(indptr), i32(col), f32(val), block_cols, status)
        self.status = status[0]

    def forward(self, F, W, Y, p=0.0, key=(0, 0, 0)):
        return self.lib.mgt_sparse_blocks_forward(self.handle, F, f32(W), f32(Y), p, *key)

    def grad(self, F, G, dW, accumulate=0, p=0.0, key=(0, 0, 0)):
        return self.lib.mgt_sparse_blocks_grad(self.handle, F, f32(G), f32(dW), accumulate, p, *key)

    def __del__(self):
        if self.handle:
            self.lib.mgt_sparse_blocks_free(self.handle)


# ---------------------------------------------------------------------------------------------
# Graph helpers (numpy): the backend's layout is "edges sorted by destination".

class CsrGraph:
    """A random directed graph in the dst-sorted CSR layout plus its by-source transpose."""

    def __init__(self, n, src, dst):
        order = np.argsort(dst, kind="stable")
        self.n = n
        self.src = np.ascontiguousarray(src[order], dtype=np.int64)   # source per CSR position
        self.dst = np.ascontiguousarray(dst[order], dtype=np.int64)
        self.indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(self.dst, minlength=n), out=self.indptr[1:])
        self.col = self.src
        # Transpose (by source), stable in dst-sorted position.
        t_order = np.argsort(self.src, kind="stable")
        self.t_indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(self.src, minlength=n), out=self.t_indptr[1:])
        self.t_col = np.ascontiguousarray(self.dst[t_order])
        self.t_eid = np.ascontiguousarray(t_order.astype(np.int64))

    @property
    def num_edges(self):
        return int(self.src.shape[0])

    @property
    def in_degree(self):
        return np.diff(self.indptr)


def random_graph(rng, n=120, e=700, hubs=3, hub_degree=60, isolated_frac=0.2, parallel_edges=True):
    """Directed, asymmetric, with zero in-degree nodes, a few high in-degree hubs (so the prefetch
    path runs) and, optionally, parallel edges."""
    receivers = rng.choice(n, size=int(n * (1 - isolated_frac)), replace=False)
    dst = rng.choice(receivers, size=e)
    src = rng.integers(0, n, size=e)
    hub_ids = rng.choice(receivers, size=hubs, replace=False)
    hub_dst = np.repeat(hub_ids, hub_degree)
    hub_src = rng.integers(0, n, size=hub_dst.size)
    src = np.concatenate([src, hub_src])
    dst = np.concatenate([dst, hub_dst])
    if parallel_edges:
        src = np.concatenate([src, src[:10]])
        dst = np.concatenate([dst, dst[:10]])
    else:
        key = np.unique(dst * n + src)
        src, dst = key % n, key // n
    return CsrGraph(n, src.astype(np.int64), dst.astype(np.int64))
