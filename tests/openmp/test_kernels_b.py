"""Part-B OpenMP kernels (elementwise, edge ops, dropout, loss, edge softmax, optimizers, typed
linear) against numpy references, through the cffi shim in shim_b.cpp.

Gradients are checked twice: against an analytic numpy reference, and by a directional finite
difference of the C++ forward kernel (L = <w, f(x)>, dL/dh along a random direction).

MG_SHIM_SANITIZE=1 builds the shim with AddressSanitizer + UBSan; test_sanitized_run re-runs
this module that way in a subprocess.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cffi import FFI

from morphgen import toolchain

HERE = Path(__file__).resolve().parent
SANITIZED = os.environ.get("MG_SHIM_SANITIZE") == "1"
WIDTHS = (1, 3, 7, 31, 33, 47)

CDEF = """
void mgb_set_threads(int n);
int mgb_max_threads(void);
int mgb_unary_fwd(int kind, const float* x, float* y, int64_t n, float alpha);
int mgb_unary_bwd(int kind, const float* x, const float* y, const float* gy, float* gx, int64_t n, float alpha);
void mgb_math_fwd(int fn, float c, const float* x, float* y, int64_t n);
void mgb_math_bwd(int fn, float c, const float* gy, const float* x, float* gx, int64_t n);
void mgb_binary_fwd(int op, const float* a, int sa, const float* b, int sb, float* out, int64_t rows, int64_t cols);
void mgb_binary_bwd(int op, const float* a, int sa, const float* b, int sb, const float* g, float* ga, float* gb,
                    int64_t rows, int64_t cols);
void mgb_scaled_add(float ca, const float* a, float cb, const float* b, float* out, int64_t rows, int64_t cols,
                    const float* bias, int act, float alpha);
void mgb_bias_add(const float* x, const float* b, float* y, int64_t rows, int64_t cols);
void mgb_row_sum(const float* x, float* out, int64_t rows, int64_t cols);
void mgb_accumulate(const float* x, float* y, int64_t n);
void mgb_rowwise_dot_fwd(const float* a, const float* b, int b_is_row, float* out, int64_t rows, int64_t heads,
                         int64_t dim);
void mgb_rowwise_dot_bwd(const float* a, const float* b, int b_is_row, const float* g, float* ga, float* gb,
                         int64_t rows, int64_t heads, int64_t dim);
void mgb_concat_fwd(const float* const* parts, const int64_t* widths, int64_t nparts, float* out, int64_t rows);
void mgb_concat_bwd(const float* g, const int64_t* widths, int64_t nparts, float* const* grads, int64_t rows);
void mgb_slice_fwd(const float* x, int64_t rows, int64_t cols, int64_t start, int64_t width, float* y);
void mgb_slice_bwd(const float* gy, int64_t rows, int64_t cols, int64_t start, int64_t width, float* gx);
void mgb_gather_src(const float* x, const int64_t* col, int64_t E, int64_t F, float* out);
void mgb_gather_dst(const float* x, const int64_t* indptr, int64_t N, int64_t F, float* out);
void mgb_gather_src_bwd(const float* g, const int64_t* t_indptr, const int64_t* t_eid, int64_t N, int64_t F,
                        float* gx);
void mgb_gather_dst_bwd(const float* g, const int64_t* indptr, int64_t N, int64_t F, float* gx);
void mgb_scatter_dst(int r, const float* m, const int64_t* indptr, int64_t N, int64_t F, float* out,
                     int64_t* argmax);
void mgb_scatter_dst_bwd(int r, const float* g, const int64_t* indptr, int64_t N, int64_t F,
                         const int64_t* argmax, float* gm);
void mgb_scatter_src(int r, const float* m, const int64_t* t_indptr, const int64_t* t_eid, int64_t N, int64_t F,
                     float* out, int64_t* argmax);
void mgb_weighted_gather_scatter(int to_dst, const float* x, const float* w, const int64_t* indptr,
                                 const int64_t* other, const int64_t* eid, int64_t N, int64_t H, int64_t D,
                                 float* out);
void mgb_edge_dot(const float* a, int a_at, const float* b, int b_at, const int64_t* indptr, const int64_t* col,
                  int64_t N, int64_t H, int64_t D, float* out);
void mgb_weighted_gather(int x_at, const float* x, const float* w, const int64_t* indptr, const int64_t* col,
                         int64_t N, int64_t H, int64_t D, float* out);
void mgb_scatter_src_bwd(int r, const float* g, const int64_t* col, const int64_t* t_indptr, int64_t E, int64_t F,
                         const int64_t* argmax, float* gm);
void mgb_dropout_fwd(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t epoch, uint64_t op);
void mgb_dropout_bwd(const float* gy, float* gx, int64_t n, float p, uint64_t seed, uint64_t epoch, uint64_t op);
int64_t mgb_dropout_mask_words(int64_t n);
void mgb_dropout_fwd_mask(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t epoch, uint64_t op,
                          uint64_t* bits);
void mgb_dropout_bwd_mask(const float* gy, float* gx, int64_t n, float p, const uint64_t* bits);
float mgb_softmax_cross_entropy(const float* logits, const int64_t* labels, const uint8_t* mask, int64_t rows,
                                int64_t classes, float* dlogits);
int64_t mgb_count_correct(const float* logits, const int64_t* labels, const uint8_t* mask, int64_t rows,
                          int64_t classes);
void mgb_edge_softmax_fwd(const float* s, const int64_t* indptr, int64_t N, int64_t H, float* alpha);
void mgb_edge_softmax_bwd(const float* alpha, const float* g, const int64_t* indptr, int64_t N, int64_t H,
                          float* ds);
void mgb_adam_step(float* p, const float* g, float* m, float* v, int64_t n, double lr, double b1, double b2,
                   double eps, double wd, int64_t step, int decoupled);
void mgb_sgd_step(float* p, const float* g, float* buf, int64_t n, double lr, double momentum, double dampening,
                  double wd, int nesterov, int64_t step);
void mgb_segment_row_sums(const int64_t* ptr, const int64_t* idx, int64_t segments, const float* src,
                          int64_t width, float* out);
int mgb_group_rows_by_type(const int64_t* type, int64_t R, int64_t T, int64_t* perm, int64_t* type_ptr);
int mgb_tl_segment_fwd(const float* X, const float* W, float* Y, const int64_t* type_ptr, int64_t T, int64_t K,
                       int64_t M);
int mgb_tl_segment_bwd(const float* X, const float* W, const float* G, const int64_t* type_ptr, int64_t T,
                       int64_t K, int64_t M, float* dX, float* dW);
int64_t mgb_tl_workspace_floats(const int64_t* type_ptr, int64_t T, int64_t K, int64_t M);
int mgb_tl_gather_fwd(const float* X, const float* W, float* Y, const int64_t* perm, const int64_t* type_ptr,
                      int64_t T, int64_t K, int64_t M, float* workspace, const int64_t* x_rows);
int mgb_tl_gather_bwd(const float* X, const float* W, const float* G, const int64_t* perm, const int64_t* type_ptr,
                      int64_t T, int64_t K, int64_t M, float* dX, float* dW, float* workspace,
                      const int64_t* x_rows);
void mgb_embedding_fwd(const float* table, const int64_t* type, const int64_t* src_row, int64_t R,
                       int64_t rows_per_type, int64_t M, float* Y);
int64_t mgb_embedding_grad_plan(const int64_t* type, const int64_t* src_row, int64_t R, int64_t T,
                                int64_t rows_per_type, int64_t* order, int64_t* key_ptr, int64_t* keys);
void mgb_embedding_bwd(const float* G, const int64_t* order, const int64_t* key_ptr, const int64_t* keys,
                       int64_t num_keys, int64_t table_rows, int64_t M, float* dtable);
void mgb_embedding_bwd_rows(const float* G, const int64_t* order, const int64_t* key_ptr, const int64_t* keys,
                            int64_t num_keys, int64_t M, float* dtable);
void mgb_basis_fwd(const float* A, const float* V, const int64_t* order, const int64_t* key_ptr, const int64_t* keys,
                   int64_t num_keys, int64_t T, int64_t B, int64_t P, int64_t M, float* Y);
void mgb_basis_coef_bwd(const float* V, const float* G, const int64_t* order, const int64_t* key_ptr,
                        const int64_t* keys, const int64_t* row_start, int64_t num_rows, int64_t T, int64_t B,
                        int64_t P, int64_t M, float* dA);
void mgb_basis_bases_bwd(const float* A, const float* G, const int64_t* order, const int64_t* key_ptr,
                         const int64_t* keys, const int64_t* row_start, int64_t num_rows, int64_t T, int64_t B,
                         int64_t P, int64_t M, float* dV);
void mgb_adam_rows_step(float* p, const float* g, float* m, float* v, int64_t rows, int64_t width,
                        const int64_t* keys, int64_t num_keys, double lr, double b1, double b2, double eps, double wd,
                        int64_t step, int decoupled);
void mgb_adam_listed_rows_step(float* p, const float* g, float* m, float* v, int64_t width, const int64_t* rows,
                               const uint8_t* has_grad, int64_t n, double lr, double b1, double b2, double eps,
                               double wd, int64_t step, int decoupled, int packed);
"""

ffi = FFI()
ffi.cdef(CDEF)


def load_shim():
    src = (HERE / "shim_b.cpp").read_text()
    so = toolchain.compile_shared({"shim_b.cpp": src}, name="kernels_b_shim", sanitize=SANITIZED)
    return ffi.dlopen(str(so))


@pytest.fixture(scope="module")
def lib():
    return load_shim()


# ---- helpers ------------------------------------------------------------------------------

def F(a: np.ndarray):
    """float* into a float32 C-contiguous array (refuses silent copies)."""
    assert a.dtype == np.float32 and a.flags.c_contiguous, (a.dtype, a.flags)
    return ffi.from_buffer("float[]", a)


def I(a: np.ndarray):
    assert a.dtype == np.int64 and a.flags.c_contiguous
    return ffi.from_buffer("int64_t[]", a)


def U8(a: np.ndarray):
    assert a.dtype == np.uint8 and a.flags.c_contiguous
    return ffi.from_buffer("uint8_t[]", a)


def U64(a: np.ndarray):
    assert a.dtype == np.uint64 and a.flags.c_contiguous
    return ffi.from_buffer("uint64_t[]", a)


def rand(rng, *shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def away_from_zero(rng, *shape, gap=0.05):
    x = rand(rng, *shape)
    return np.where(np.abs(x) < gap, np.sign(x + 1e-9) * gap + x, x).astype(np.float32)


def directional_fd(fwd, inputs: list, grads: list, w: np.ndarray, rng, h=1e-2, rtol=2e-2, atol=1e-4):
    """Checks <grad_i, d> == d/dt <w, fwd(inputs + t d)> for one random direction per input."""
    for i, (x, gx) in enumerate(zip(inputs, grads)):
        if gx is None:
            continue
        d = rand(rng, *x.shape)

        def loss(t):
            moved = [a if j != i else (a + t * d).astype(np.float32) for j, a in enumerate(inputs)]
            return float(np.sum(w.astype(np.float64) * fwd(*moved).astype(np.float64)))

        numeric = (loss(h) - loss(-h)) / (2 * h)
        analytic = float(np.sum(gx.astype(np.float64) * d))
        assert abs(numeric - analytic) <= atol + rtol * max(abs(numeric), abs(analytic)), (i, numeric, analytic)


def make_graph(rng, n=40, e=150, isolated=(3, 7)):
    """Random directed multigraph; nodes in `isolated` have no in-edges and no out-edges."""
    allowed = np.setdiff1d(np.arange(n), isolated)
    src = rng.choice(allowed, size=e)
    dst = rng.choice(allowed[: len(allowed) // 2], size=e)  # half the nodes get no in-edges
    order = np.argsort(dst, kind="stable")
    col = np.ascontiguousarray(src[order], dtype=np.int64)
    dst_sorted = np.ascontiguousarray(dst[order], dtype=np.int64)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst_sorted, minlength=n), out=indptr[1:])
    t_eid = np.argsort(col, kind="stable").astype(np.int64)
    t_indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(col, minlength=n), out=t_indptr[1:])
    return dict(n=n, e=e, col=col, dst=dst_sorted, indptr=indptr, t_indptr=t_indptr, t_eid=t_eid,
                t_col=np.ascontiguousarray(dst_sorted[t_eid]))


# ---- activations ----------------------------------------------------------------------------

ALPHA = 0.2
UNARY = {  # kind: (forward, derivative as a function of x)
    0: (lambda x: np.maximum(x, 0), lambda x: (x > 0).astype(np.float64)),
    1: (lambda x: np.where(x > 0, x, ALPHA * x), lambda x: np.where(x > 0, 1.0, ALPHA)),
    2: (lambda x: np.where(x > 0, x, ALPHA * np.expm1(x)), lambda x: np.where(x > 0, 1.0, ALPHA * np.exp(x))),
    3: (np.exp, np.exp),
    4: (lambda x: 1 / (1 + np.exp(-x)), lambda x: np.exp(-x) / (1 + np.exp(-x)) ** 2),
    5: (np.tanh, lambda x: 1 - np.tanh(x) ** 2),
    6: (lambda x: -x, lambda x: -np.ones_like(x)),
    7: (lambda x: ALPHA * x, lambda x: ALPHA * np.ones_like(x)),
}


@pytest.mark.parametrize("kind", sorted(UNARY))
@pytest.mark.parametrize("n", [1, 33, 70001])  # 70001 crosses the parallel threshold
def test_unary_forward_backward(lib, kind, n):
    rng = np.random.default_rng(kind * 100 + n)
    x = away_from_zero(rng, n) * 3
    y = np.empty_like(x)
    assert lib.mgb_unary_fwd(kind, F(x), F(y), n, ALPHA) == 0
    ref, dref = UNARY[kind]
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, ref(x64), rtol=2e-6, atol=1e-7)
    gy = rand(rng, n)
    gx = np.empty_like(x)
    assert lib.mgb_unary_bwd(kind, F(x), F(y), F(gy), F(gx), n, ALPHA) == 0
    np.testing.assert_allclose(gx, gy * dref(x64), rtol=1e-5, atol=1e-6)
    if n <= 33:
        def fwd(a):
            out = np.empty_like(a)
            lib.mgb_unary_fwd(kind, F(a), F(out), a.size, ALPHA)
            return out
        directional_fd(fwd, [x], [gx], gy, rng, h=1e-3)


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("n", [32769, 70001])
def test_unary_kernels_cover_every_element_once_on_any_thread_count(lib, threads, n):
    """Each thread of the team takes one contiguous range of the elements: every element is
    written once, by the same arithmetic, for thread counts that do and do not divide n."""
    rng = np.random.default_rng(n + threads)
    x = away_from_zero(rng, n) * 3
    lib.mgb_set_threads(threads)
    try:
        for kind, (ref, _) in sorted(UNARY.items()):
            y = np.full_like(x, np.nan)
            assert lib.mgb_unary_fwd(kind, F(x), F(y), n, ALPHA) == 0
            np.testing.assert_allclose(y, ref(x.astype(np.float64)), rtol=2e-6, atol=1e-7)
    finally:
        lib.mgb_set_threads(os.cpu_count() or 1)


def _wide_range(rng, n=20000):
    """Magnitudes from subnormal to near FLT_MAX, both signs, and the special values."""
    mags = np.exp(rng.uniform(np.log(1e-44), np.log(3e38), n))
    special = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-30, 1e-7, 0.4999, 0.5001, 9.0, 20.0, 88.0, 100.0,
               np.inf, -np.inf, np.nan]
    return np.concatenate([mags * rng.choice([-1.0, 1.0], n), special]).astype(np.float32)


def _assert_close_in_ulps(got, want, ulps, tiny=1e-37):
    """float32 results within `ulps` units in the last place of the float64 truth (NaN where the
    truth is NaN, the same infinity where it is infinite)."""
    want = np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want) & ~np.isnan(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    ulp = np.spacing(np.abs(want[finite]).astype(np.float32)).astype(np.float64)
    err = np.abs(got[finite].astype(np.float64) - want[finite])
    worst = np.argmax(err / np.maximum(ulp, tiny))
    assert np.all(err <= ulps * np.maximum(ulp, tiny)), \
        f"{err[worst] / ulp[worst]:.1f} ulps at x giving {want[finite][worst]!r} (got {got[finite][worst]!r})"


def test_tanh_log_and_softplus_are_accurate_from_subnormals_to_infinity(lib):
    """The vectorised tanh, log, log1p and softplus against float64 numpy over the whole float
    range, each within a few ulps (the kernels replace libm calls that did not vectorise)."""
    rng = np.random.default_rng(7)
    x = _wide_range(rng)
    x64 = x.astype(np.float64)
    y = np.empty_like(x)
    assert lib.mgb_unary_fwd(5, F(x), F(y), x.size, 0.0) == 0
    _assert_close_in_ulps(y, np.tanh(x64), 4)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lib.mgb_math_fwd(2, 0.0, F(x), F(y), x.size)
        _assert_close_in_ulps(y, np.log(x64), 2)
        lib.mgb_math_fwd(6, 0.0, F(x), F(y), x.size)
        _assert_close_in_ulps(y, np.logaddexp(0.0, x64), 4)
        g = np.ones_like(x)
        lib.mgb_math_bwd(6, 0.0, F(g), F(x), F(y), x.size)
        _assert_close_in_ulps(y, 1.0 / (1.0 + np.exp(-x64)), 4)


def test_sigmoid_extreme_inputs_stay_finite(lib):
    x = np.array([-1e4, -100, -20, 0, 20, 100, 1e4], np.float32)
    y = np.empty_like(x)
    lib.mgb_unary_fwd(4, F(x), F(y), x.size, 0)
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y, [0, 0, 2.06e-9, 0.5, 1, 1, 1], rtol=1e-2, atol=1e-12)


def test_relu_backward_is_zero_at_zero(lib):
    x = np.zeros(5, np.float32)
    y = np.empty_like(x)
    gx = np.empty_like(x)
    lib.mgb_unary_fwd(0, F(x), F(y), 5, 0)
    lib.mgb_unary_bwd(0, F(x), F(y), F(np.ones(5, np.float32)), F(gx), 5, 0)
    assert np.all(gx == 0)


# ---- broadcasting binary ops ----------------------------------------------------------------

FULL, COL, ROW, SCALAR = 0, 1, 2, 3
OPS = {0: np.add, 1: np.subtract, 2: np.multiply, 3: np.divide}


def operand(rng, shape_kind, rows, cols, positive=False):
    shape = {FULL: (rows, cols), COL: (rows, 1), ROW: (1, cols), SCALAR: (1, 1)}[shape_kind]
    a = rand(rng, *shape)
    if positive:
        a = (np.abs(a) + 0.5).astype(np.float32)
    return a


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("sa,sb", [(FULL, FULL), (FULL, COL), (FULL, ROW), (FULL, SCALAR), (COL, FULL),
                                   (ROW, FULL), (SCALAR, FULL), (COL, ROW)])
@pytest.mark.parametrize("cols", [1, 7, 33])
def test_binary_broadcast(lib, op, sa, sb, cols):
    rng = np.random.default_rng(op * 1000 + sa * 100 + sb * 10 + cols)
    rows = 29
    a = operand(rng, sa, rows, cols)
    b = operand(rng, sb, rows, cols, positive=(op == 3))
    out = np.empty((rows, cols), np.float32)
    lib.mgb_binary_fwd(op, F(a), sa, F(b), sb, F(out), rows, cols)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(out, OPS[op](a64, b64) * np.ones((rows, cols)), rtol=1e-6, atol=1e-7)

    g = rand(rng, rows, cols)
    ga, gb = np.empty_like(a), np.empty_like(b)
    lib.mgb_binary_bwd(op, F(a), sa, F(b), sb, F(g), F(ga), F(gb), rows, cols)
    g64 = g.astype(np.float64)
    da, db = {0: (g64, g64), 1: (g64, -g64), 2: (g64 * b64, g64 * a64),
              3: (g64 / b64, -g64 * a64 / b64 ** 2)}[op]

    def reduce_like(full, like):
        full = full * np.ones((rows, cols))
        if like.shape[0] == 1:
            full = full.sum(axis=0, keepdims=True)
        if like.shape[1] == 1:
            full = full.sum(axis=1, keepdims=True)
        return full

    np.testing.assert_allclose(ga, reduce_like(da, a), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gb, reduce_like(db, b), rtol=1e-5, atol=1e-5)

    def fwd(a_, b_):
        o = np.empty((rows, cols), np.float32)
        lib.mgb_binary_fwd(op, F(a_), sa, F(b_), sb, F(o), rows, cols)
        return o
    directional_fd(fwd, [a, b], [ga, gb], g, rng, h=1e-3)


@pytest.mark.parametrize("rows,cols", [(29, 7), (9000, 33)])      # below and above the parallel threshold
@pytest.mark.parametrize("epilogue", [False, True])
def test_scaled_add_is_two_scales_and_an_add(lib, rows, cols, epilogue):
    """scaled_add(ca, a, cb, b) = ca * a + cb * b, then the fused bias and ReLU when given
    (an add or sub whose operands constant scales fed, the emitter's plan_scaled_operands)."""
    rng = np.random.default_rng(rows + cols + epilogue)
    a, b, bias = rand(rng, rows, cols), rand(rng, rows, cols), rand(rng, 1, cols)
    out = np.empty((rows, cols), np.float32)
    lib.mgb_scaled_add(0.9, F(a), -0.1, F(b), F(out), rows, cols, F(bias) if epilogue else ffi.NULL,
                       1 if epilogue else 0, 0.0)
    want = 0.9 * a.astype(np.float64) - 0.1 * b.astype(np.float64)
    if epilogue:
        want = np.maximum(want + bias, 0.0)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)


def test_binary_backward_skips_null_gradient(lib):
    rng = np.random.default_rng(5)
    a, b, g = rand(rng, 4, 3), rand(rng, 1, 3), rand(rng, 4, 3)
    gb = np.empty_like(b)
    lib.mgb_binary_bwd(2, F(a), FULL, F(b), ROW, F(g), ffi.NULL, F(gb), 4, 3)
    np.testing.assert_allclose(gb, (g * a).sum(0, keepdims=True), rtol=1e-5)


def test_large_row_broadcast_reduction_uses_all_threads_consistently(lib):
    # 9000 x 33 crosses the parallel threshold: thread-local partials plus one reduction.
    rng = np.random.default_rng(11)
    a, b, g = rand(rng, 9000, 33), rand(rng, 1, 33), rand(rng, 9000, 33)
    ga, gb = np.empty_like(a), np.empty_like(b)
    lib.mgb_binary_bwd(2, F(a), FULL, F(b), ROW, F(g), F(ga), F(gb), 9000, 33)
    np.testing.assert_allclose(gb, (g.astype(np.float64) * a).sum(0, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ga, g * b, rtol=1e-6)


# ---- bias, row sum, dot, concat, slice --------------------------------------------------------

@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("rows", [1, 17, 5000])
def test_bias_add_and_row_sum(lib, rows, cols):
    rng = np.random.default_rng(rows * 100 + cols)
    x, bias = rand(rng, rows, cols), rand(rng, cols)
    y = np.empty_like(x)
    lib.mgb_bias_add(F(x), F(bias), F(y), rows, cols)
    np.testing.assert_allclose(y, x + bias, rtol=1e-6)
    s = np.empty(cols, np.float32)
    lib.mgb_row_sum(F(x), F(s), rows, cols)
    np.testing.assert_allclose(s, x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)

    def fwd(b_):
        out = np.empty_like(x)
        lib.mgb_bias_add(F(x), F(b_), F(out), rows, cols)
        return out
    g = rand(rng, rows, cols)
    gbias = np.empty(cols, np.float32)
    lib.mgb_row_sum(F(g), F(gbias), rows, cols)
    directional_fd(fwd, [bias], [gbias], g, rng, h=1e-2)


def test_accumulate(lib):
    rng = np.random.default_rng(2)
    x, y = rand(rng, 100), rand(rng, 100)
    expect = x + y
    lib.mgb_accumulate(F(x), F(y), 100)
    np.testing.assert_allclose(y, expect, rtol=1e-6)


@pytest.mark.parametrize("heads,dim", [(1, 1), (1, 7), (2, 3), (4, 33)])
@pytest.mark.parametrize("b_is_row", [0, 1])
def test_rowwise_dot(lib, heads, dim, b_is_row):
    rng = np.random.default_rng(heads * 100 + dim + b_is_row)
    rows, w = 23, heads * dim
    a = rand(rng, rows, w)
    b = rand(rng, w) if b_is_row else rand(rng, rows, w)
    out = np.empty((rows, heads), np.float32)
    lib.mgb_rowwise_dot_fwd(F(a), F(b), b_is_row, F(out), rows, heads, dim)
    bb = np.broadcast_to(b, (rows, w)).astype(np.float64)
    ref = (a.astype(np.float64) * bb).reshape(rows, heads, dim).sum(-1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    g = rand(rng, rows, heads)
    ga, gb = np.empty_like(a), np.empty_like(b)
    lib.mgb_rowwise_dot_bwd(F(a), F(b), b_is_row, F(g), F(ga), F(gb), rows, heads, dim)
    gexp = np.repeat(g.astype(np.float64), dim, axis=1)
    np.testing.assert_allclose(ga, gexp * bb, rtol=1e-5, atol=1e-6)
    gb_ref = gexp * a
    np.testing.assert_allclose(gb, gb_ref.sum(0) if b_is_row else gb_ref, rtol=1e-5, atol=1e-5)

    def fwd(a_, b_):
        o = np.empty((rows, heads), np.float32)
        lib.mgb_rowwise_dot_fwd(F(a_), F(b_), b_is_row, F(o), rows, heads, dim)
        return o
    directional_fd(fwd, [a, b], [ga, gb], g, rng)


def test_concat_and_slice(lib):
    rng = np.random.default_rng(3)
    rows, widths = 13, [1, 7, 33]
    parts = [rand(rng, rows, w) for w in widths]
    total = sum(widths)
    out = np.empty((rows, total), np.float32)
    keep = [F(p) for p in parts]
    lib.mgb_concat_fwd(ffi.new("const float*[]", keep), I(np.array(widths, np.int64)), 3, F(out), rows)
    np.testing.assert_array_equal(out, np.concatenate(parts, axis=1))

    g = rand(rng, rows, total)
    grads = [np.empty_like(p) for p in parts]
    gkeep = [F(gr) for gr in grads]
    gkeep[1] = ffi.NULL  # a part without a gradient is skipped
    lib.mgb_concat_bwd(F(g), I(np.array(widths, np.int64)), 3, ffi.new("float*[]", gkeep), rows)
    np.testing.assert_array_equal(grads[0], g[:, :1])
    np.testing.assert_array_equal(grads[2], g[:, 8:])

    y = np.empty((rows, 7), np.float32)
    lib.mgb_slice_fwd(F(out), rows, total, 1, 7, F(y))
    np.testing.assert_array_equal(y, parts[1])
    gy = rand(rng, rows, 7)
    gx = np.full((rows, total), 9.0, np.float32)
    lib.mgb_slice_bwd(F(gy), rows, total, 1, 7, F(gx))
    expect = np.zeros((rows, total), np.float32)
    expect[:, 1:8] = gy
    np.testing.assert_array_equal(gx, expect)


# ---- edge gather / scatter --------------------------------------------------------------------

SUM, MEAN, MAX = 0, 1, 2


def np_scatter(m, seg_of_edge, n, reduce):
    F_ = m.shape[1]
    out = np.zeros((n, F_), np.float64)
    if reduce == MAX:
        out[:] = -np.inf
        np.maximum.at(out, seg_of_edge, m)
        out[np.isinf(out)] = 0
        return out
    np.add.at(out, seg_of_edge, m)
    if reduce == MEAN:
        cnt = np.bincount(seg_of_edge, minlength=n)
        out /= np.maximum(cnt, 1)[:, None]
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_gather_and_backward(lib, width):
    rng = np.random.default_rng(width)
    G = make_graph(rng)
    n, e = G["n"], G["e"]
    x = rand(rng, n, width)
    out = np.empty((e, width), np.float32)
    lib.mgb_gather_src(F(x), I(G["col"]), e, width, F(out))
    np.testing.assert_array_equal(out, x[G["col"]])
    lib.mgb_gather_dst(F(x), I(G["indptr"]), n, width, F(out))
    np.testing.assert_array_equal(out, x[G["dst"]])

    g = rand(rng, e, width)
    gx = np.full((n, width), 7.0, np.float32)
    lib.mgb_gather_src_bwd(F(g), I(G["t_indptr"]), I(G["t_eid"]), n, width, F(gx))
    np.testing.assert_allclose(gx, np_scatter(g, G["col"], n, SUM), rtol=1e-5, atol=1e-6)
    lib.mgb_gather_dst_bwd(F(g), I(G["indptr"]), n, width, F(gx))
    np.testing.assert_allclose(gx, np_scatter(g, G["dst"], n, SUM), rtol=1e-5, atol=1e-6)
    assert np.all(gx[[3, 7]] == 0)  # isolated nodes


# The in-place traversals against gather -> scale per head -> scatter(sum), and against the
# per-head dot of two gathered rows, in numpy; heads x head width as GAT uses them and odd ones
# (heads narrower than a vector, up to a vector of heads and one more).
@pytest.mark.parametrize("heads, dim", [(1, 1), (1, 7), (8, 8), (3, 5), (2, 33), (2, 16), (1, 40), (1, 72), (4, 32),
                                       (16, 2), (17, 2), (8, 3), (3, 4), (32, 4), (2, 8), (12, 4), (5, 2),
                                       (16, 1)])
@pytest.mark.parametrize("to_dst", [True, False])
def test_weighted_gather_scatter_and_edge_dot(lib, heads, dim, to_dst):
    rng = np.random.default_rng(heads * 100 + dim + to_dst)
    G = make_graph(rng)
    n, e, width = G["n"], G["e"], heads * dim
    x, y = rand(rng, n, width), rand(rng, n, width)
    w = rand(rng, e, heads)
    read, seg = (G["col"], G["dst"]) if to_dst else (G["dst"], G["col"])
    msg = (x[read].reshape(e, heads, dim) * w[:, :, None]).reshape(e, width)
    out = np.full((n, width), 9.0, np.float32)
    if to_dst:
        lib.mgb_weighted_gather_scatter(1, F(x), F(w), I(G["indptr"]), I(G["col"]), ffi.NULL, n, heads, dim, F(out))
    else:
        lib.mgb_weighted_gather_scatter(0, F(x), F(w), I(G["t_indptr"]), I(G["t_col"]), I(G["t_eid"]), n, heads,
                                        dim, F(out))
    np.testing.assert_allclose(out, np_scatter(msg, seg, n, SUM), rtol=1e-5, atol=1e-5)
    assert np.all(out[[3, 7]] == 0)  # isolated nodes: zero, not the old contents

    got = np.full((e, heads), 9.0, np.float32)
    lib.mgb_edge_dot(F(x), int(to_dst), F(y), int(not to_dst), I(G["indptr"]), I(G["col"]), n, heads, dim, F(got))
    xa = x[G["col"] if to_dst else G["dst"]].reshape(e, heads, dim).astype(np.float64)
    yb = y[G["dst"] if to_dst else G["col"]].reshape(e, heads, dim)
    np.testing.assert_allclose(got, (xa * yb).sum(-1), rtol=1e-5, atol=1e-5)

    # an edge value [E, width] in CSR order, read at each edge's own row: summed at either end,
    # dotted with node rows read at an end, and node rows gathered and scaled per head
    SOURCE, EDGE = 1, 2
    rows = rand(rng, e, width)
    out = np.full((n, width), 9.0, np.float32)
    if to_dst:
        lib.mgb_weighted_gather_scatter(1, F(rows), F(w), I(G["indptr"]), ffi.NULL, ffi.NULL, n, heads, dim, F(out))
    else:
        lib.mgb_weighted_gather_scatter(0, F(rows), F(w), I(G["t_indptr"]), ffi.NULL, I(G["t_eid"]), n, heads, dim,
                                        F(out))
    scaled = (rows.reshape(e, heads, dim) * w[:, :, None]).reshape(e, width)
    np.testing.assert_allclose(out, np_scatter(scaled, seg, n, SUM), rtol=1e-5, atol=1e-5)
    end = SOURCE if to_dst else 0
    lib.mgb_edge_dot(F(rows), EDGE, F(y), end, I(G["indptr"]), I(G["col"]), n, heads, dim, F(got))
    yb = y[G["col"] if to_dst else G["dst"]].reshape(e, heads, dim)
    np.testing.assert_allclose(got, (rows.reshape(e, heads, dim).astype(np.float64) * yb).sum(-1), rtol=1e-5,
                               atol=1e-5)
    gathered = np.full((e, width), 9.0, np.float32)
    lib.mgb_weighted_gather(end, F(x), F(w), I(G["indptr"]), I(G["col"]), n, heads, dim, F(gathered))
    xs = x[G["col"] if to_dst else G["dst"]].reshape(e, heads, dim)
    np.testing.assert_allclose(gathered, (xs * w[:, :, None]).reshape(e, width), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("reduce", [SUM, MEAN, MAX])
@pytest.mark.parametrize("end", ["dst", "src"])
def test_scatter_and_backward(lib, width, reduce, end):
    rng = np.random.default_rng(width * 10 + reduce + (end == "src") * 5)
    G = make_graph(rng)
    n, e = G["n"], G["e"]
    if reduce == MAX:
        # distinct values at least 10/(e*width) apart, so the finite-difference step below
        # cannot change any argmax
        m = ((rng.permutation(e * width).reshape(e, width) / (e * width) - 0.5) * 10).astype(np.float32)
    else:
        m = rand(rng, e, width)
    out = np.full((n, width), 5.0, np.float32)
    arg = np.full((n, width), -7, np.int64)
    seg = G["dst"] if end == "dst" else G["col"]

    def fwd(m_, out_, arg_):
        if end == "dst":
            lib.mgb_scatter_dst(reduce, F(m_), I(G["indptr"]), n, width, F(out_), I(arg_))
        else:
            lib.mgb_scatter_src(reduce, F(m_), I(G["t_indptr"]), I(G["t_eid"]), n, width, F(out_), I(arg_))

    fwd(m, out, arg)
    np.testing.assert_allclose(out, np_scatter(m, seg, n, reduce), rtol=1e-5, atol=1e-6)
    empty = np.bincount(seg, minlength=n) == 0
    assert empty.sum() >= 2 and np.all(out[empty] == 0) and np.all(np.isfinite(out))
    if reduce == MAX:
        assert np.all(arg[empty] == -1)
        rows_, cols_ = np.nonzero(~empty[:, None] & np.ones((1, width), bool))
        np.testing.assert_array_equal(seg[arg[rows_, cols_]], rows_)       # argmax edge belongs to the node
        np.testing.assert_array_equal(m[arg[rows_, cols_], cols_], out[rows_, cols_])

    g = rand(rng, n, width)
    gm = np.full((e, width), 3.0, np.float32)
    if end == "dst":
        lib.mgb_scatter_dst_bwd(reduce, F(g), I(G["indptr"]), n, width, I(arg), F(gm))
    else:
        lib.mgb_scatter_src_bwd(reduce, F(g), I(G["col"]), I(G["t_indptr"]), e, width, I(arg), F(gm))
    g64 = g.astype(np.float64)
    if reduce == SUM:
        ref = g64[seg]
    elif reduce == MEAN:
        ref = g64[seg] / np.bincount(seg, minlength=n)[seg][:, None]
    else:
        ref = np.zeros((e, width))
        ref[arg[rows_, cols_], cols_] = g64[rows_, cols_]
    np.testing.assert_allclose(gm, ref, rtol=1e-6, atol=1e-7)

    def fwd_out(m_):
        o = np.empty((n, width), np.float32)
        fwd(m_, o, np.empty((n, width), np.int64))
        return o
    directional_fd(fwd_out, [m], [gm], g, rng, h=5e-4 if reduce == MAX else 1e-2)


@pytest.mark.parametrize("reduce", [SUM, MEAN, MAX])
def test_edge_kernels_on_a_larger_graph_are_thread_count_independent(lib, reduce):
    """Sizes above the parallel thresholds; 1 and 2 threads must give identical bits."""
    rng = np.random.default_rng(reduce)
    G = make_graph(rng, n=3000, e=20000, isolated=(0, 1, 2))
    n, e, width = G["n"], G["e"], 33
    m = rand(rng, e, width)
    g = rand(rng, n, width)
    runs = []
    for threads in (1, 2):
        lib.mgb_set_threads(threads)
        out_d, arg_d = np.empty((n, width), np.float32), np.empty((n, width), np.int64)
        out_s, arg_s = np.empty((n, width), np.float32), np.empty((n, width), np.int64)
        lib.mgb_scatter_dst(reduce, F(m), I(G["indptr"]), n, width, F(out_d), I(arg_d))
        lib.mgb_scatter_src(reduce, F(m), I(G["t_indptr"]), I(G["t_eid"]), n, width, F(out_s), I(arg_s))
        gm_d, gm_s = np.empty_like(m), np.empty_like(m)
        lib.mgb_scatter_dst_bwd(reduce, F(g), I(G["indptr"]), n, width, I(arg_d), F(gm_d))
        lib.mgb_scatter_src_bwd(reduce, F(g), I(G["col"]), I(G["t_indptr"]), e, width, I(arg_s), F(gm_s))
        alpha, ds = np.empty_like(m), np.empty_like(m)
        lib.mgb_edge_softmax_fwd(F(m), I(G["indptr"]), n, width, F(alpha))
        lib.mgb_edge_softmax_bwd(F(alpha), F(m), I(G["indptr"]), n, width, F(ds))
        runs.append((out_d, out_s, gm_d, gm_s, alpha, ds))
    lib.mgb_set_threads(os.cpu_count() or 1)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
    out_d, out_s, gm_d, gm_s, alpha, _ = runs[0]
    np.testing.assert_allclose(out_d, np_scatter(m, G["dst"], n, reduce), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out_s, np_scatter(m, G["col"], n, reduce), rtol=1e-5, atol=1e-5)
    if reduce == SUM:
        np.testing.assert_array_equal(gm_d, g[G["dst"]])
        np.testing.assert_array_equal(gm_s, g[G["col"]])
    seg_sum = np_scatter(alpha, G["dst"], n, SUM)
    has_in = np.bincount(G["dst"], minlength=n) > 0
    np.testing.assert_allclose(seg_sum[has_in], 1.0, rtol=1e-5)


# ---- dropout ----------------------------------------------------------------------------------

MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def np_mix64(z):
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def np_keep_mask(n, p, seed, epoch, op):
    """Independent numpy implementation of the documented hash: the kernel must match it bit for bit."""
    with np.errstate(over="ignore"):
        s = np.uint64(seed)
        base = np_mix64(np_mix64(np_mix64(s + GOLDEN) + np.uint64(epoch) * GOLDEN) + np.uint64(op) * GOLDEN)
        idx = np.arange(n, dtype=np.uint64)
        h = np_mix64(base + (idx + np.uint64(1)) * GOLDEN)
    thr = np.uint64(int(float(np.float32(p)) * 4294967296.0))
    return (h >> np.uint64(32)) >= thr


def test_dropout_matches_reference_hash_and_keep_rate(lib):
    n, p = 200_003, 0.3
    rng = np.random.default_rng(0)
    x = rand(rng, n)
    y = np.empty_like(x)
    lib.mgb_dropout_fwd(F(x), F(y), n, p, 1234, 5, 2)
    keep = np_keep_mask(n, p, 1234, 5, 2)
    np.testing.assert_array_equal(y != 0, keep & (x != 0))
    np.testing.assert_allclose(y[keep], x[keep] / np.float32(1 - p), rtol=1e-6)
    assert abs(keep.mean() - (1 - p)) < 0.005
    gy = rand(rng, n)
    gx = np.empty_like(gy)
    lib.mgb_dropout_bwd(F(gy), F(gx), n, p, 1234, 5, 2)
    np.testing.assert_allclose(gx, np.where(keep, gy / np.float32(1 - p), 0), rtol=1e-6)


def _aligned_empty(n, offset=0):
    """n float32 starting `offset` floats past a 64-byte boundary."""
    raw = np.empty(n + 16 + offset, np.float32)
    start = (-raw.ctypes.data % 64) // 4 + offset
    return raw[start:start + n]


@pytest.mark.parametrize("offset", [0, 1])
def test_dropout_of_an_output_larger_than_the_caches(lib, offset):
    """Outputs of 64 MiB or more are written by streaming stores where vectors are 16 floats
    wide and the output is 64-byte aligned (dropout.h: dropout_streamed; offset 1 takes the
    cached path): the same mask and values either way, the ragged last block included."""
    n, p = (64 << 20) // 4 + 37, 0.25
    x = np.arange(n, dtype=np.float32) % np.float32(97) - np.float32(40)
    y = _aligned_empty(n, offset)
    lib.mgb_dropout_fwd(F(x), F(y), n, p, 31, 4, 9)
    keep = np_keep_mask(n, p, 31, 4, 9)
    np.testing.assert_array_equal(y, np.where(keep, x * np.float32(1 / (1 - p)), np.float32(0)))


def test_dropout_mask_same_for_any_thread_count(lib):
    n, p = 150_001, 0.5
    x = np.ones(n, np.float32)
    results = []
    for threads in (1, 2, 3):
        lib.mgb_set_threads(threads)
        y = np.empty_like(x)
        lib.mgb_dropout_fwd(F(x), F(y), n, p, 7, 1, 0)
        bits = np.empty(lib.mgb_dropout_mask_words(n), np.uint64)
        y2 = np.empty_like(x)
        lib.mgb_dropout_fwd_mask(F(x), F(y2), n, p, 7, 1, 0, U64(bits))
        results.append((y, y2, bits))
    lib.mgb_set_threads(os.cpu_count() or 1)
    for y, y2, bits in results[1:]:
        np.testing.assert_array_equal(y, results[0][0])
        np.testing.assert_array_equal(bits, results[0][2])
        np.testing.assert_array_equal(y2, results[0][0])


def test_dropout_mask_differs_between_epochs_and_ops(lib):
    n, p = 100_000, 0.5
    x = np.ones(n, np.float32)
    masks = []
    for epoch, op in ((0, 0), (1, 0), (0, 1)):
        y = np.empty_like(x)
        lib.mgb_dropout_fwd(F(x), F(y), n, p, 99, epoch, op)
        masks.append(y != 0)
    for a, b in ((0, 1), (0, 2), (1, 2)):
        agree = np.mean(masks[a] == masks[b])
        assert abs(agree - 0.5) < 0.02  # independent masks agree half the time


@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000])
def test_dropout_bitmask_variant(lib, n):
    p = 0.4
    rng = np.random.default_rng(n)
    x = away_from_zero(rng, n)
    y = np.empty_like(x)
    bits = np.zeros(lib.mgb_dropout_mask_words(n), np.uint64)
    assert bits.size == (n + 63) // 64
    lib.mgb_dropout_fwd_mask(F(x), F(y), n, p, 3, 4, 5, U64(bits))
    keep = np_keep_mask(n, p, 3, 4, 5)
    unpacked = np.unpackbits(bits.view(np.uint8), bitorder="little")[:n].astype(bool)
    np.testing.assert_array_equal(unpacked, keep)
    np.testing.assert_array_equal(y != 0, keep)
    gy = rand(rng, n)
    gx = np.empty_like(gy)
    lib.mgb_dropout_bwd_mask(F(gy), F(gx), n, p, U64(bits))
    np.testing.assert_allclose(gx, np.where(keep, gy / np.float32(1 - p), 0), rtol=1e-6)
    # the bitmask backward equals the regenerating backward
    gx2 = np.empty_like(gy)
    lib.mgb_dropout_bwd(F(gy), F(gx2), n, p, 3, 4, 5)
    np.testing.assert_array_equal(gx, gx2)


def test_dropout_p0_is_identity(lib):
    rng = np.random.default_rng(1)
    x = rand(rng, 1001)
    y = np.empty_like(x)
    lib.mgb_dropout_fwd(F(x), F(y), x.size, 0.0, 1, 2, 3)
    np.testing.assert_array_equal(y, x)
    bits = np.zeros(lib.mgb_dropout_mask_words(x.size), np.uint64)
    lib.mgb_dropout_fwd_mask(F(x), F(y), x.size, 0.0, 1, 2, 3, U64(bits))
    np.testing.assert_array_equal(y, x)
    assert np.unpackbits(bits.view(np.uint8), bitorder="little")[: x.size].all()


# ---- loss ---------------------------------------------------------------------------------------

def np_xent(z, labels, mask):
    z = z.astype(np.float64)
    sel = np.flatnonzero(mask)
    zs = z - z.max(1, keepdims=True)
    logp = zs - np.log(np.exp(zs).sum(1, keepdims=True))
    loss = -logp[sel, labels[sel]].mean() if sel.size else 0.0
    d = np.zeros_like(z)
    if sel.size:
        d[sel] = np.exp(logp[sel])
        d[sel, labels[sel]] -= 1
        d /= sel.size
    return loss, d


@pytest.mark.parametrize("classes", [1, 3, 7, 47])
def test_softmax_cross_entropy(lib, classes):
    rng = np.random.default_rng(classes)
    rows = 50
    z = rand(rng, rows, classes) * 5
    z[0] += 80.0  # large logits must not overflow
    labels = rng.integers(0, classes, rows).astype(np.int64)
    mask = (rng.random(rows) < 0.4).astype(np.uint8)
    mask[0] = 1
    d = np.full_like(z, 9.0)
    loss = lib.mgb_softmax_cross_entropy(F(z), I(labels), U8(mask), rows, classes, F(d))
    ref_loss, ref_d = np_xent(z, labels, mask)
    assert np.isclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d, ref_d, rtol=1e-5, atol=1e-7)
    assert np.all(d[mask == 0] == 0)

    def fwd(z_):
        return np.array([lib.mgb_softmax_cross_entropy(F(z_), I(labels), U8(mask), rows, classes, ffi.NULL)],
                        np.float32)
    directional_fd(fwd, [z], [d], np.ones(1, np.float32), rng, h=1e-2)

    # nullptr mask = all rows
    loss_all = lib.mgb_softmax_cross_entropy(F(z), I(labels), ffi.NULL, rows, classes, F(d))
    ref_all, ref_dall = np_xent(z, labels, np.ones(rows, bool))
    assert np.isclose(loss_all, ref_all, rtol=1e-5)
    np.testing.assert_allclose(d, ref_dall, rtol=1e-5, atol=1e-7)


def test_cross_entropy_empty_mask(lib):
    z = np.ones((4, 3), np.float32)
    labels = np.zeros(4, np.int64)
    d = np.full_like(z, 9.0)
    loss = lib.mgb_softmax_cross_entropy(F(z), I(labels), U8(np.zeros(4, np.uint8)), 4, 3, F(d))
    assert loss == 0.0 and np.all(d == 0)


def test_cross_entropy_loss_is_the_same_bits_every_run(lib):
    """The loss sums per-thread partials; an OpenMP reduction adds them in arrival order, so with
    three or more threads the last bits changed from call to call."""
    rng = np.random.default_rng(12)
    rows, classes = 40000, 7
    z = rand(rng, rows, classes) * 3
    labels = rng.integers(0, classes, rows).astype(np.int64)
    lib.mgb_set_threads(5)
    try:
        losses = {lib.mgb_softmax_cross_entropy(F(z), I(labels), ffi.NULL, rows, classes, ffi.NULL)
                  for _ in range(200)}
    finally:
        lib.mgb_set_threads(os.cpu_count() or 1)
    assert len(losses) == 1, sorted(losses)


def test_cross_entropy_large_parallel(lib):
    rng = np.random.default_rng(8)
    rows, classes = 4000, 7
    z = rand(rng, rows, classes) * 3
    labels = rng.integers(0, classes, rows).astype(np.int64)
    mask = (rng.random(rows) < 0.5).astype(np.uint8)
    d = np.empty_like(z)
    loss = lib.mgb_softmax_cross_entropy(F(z), I(labels), U8(mask), rows, classes, F(d))
    ref_loss, ref_d = np_xent(z, labels, mask)
    assert np.isclose(loss, ref_loss, rtol=1e-5)
    np.testing.assert_allclose(d, ref_d, rtol=1e-4, atol=1e-8)


def test_count_correct(lib):
    rng = np.random.default_rng(4)
    rows, classes = 5001, 5  # above the kernel's parallel threshold
    z = rand(rng, rows, classes)
    z[:10] = 0.0  # ties: argmax is the first maximum
    labels = rng.integers(0, classes, rows).astype(np.int64)
    labels[:10] = 0
    mask = (rng.random(rows) < 0.3).astype(np.uint8)
    mask[:10] = 1
    got = lib.mgb_count_correct(F(z), I(labels), U8(mask), rows, classes)
    assert got == int(np.sum((z.argmax(1) == labels) & (mask != 0)))
    assert lib.mgb_count_correct(F(z), I(labels), ffi.NULL, rows, classes) == int(np.sum(z.argmax(1) == labels))


# ---- edge softmax ---------------------------------------------------------------------------------

@pytest.mark.parametrize("heads", [1, 3, 8])
def test_edge_softmax(lib, heads):
    rng = np.random.default_rng(heads)
    G = make_graph(rng)
    n, e = G["n"], G["e"]
    s = rand(rng, e, heads) * 4
    s[0] += 60.0  # stability: exp of the shifted score only
    alpha = np.empty_like(s)
    lib.mgb_edge_softmax_fwd(F(s), I(G["indptr"]), n, heads, F(alpha))
    ref = np.zeros((e, heads))
    s64 = s.astype(np.float64)
    for v in range(n):
        a, b = G["indptr"][v], G["indptr"][v + 1]
        if a < b:
            x = np.exp(s64[a:b] - s64[a:b].max(0))
            ref[a:b] = x / x.sum(0)
    np.testing.assert_allclose(alpha, ref, rtol=1e-5, atol=1e-7)
    assert np.all(np.isfinite(alpha))

    g = rand(rng, e, heads)
    ds = np.empty_like(s)
    lib.mgb_edge_softmax_bwd(F(alpha), F(g), I(G["indptr"]), n, heads, F(ds))
    ag = ref * g
    seg_sum = np_scatter(ag, G["dst"], n, SUM)[G["dst"]]
    np.testing.assert_allclose(ds, ref * (g - seg_sum), rtol=1e-5, atol=1e-6)

    def fwd(s_):
        o = np.empty_like(s_)
        lib.mgb_edge_softmax_fwd(F(s_), I(G["indptr"]), n, heads, F(o))
        return o
    directional_fd(fwd, [s], [ds], g, rng, h=1e-2)


def test_edge_softmax_on_graph_without_edges(lib):
    indptr = np.zeros(6, np.int64)
    buf = np.full(1, 4.0, np.float32)  # a valid pointer standing in for the zero-length tensors
    lib.mgb_edge_softmax_fwd(F(buf), I(indptr), 5, 2, F(buf))
    lib.mgb_edge_softmax_bwd(F(buf), F(buf), I(indptr), 5, 2, F(buf))
    assert buf[0] == 4.0  # nothing was written


# ---- optimizers: numpy transcriptions of the torch.optim algorithms --------------------------------

def torch_adam_ref(p, g, m, v, step, lr, b1, b2, eps, wd, decoupled):
    """torch.optim.Adam/AdamW (single-tensor, amsgrad=False, maximize=False), in float32 like torch."""
    p, m, v = p.copy(), m.copy(), v.copy()
    f = np.float32
    if decoupled:
        p *= f(1 - lr * wd)
    else:
        g = g + f(wd) * p
    m += f(1 - b1) * (g - m)                  # exp_avg.lerp_(grad, 1 - beta1)
    v[:] = f(b2) * v + f(1 - b2) * g * g      # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
    bc1 = 1 - b1 ** step
    bc2 = 1 - b2 ** step
    step_size = f(lr / bc1)
    denom = np.sqrt(v) / f(np.sqrt(bc2)) + f(eps)
    p -= step_size * (m / denom)
    return p, m, v


def torch_sgd_ref(p, g, buf, step, lr, momentum, dampening, wd, nesterov):
    p, buf = p.copy(), buf.copy()
    f = np.float32
    d = g + f(wd) * p
    if momentum != 0:
        buf = d.copy() if step == 1 else f(momentum) * buf + f(1 - dampening) * d
        d = d + f(momentum) * buf if nesterov else buf
    p -= f(lr) * d
    return p, buf


@pytest.mark.parametrize("decoupled", [0, 1])
@pytest.mark.parametrize("wd", [0.0, 0.05])
@pytest.mark.parametrize("n", [7, 40_000])
def test_adam_matches_torch_algorithm(lib, decoupled, wd, n):
    rng = np.random.default_rng(n + decoupled)
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
    p = rand(rng, n)
    m, v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    rp, rm, rv = p.copy(), m.copy(), v.copy()
    for step in range(1, 6):
        g = rand(rng, n)
        lib.mgb_adam_step(F(p), F(g), F(m), F(v), n, lr, b1, b2, eps, wd, step, decoupled)
        rp, rm, rv = torch_adam_ref(rp, g, rm, rv, step, lr, b1, b2, eps, wd, decoupled)
        # a few float32 ulps of the O(1) operands (the kernel may contract to FMA)
        np.testing.assert_allclose(m, rm, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(v, rv, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(p, rp, rtol=1e-6, atol=5e-7)
    # first Adam step moves every coordinate by ~lr (sign of the gradient): a sanity anchor that
    # does not rely on the reference above
    q = np.zeros(3, np.float32)
    lib.mgb_adam_step(F(q), F(np.array([2.0, -3.0, 0.5], np.float32)), F(np.zeros(3, np.float32)),
                      F(np.zeros(3, np.float32)), 3, 0.1, 0.9, 0.999, 1e-8, 0.0, 1, decoupled)
    np.testing.assert_allclose(q, [-0.1, 0.1, -0.1], rtol=1e-5)


@pytest.mark.parametrize("decoupled", [0, 1])
@pytest.mark.parametrize("rows,width,lookups", [(9, 3, 4), (5000, 16, 700), (3000, 5, 9000)])
def test_row_wise_adam_equals_the_step_on_the_zero_filled_gradient(lib, decoupled, rows, width, lookups):
    """An embedding table's gradient written for the looked-up rows only, and Adam reading those
    rows only: bit for bit the dense gradient (zeros elsewhere) and the dense step, over steps
    whose lookups differ (rows with and without gradient, runs of both, table ends)."""
    rng = np.random.default_rng(rows + width + decoupled)
    p = rand(rng, rows, width)
    dense = [p.copy(), np.zeros_like(p), np.zeros_like(p)]
    sparse = [p.copy(), np.zeros_like(p), np.zeros_like(p)]
    for step in range(1, 4):
        src = rng.integers(0, rows, lookups).astype(np.int64)
        src[:2] = [0, rows - 1]
        G = rand(rng, lookups, width)
        order, key_ptr, keys = (np.empty(lookups, np.int64), np.empty(lookups + 1, np.int64),
                                np.empty(lookups, np.int64))
        u = lib.mgb_embedding_grad_plan(ffi.NULL, I(src), lookups, 1, rows, I(order), I(key_ptr), I(keys))
        g_dense = np.full_like(p, 7.0)
        lib.mgb_embedding_bwd(F(G), I(order), I(key_ptr), I(keys), u, rows, width, F(g_dense))
        g_rows = np.full_like(p, np.nan)           # rows without lookups must not be read
        lib.mgb_embedding_bwd_rows(F(G), I(order), I(key_ptr), I(keys), u, width, F(g_rows))
        np.testing.assert_array_equal(g_rows[keys[:u]], g_dense[keys[:u]])
        lib.mgb_adam_step(*(F(a) for a in (dense[0], g_dense, dense[1], dense[2])), rows * width, 0.01, 0.9, 0.999,
                          1e-8, 0.05, step, decoupled)
        lib.mgb_adam_rows_step(F(sparse[0]), F(g_rows), F(sparse[1]), F(sparse[2]), rows, width, I(keys), u, 0.01,
                               0.9, 0.999, 1e-8, 0.05, step, decoupled)
        for a, b in zip(sparse, dense):
            np.testing.assert_array_equal(a, b)
        assert np.all(np.isfinite(sparse[0]))


@pytest.mark.parametrize("packed", [0, 1])
@pytest.mark.parametrize("decoupled", [0, 1])
@pytest.mark.parametrize("rows,width", [(9, 3), (5000, 16), (3000, 5)])
def test_listed_rows_adam_equals_the_dense_step_on_those_rows(lib, decoupled, rows, width, packed):
    """A share of a table stepped alone: the listed rows get the dense step's numbers bit for
    bit (with their gradient, or with a zero one where unflagged, its entries then unread), and
    no other row of the weights or moments is touched.  Packed: the weights and moments hold the
    listed rows only, in order, and so does the gradient (the MPI backend's packed tables)."""
    rng = np.random.default_rng(rows + width + decoupled)
    dense = [rand(rng, rows, width), np.zeros((rows, width), np.float32), np.zeros((rows, width), np.float32)]
    listed = [a.copy() for a in dense]
    share = np.unique(np.concatenate([[0, rows - 1], rng.choice(rows, size=rows // 2, replace=False)]))
    share = share.astype(np.int64)       # the table's ends, and half its rows
    for step in range(1, 4):
        has_grad = (rng.random(share.size) < 0.3).astype(np.uint8)
        g = rand(rng, rows, width)
        g_dense = np.zeros_like(g)
        g_dense[share[has_grad == 1]] = g[share[has_grad == 1]]
        g_listed = np.where(np.isin(np.arange(rows), share[has_grad == 1])[:, None], g, np.nan).astype(np.float32)
        before = [a.copy() for a in listed]
        lib.mgb_adam_step(*(F(a) for a in (dense[0], g_dense, dense[1], dense[2])), rows * width, 0.01, 0.9,
                          0.999, 1e-8, 0.05, step, decoupled)
        stepped = [np.ascontiguousarray(a[share]) for a in listed] if packed else listed
        if packed:
            g_listed = np.ascontiguousarray(g_listed[share])
        lib.mgb_adam_listed_rows_step(F(stepped[0]), F(g_listed), F(stepped[1]), F(stepped[2]), width, I(share),
                                      U8(has_grad), share.size, 0.01, 0.9, 0.999, 1e-8, 0.05, step, decoupled,
                                      packed)
        if packed:
            for a, rows_stepped in zip(listed, stepped):
                a[share] = rows_stepped
        others = np.setdiff1d(np.arange(rows), share)
        for a, b, old in zip(listed, dense, before):
            np.testing.assert_array_equal(a[share], b[share])
            np.testing.assert_array_equal(a[others], old[others])
        # the untouched rows catch up when stepped the same way later: give them the dense state
        for a, b in zip(listed, dense):
            a[others] = b[others]


def test_adam_and_adamw_differ_with_weight_decay(lib):
    p0 = np.full(4, 2.0, np.float32)
    g = np.full(4, 0.1, np.float32)
    out = []
    for decoupled in (0, 1):
        p, m, v = p0.copy(), np.zeros(4, np.float32), np.zeros(4, np.float32)
        lib.mgb_adam_step(F(p), F(g), F(m), F(v), 4, 0.1, 0.9, 0.999, 1e-8, 0.5, 1, decoupled)
        out.append(p[0])
    # Adam: grad 0.1 + 0.5*2 = 1.1 -> step -0.1; AdamW: 2*(1-0.05) - 0.1 = 1.8
    assert np.isclose(out[0], 1.9, rtol=1e-6) and np.isclose(out[1], 1.8, rtol=1e-6)


@pytest.mark.parametrize("momentum,dampening,nesterov", [(0.0, 0.0, 0), (0.9, 0.0, 0), (0.9, 0.1, 0),
                                                         (0.9, 0.0, 1)])
@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_sgd_matches_torch_algorithm(lib, momentum, dampening, nesterov, wd):
    rng = np.random.default_rng(int(momentum * 10) + nesterov)
    n, lr = 40_000, 0.05
    p = rand(rng, n)
    buf = np.zeros(n, np.float32)
    rp, rbuf = p.copy(), buf.copy()
    for step in range(1, 5):
        g = rand(rng, n)
        lib.mgb_sgd_step(F(p), F(g), F(buf), n, lr, momentum, dampening, wd, nesterov, step)
        rp, rbuf = torch_sgd_ref(rp, g, rbuf, step, lr, momentum, dampening, wd, nesterov)
        # a few float32 ulps of the O(1) operands (the kernel may contract to FMA)
        np.testing.assert_allclose(p, rp, rtol=1e-6, atol=5e-7)
        if momentum:
            np.testing.assert_allclose(buf, rbuf, rtol=1e-6, atol=5e-7)


def test_sgd_without_momentum_accepts_null_buffer(lib):
    p = np.ones(5, np.float32)
    lib.mgb_sgd_step(F(p), F(np.full(5, 2.0, np.float32)), ffi.NULL, 5, 0.1, 0.0, 0.0, 0.0, 0, 1)
    np.testing.assert_allclose(p, 0.8, rtol=1e-6)


# ---- typed linear (Hector) ------------------------------------------------------------------------

def np_typed_linear(X, W, types):
    return np.einsum("rk,rkm->rm", X.astype(np.float64), W.astype(np.float64)[types])


def np_typed_linear_grads(X, W, G, types):
    X64, W64, G64 = X.astype(np.float64), W.astype(np.float64), G.astype(np.float64)
    dX = np.einsum("rm,rkm->rk", G64, W64[types])
    dW = np.zeros_like(W64)
    for t in range(W.shape[0]):
        sel = types == t
        dW[t] = X64[sel].T @ G64[sel]
    return dX, dW


def typed_case(rng, R, T, K, M):
    # types 1 and T-1 stay unused so empty segments (first, middle, last) are exercised
    used = [t for t in range(T) if t not in (1, T - 1)]
    types = rng.choice(used, size=R).astype(np.int64)
    return types, rand(rng, R, K), rand(rng, T, K, M), rand(rng, R, M)


@pytest.mark.parametrize("width", [2, 8, 16, 32, 64, 70])
def test_segment_row_sums_add_in_index_order(lib, width):
    """Sums of indexed rows per segment (typed parameters' gradients, the edge typed linear's
    edges-to-rows sums): the widths kept in vector registers (16, 32, 64; 8 too with AVX2) and
    others, empty segments (first, middle, last), rows read in any order and more of them than
    the lookahead: bit for bit the float32 sum in index order."""
    rng = np.random.default_rng(width)
    rows, segments = 500, 60
    src = rand(rng, rows, width)
    counts = rng.integers(0, 15, segments)
    counts[[0, 7, segments - 1]] = 0
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    idx = rng.integers(0, rows, int(ptr[-1])).astype(np.int64)
    out = np.full((segments, width), np.nan, np.float32)
    lib.mgb_segment_row_sums(I(ptr), I(idx), segments, F(src), width, F(out))
    expected = np.zeros((segments, width), np.float32)
    for s in range(segments):
        for i in range(ptr[s], ptr[s + 1]):
            expected[s] += src[idx[i]]
    np.testing.assert_array_equal(out, expected)


def test_group_rows_by_type(lib):
    types = np.array([2, 0, 2, 3, 0, 2], np.int64)
    perm, ptr = np.empty(6, np.int64), np.empty(6, np.int64)
    assert lib.mgb_group_rows_by_type(I(types), 6, 5, I(perm), I(ptr)) == 0
    np.testing.assert_array_equal(ptr, [0, 2, 2, 5, 6, 6])
    np.testing.assert_array_equal(perm, [1, 4, 0, 2, 5, 3])
    bad = np.array([0, 5], np.int64)
    assert lib.mgb_group_rows_by_type(I(bad), 2, 5, I(perm), I(ptr)) != 0


@pytest.mark.parametrize("K,M", [(1, 1), (3, 7), (31, 33), (47, 3)])
def test_typed_linear_segment_mm(lib, K, M):
    rng = np.random.default_rng(K * 100 + M)
    R, T = 61, 5
    types, X, W, G = typed_case(rng, R, T, K, M)
    order = np.argsort(types, kind="stable")
    types, X, G = types[order], np.ascontiguousarray(X[order]), np.ascontiguousarray(G[order])
    ptr = np.zeros(T + 1, np.int64)
    np.cumsum(np.bincount(types, minlength=T), out=ptr[1:])
    Y = np.empty((R, M), np.float32)
    assert lib.mgb_tl_segment_fwd(F(X), F(W), F(Y), I(ptr), T, K, M) == 0
    np.testing.assert_allclose(Y, np_typed_linear(X, W, types), rtol=1e-4, atol=1e-5)
    dX, dW = np.empty_like(X), np.full_like(W, 9.0)
    assert lib.mgb_tl_segment_bwd(F(X), F(W), F(G), I(ptr), T, K, M, F(dX), F(dW)) == 0
    rdX, rdW = np_typed_linear_grads(X, W, G, types)
    np.testing.assert_allclose(dX, rdX, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dW, rdW, rtol=1e-4, atol=1e-5)
    assert np.all(dW[[1, T - 1]] == 0)

    def fwd(x_, w_):
        y = np.empty((R, M), np.float32)
        lib.mgb_tl_segment_fwd(F(x_), F(w_), F(y), I(ptr), T, K, M)
        return y
    directional_fd(fwd, [X, W], [dX, dW], G, rng)


@pytest.mark.parametrize("K,M", [(1, 1), (3, 7), (33, 31), (7, 47), (64, 64), (9, 70), (70, 9)])
@pytest.mark.parametrize("own_workspace", [False, True])
def test_typed_linear_gather_scatter(lib, K, M, own_workspace):
    rng = np.random.default_rng(K * 100 + M + own_workspace)
    R, T = 73, 6
    types, X, W, G = typed_case(rng, R, T, K, M)
    perm, ptr = np.empty(R, np.int64), np.empty(T + 1, np.int64)
    assert lib.mgb_group_rows_by_type(I(types), R, T, I(perm), I(ptr)) == 0
    ws_n = lib.mgb_tl_workspace_floats(I(ptr), T, K, M)
    assert ws_n >= 128 * (K + M)                    # at least one tile of X and G rows
    ws = F(np.empty(ws_n, np.float32)) if own_workspace else ffi.NULL
    Y = np.empty((R, M), np.float32)
    assert lib.mgb_tl_gather_fwd(F(X), F(W), F(Y), I(perm), I(ptr), T, K, M, ws, ffi.NULL) == 0
    np.testing.assert_allclose(Y, np_typed_linear(X, W, types), rtol=1e-4, atol=1e-5)

    dX, dW = np.full_like(X, 9.0), np.full_like(W, 9.0)
    assert lib.mgb_tl_gather_bwd(F(X), F(W), F(G), I(perm), I(ptr), T, K, M, F(dX), F(dW), ws, ffi.NULL) == 0
    rdX, rdW = np_typed_linear_grads(X, W, G, types)
    np.testing.assert_allclose(dX, rdX, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dW, rdW, rtol=1e-4, atol=1e-5)
    assert np.all(dW[[1, T - 1]] == 0)

    # each gradient alone
    dW2 = np.empty_like(W)
    assert lib.mgb_tl_gather_bwd(F(X), F(W), F(G), I(perm), I(ptr), T, K, M, ffi.NULL, F(dW2), ws, ffi.NULL) == 0
    np.testing.assert_array_equal(dW2, dW)
    dX2 = np.empty_like(X)
    assert lib.mgb_tl_gather_bwd(F(X), F(W), F(G), I(perm), I(ptr), T, K, M, F(dX2), ffi.NULL, ws, ffi.NULL) == 0
    np.testing.assert_array_equal(dX2, dX)

    def fwd(x_, w_):
        y = np.empty((R, M), np.float32)
        lib.mgb_tl_gather_fwd(F(x_), F(w_), F(y), I(perm), I(ptr), T, K, M, ffi.NULL, ffi.NULL)
        return y
    directional_fd(fwd, [X, W], [dX, dW], G, rng)


@pytest.mark.parametrize("K,M", [(64, 64), (130, 33), (9, 70)])
def test_typed_linear_rows_laid_out_by_type_are_multiplied_in_place(lib, K, M):
    """Rows sorted by type (the loaders' node order): every tile is a block of consecutive rows,
    multiplied where it lies; one row out of order in the middle of type 2 sends its tiles (and
    the weight-gradient blocks around it) back through the gather buffers."""
    rng = np.random.default_rng(K + M)
    R, T = 700, 5
    types = np.sort(typed_case(rng, R, T, K, M)[0])
    out_of_order = int(np.flatnonzero(types == 2)[40])
    types[out_of_order], types[out_of_order + 200] = types[out_of_order + 200], types[out_of_order]
    for case in (np.sort(types), types):
        X, W, G = rand(rng, R, K), rand(rng, T, K, M), rand(rng, R, M)
        perm, ptr = np.empty(R, np.int64), np.empty(T + 1, np.int64)
        assert lib.mgb_group_rows_by_type(I(case), R, T, I(perm), I(ptr)) == 0
        Y = np.empty((R, M), np.float32)
        assert lib.mgb_tl_gather_fwd(F(X), F(W), F(Y), I(perm), I(ptr), T, K, M, ffi.NULL, ffi.NULL) == 0
        np.testing.assert_allclose(Y, np_typed_linear(X, W, case), rtol=1e-4, atol=1e-4)
        dX, dW = np.full_like(X, 9.0), np.full_like(W, 9.0)
        assert lib.mgb_tl_gather_bwd(F(X), F(W), F(G), I(perm), I(ptr), T, K, M, F(dX), F(dW), ffi.NULL,
                                     ffi.NULL) == 0
        rdX, rdW = np_typed_linear_grads(X, W, G, case)
        np.testing.assert_allclose(dX, rdX, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(dW, rdW, rtol=1e-4, atol=1e-3)


def test_typed_linear_large_parallel_gather(lib):
    rng = np.random.default_rng(21)
    R, T, K, M = 3000, 4, 33, 47
    types, X, W, G = typed_case(rng, R, T, K, M)
    perm, ptr = np.empty(R, np.int64), np.empty(T + 1, np.int64)
    lib.mgb_group_rows_by_type(I(types), R, T, I(perm), I(ptr))
    Y = np.empty((R, M), np.float32)
    assert lib.mgb_tl_gather_fwd(F(X), F(W), F(Y), I(perm), I(ptr), T, K, M, ffi.NULL, ffi.NULL) == 0
    np.testing.assert_allclose(Y, np_typed_linear(X, W, types), rtol=1e-4, atol=1e-4)
    dX, dW = np.empty_like(X), np.empty_like(W)
    assert lib.mgb_tl_gather_bwd(F(X), F(W), F(G), I(perm), I(ptr), T, K, M, F(dX), F(dW), ffi.NULL, ffi.NULL) == 0
    rdX, rdW = np_typed_linear_grads(X, W, G, types)
    np.testing.assert_allclose(dX, rdX, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dW, rdW, rtol=1e-4, atol=1e-3)


def test_typed_linear_weight_gradient_in_chunks_is_the_same_at_any_thread_count(lib):
    """Types of 150,000 and 70,000 rows: dW is summed over several chunks (partials), and the
    result is bitwise the same with 1 and 2 threads."""
    rng = np.random.default_rng(5)
    R, T, K, M = 220_000, 3, 8, 16
    types = np.concatenate([np.zeros(150_000, np.int64), np.full(70_000, 2, np.int64)])
    rng.shuffle(types)
    X, W, G = rand(rng, R, K), rand(rng, T, K, M), rand(rng, R, M)
    perm, ptr = np.empty(R, np.int64), np.empty(T + 1, np.int64)
    lib.mgb_group_rows_by_type(I(types), R, T, I(perm), I(ptr))
    results = []
    for threads in (1, 2):
        lib.mgb_set_threads(threads)
        dX, dW = np.empty_like(X), np.full_like(W, 9.0)
        assert lib.mgb_tl_gather_bwd(F(X), F(W), F(G), I(perm), I(ptr), T, K, M, F(dX), F(dW), ffi.NULL,
                                     ffi.NULL) == 0
        results.append((dX, dW))
    lib.mgb_set_threads(os.cpu_count() or 1)
    rdX, rdW = np_typed_linear_grads(X, W, G, types)
    np.testing.assert_allclose(results[0][1], rdW, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(results[0][0], rdX, rtol=1e-4, atol=1e-5)
    assert np.all(results[0][1][1] == 0)
    for a, b in zip(results[0], results[1]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("K,M", [(1, 3), (33, 7)])
def test_typed_linear_edge_gather_list(lib, K, M):
    """Y[e] = X[col[e]] · W[etype[e]] straight from node rows, then dX through gather_src_bwd."""
    rng = np.random.default_rng(K + M)
    G_ = make_graph(rng)
    n, e, T = G_["n"], G_["e"], 4
    etype = rng.choice([0, 2, 3], size=e).astype(np.int64)
    X, W, G = rand(rng, n, K), rand(rng, T, K, M), rand(rng, e, M)
    perm, ptr = np.empty(e, np.int64), np.empty(T + 1, np.int64)
    lib.mgb_group_rows_by_type(I(etype), e, T, I(perm), I(ptr))
    Y = np.empty((e, M), np.float32)
    assert lib.mgb_tl_gather_fwd(F(X), F(W), F(Y), I(perm), I(ptr), T, K, M, ffi.NULL, I(G_["col"])) == 0
    Xe = X[G_["col"]]
    np.testing.assert_allclose(Y, np_typed_linear(Xe, W, etype), rtol=1e-4, atol=1e-5)
    dXe, dW = np.empty((e, K), np.float32), np.empty_like(W)
    assert lib.mgb_tl_gather_bwd(F(X), F(W), F(G), I(perm), I(ptr), T, K, M, F(dXe), F(dW), ffi.NULL,
                                 I(G_["col"])) == 0
    rdXe, rdW = np_typed_linear_grads(Xe, W, G, etype)
    np.testing.assert_allclose(dXe, rdXe, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dW, rdW, rtol=1e-4, atol=1e-5)
    dX = np.empty_like(X)
    lib.mgb_gather_src_bwd(F(dXe), I(G_["t_indptr"]), I(G_["t_eid"]), n, K, F(dX))

    def fwd(x_, w_):
        y = np.empty((e, M), np.float32)
        lib.mgb_tl_gather_fwd(F(x_), F(w_), F(y), I(perm), I(ptr), T, K, M, ffi.NULL, I(G_["col"]))
        return y
    directional_fd(fwd, [X, W], [dX, dW], G, rng)


@pytest.mark.parametrize("M", WIDTHS)
@pytest.mark.parametrize("with_src_row", [True, False])
def test_embedding_lookup_featureless(lib, M, with_src_row):
    rng = np.random.default_rng(M + 7 * with_src_row)
    R, T = 2500, 5
    P = 40 if with_src_row else 1   # rows per type; P == 1 is typed_param's W[type]
    types = rng.choice([0, 2, 3], size=R).astype(np.int64)        # types 1 and 4 unused
    src = rng.integers(0, P, R).astype(np.int64) if with_src_row else None
    table = rand(rng, T * P, M)
    Y = np.empty((R, M), np.float32)
    src_ptr = I(src) if with_src_row else ffi.NULL
    lib.mgb_embedding_fwd(F(table), I(types), src_ptr, R, P, M, F(Y))
    key = types * P + (src if with_src_row else 0)
    np.testing.assert_array_equal(Y, table[key])

    order, key_ptr, keys = np.empty(R, np.int64), np.empty(R + 1, np.int64), np.empty(R, np.int64)
    U = lib.mgb_embedding_grad_plan(I(types), src_ptr, R, T, P, I(order), I(key_ptr), I(keys))
    np.testing.assert_array_equal(keys[:U], np.unique(key))
    G = rand(rng, R, M)
    dtable = np.full_like(table, 9.0)
    lib.mgb_embedding_bwd(F(G), I(order), I(key_ptr), I(keys), U, T * P, M, F(dtable))
    ref = np.zeros((T * P, M))
    np.add.at(ref, key, G.astype(np.float64))
    np.testing.assert_allclose(dtable, ref, rtol=1e-5, atol=1e-5)

    def fwd(tab):
        y = np.empty((R, M), np.float32)
        lib.mgb_embedding_fwd(F(tab), I(types), src_ptr, R, P, M, F(y))
        return y
    directional_fd(fwd, [table], [dtable], G, rng)


def _aligned(shape, value, align=64) -> np.ndarray:
    n = int(np.prod(shape))
    raw = np.empty(n + align // 4, np.float32)
    offset = (-raw.ctypes.data % align) // 4
    out = raw[offset:offset + n].reshape(shape)
    out[...] = value
    assert out.ctypes.data % align == 0
    return out


@pytest.mark.parametrize("T,B,M,P", [(7, 30, 16, 1200),     # dA's per-(type, basis) vectors: 13 KiB
                                     (600, 30, 16, 1200),   # 1.1 MiB of them, beyond the bound: dot by dot
                                     (5, 4, 20, 1200),      # a width without a constant instance
                                     (7, 30, 16, 9000)])    # dV of 17 MB: written past the caches
def test_basis_lookups_match_numpy_on_any_thread_count(lib, T, B, M, P):
    """R-GCN's bases on featureless input (typed_linear.h): Y[r] = sum_b A[t(r), b] V[b][s(r)],
    dA and dV against float64 references, rows that no lookup reads (the first, the last and
    two between) zero in dV, and the same bits on one thread and two.  Over 1,200 rows dA is
    summed in five chunks of rows or more."""
    rng = np.random.default_rng(T + B + M + P)
    R = 3000
    read = np.setdiff1d(np.arange(P), [0, 5, 6, P - 1])
    rows = rng.choice(read, size=R).astype(np.int64)
    types = rng.integers(0, T, R).astype(np.int64)
    A, V, G = rand(rng, T, B), rand(rng, B, P, M), rand(rng, R, M)
    order, key_ptr, keys = np.empty(R, np.int64), np.empty(R + 1, np.int64), np.empty(R, np.int64)
    U = lib.mgb_embedding_grad_plan(I(rows), I(types), R, P, T, I(order), I(key_ptr), I(keys))
    np.testing.assert_array_equal(keys[:U], np.unique(rows * T + types))
    row_start = np.append(np.flatnonzero(np.diff(keys[:U] // T, prepend=-1)), U).astype(np.int64)
    num_rows = len(row_start) - 1

    A64, V64, G64 = A.astype(np.float64), V.astype(np.float64), G.astype(np.float64)
    combined = np.einsum("rb,brm->rm", A64[types], V64[:, rows])
    dA_ref = np.zeros((T, B))
    np.add.at(dA_ref, types, np.einsum("brm,rm->rb", V64[:, rows], G64))
    dV_ref = np.zeros((B, P, M))
    for b in range(B):
        np.add.at(dV_ref[b], rows, A64[types, b][:, None] * G64)

    results = []
    for threads in (1, 2):
        lib.mgb_set_threads(threads)
        Y, dA = np.empty((R, M), np.float32), np.full((T, B), 9.0, np.float32)
        dV = _aligned((B, P, M), 9.0)          # as the library's buffers: streaming stores need it
        lib.mgb_basis_fwd(F(A), F(V), I(order), I(key_ptr), I(keys), U, T, B, P, M, F(Y))
        lib.mgb_basis_coef_bwd(F(V), F(G), I(order), I(key_ptr), I(keys), I(row_start), num_rows, T, B, P, M, F(dA))
        lib.mgb_basis_bases_bwd(F(A), F(G), I(order), I(key_ptr), I(keys), I(row_start), num_rows, T, B, P, M, F(dV))
        results.append((Y, dA, dV))
    lib.mgb_set_threads(2)
    Y, dA, dV = results[0]
    np.testing.assert_allclose(Y, combined, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dA, dA_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dV, dV_ref, rtol=1e-5, atol=1e-5)
    assert not dV[:, [0, 5, 6, P - 1]].any(), "rows no lookup reads must be zero"
    for one, two in zip(results[0], results[1]):
        np.testing.assert_array_equal(one, two)


def test_embedding_plan_rejects_out_of_range(lib):
    types = np.array([0, 3], np.int64)
    order, key_ptr, keys = np.empty(2, np.int64), np.empty(3, np.int64), np.empty(2, np.int64)
    assert lib.mgb_embedding_grad_plan(I(types), ffi.NULL, 2, 3, 1, I(order), I(key_ptr), I(keys)) == -1
    src = np.array([0, 9], np.int64)
    assert lib.mgb_embedding_grad_plan(I(np.zeros(2, np.int64)), I(src), 2, 1, 5, I(order), I(key_ptr),
                                       I(keys)) == -1


# ---- sanitizer run --------------------------------------------------------------------------------

def _sanitized_env():
    return dict(os.environ, MG_SHIM_SANITIZE="1", LD_PRELOAD=str(toolchain.asan_runtime_path()),
                ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
                UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1", OMP_NUM_THREADS="2")


def test_sanitized_run():
    """Re-runs this module against an ASan+UBSan build of the shim; any report fails it."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__,
                           "-k", "not sanitized"], env=_sanitized_env(), capture_output=True, text=True,
                          timeout=600)
    report = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, report
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr, report


def test_sanitized_build_catches_an_out_of_bounds_read():
    """The harness above can fail: a gather through a source index one past the end is reported."""
    script = f"""
import sys; sys.path.insert(0, {str(HERE)!r})
import numpy as np
import test_kernels_b as t
lib = t.load_shim()
x = np.ones((4, 3), np.float32)
col = np.array([0, 4], np.int64)          # node 4 does not exist
out = np.empty((2, 3), np.float32)
lib.mgb_gather_src(t.F(x), t.I(col), 2, 3, t.F(out))
print("no report")
"""
    proc = subprocess.run([sys.executable, "-c", script], env=_sanitized_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode != 0 and "heap-buffer-overflow" in proc.stderr, proc.stderr[-2000:]
