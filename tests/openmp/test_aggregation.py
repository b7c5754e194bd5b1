"""SpMM aggregation kernels (spmm.h, layout.h) against numpy/scipy references, via cffi."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from tests.openmp import shim_a_loader as sh
from tests.openmp.shim_a_loader import MAX, MEAN, SUM, f32, i64

WIDTHS = (1, 3, 7, 31, 33, 47)
VARIANTS = sh.VARIANTS


@pytest.fixture(scope="module")
def graph():
    return sh.random_graph(np.random.default_rng(7))


@pytest.fixture(scope="module")
def simple_graph():
    """No parallel edges: the weighted max backward is exact only there (see spmm.h)."""
    return sh.random_graph(np.random.default_rng(11), parallel_edges=False)


# ---------------------------------------------------------------------------------------------
# numpy references

def gcn_scale(g, self_loop):
    d = g.in_degree + (1 if self_loop else 0)
    return np.where(d > 0, 1.0 / np.sqrt(np.maximum(d, 1)), 0.0).astype(np.float32)


def coefficients(g, w, scale):
    c = np.ones(g.num_edges) if w is None else w.astype(np.float64)
    if scale is not None:
        c = c * scale[g.src].astype(np.float64) * scale[g.dst].astype(np.float64)
    return c


def self_coefficients(g, scale):
    return np.ones(g.n) if scale is None else scale.astype(np.float64) ** 2


def operator(g, reduce, w, scale, self_loop):
    """Dense n x n matrix M with Y = M X for sum / mean (duplicates add up)."""
    M = sp.csr_matrix((coefficients(g, w, scale), (g.dst, g.src)), shape=(g.n, g.n)).toarray()
    if self_loop:
        M += np.diag(self_coefficients(g, scale))
    if reduce == MEAN:
        cnt = g.in_degree + (1 if self_loop else 0)
        M[cnt > 0] /= cnt[cnt > 0, None]
    return M


def ref_max(g, X, w, scale, self_loop):
    """Values, argmax (source id, -1 if none) and the winning coefficient per output element."""
    n, F = X.shape
    c = coefficients(g, w, scale)
    selfc = self_coefficients(g, scale)
    Y = np.zeros((n, F))
    arg = np.full((n, F), -1, np.int64)
    win = np.zeros((n, F))
    X64 = X.astype(np.float64)
    for v in range(n):
        coefs, ids = [], []
        if self_loop:
            coefs.append(selfc[v]); ids.append(v)
        for e in range(g.indptr[v], g.indptr[v + 1]):
            coefs.append(c[e]); ids.append(g.src[e])
        if not ids:
            continue
        coefs, ids = np.array(coefs), np.array(ids)
        cand = coefs[:, None] * X64[ids]
        k = np.argmax(cand, axis=0)                      # first maximum wins
        Y[v] = cand[k, np.arange(F)]
        arg[v] = ids[k]
        win[v] = coefs[k]
    return Y, arg, win


def epilogue(Y, bias, act, alpha):
    if bias is not None:
        Y = Y + bias
    if act == sh.ACT_RELU:
        Y = np.maximum(Y, 0)
    elif act == sh.ACT_LEAKY:
        Y = np.where(Y > 0, Y, alpha * Y)
    elif act == sh.ACT_ELU:
        Y = np.where(Y > 0, Y, alpha * np.expm1(np.minimum(Y, 0)))
    return Y


def run_forward(lib, g, X, reduce, w=None, scale=None, self_loop=False, bias=None, act=0, alpha=0.01,
                tile=None, lookahead=None):
    n, F = X.shape
    Y = np.full((n, F), np.nan, np.float32)
    arg = np.full((n, F), -7, np.int64) if reduce == MAX else None
    args = (n, i64(g.indptr), i64(g.col), f32(X), F, f32(Y), reduce, f32(w), f32(scale), int(self_loop),
            f32(bias), act, alpha, i64(arg))
    st = lib.mgt_spmm(*args) if tile is None else lib.mgt_spmm_variant(tile, lookahead, *args)
    assert st == 0
    return Y, arg


def assert_forward_matches(g, X, Y, arg, reduce, w=None, scale=None, self_loop=False):
    """Y (and, for max, the argmax) of a forward aggregation against the numpy reference."""
    if reduce == MAX:
        ref, ref_arg, _ = ref_max(g, X, w, scale, self_loop)
        np.testing.assert_array_equal(arg, ref_arg)
    else:
        ref = operator(g, reduce, w, scale, self_loop) @ X.astype(np.float64)
    np.testing.assert_allclose(Y, ref, rtol=1e-5, atol=1e-5)


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# layout

def test_transpose_csr_matches_numpy(graph):
    lib = sh.load()
    g = graph
    t_indptr = np.empty(g.n + 1, np.int64)
    t_row = np.empty(g.num_edges, np.int64)
    t_pos = np.empty(g.num_edges, np.int64)
    assert lib.mgt_transpose_csr(g.n, g.n, i64(g.indptr), i64(g.col), i64(t_indptr), i64(t_row), i64(t_pos)) == 0
    np.testing.assert_array_equal(t_indptr, g.t_indptr)
    np.testing.assert_array_equal(t_row, g.t_col)
    np.testing.assert_array_equal(t_pos, g.t_eid)
    # every transposed entry points back at an edge with the same endpoints
    np.testing.assert_array_equal(g.src[t_pos], np.repeat(np.arange(g.n), np.diff(t_indptr)))
    np.testing.assert_array_equal(g.dst[t_pos], t_row)


def test_transpose_csr_rejects_out_of_range_column():
    lib = sh.load()
    indptr = np.array([0, 2], np.int64)
    col = np.array([0, 5], np.int64)
    out = np.empty(3, np.int64), np.empty(2, np.int64), np.empty(2, np.int64)
    assert lib.mgt_transpose_csr(1, 2, i64(indptr), i64(col), *(i64(a) for a in out)) == 1


@pytest.mark.parametrize("self_loop", [False, True])
def test_gcn_node_scale(graph, self_loop):
    lib = sh.load()
    s = np.empty(graph.n, np.float32)
    lib.mgt_gcn_node_scale(graph.n, i64(graph.indptr), int(self_loop), f32(s))
    np.testing.assert_allclose(s, gcn_scale(graph, self_loop), rtol=1e-6)
    if not self_loop:
        assert (s[graph.in_degree == 0] == 0).all()


# ---------------------------------------------------------------------------------------------
# forward

@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("F", WIDTHS)
@pytest.mark.parametrize("reduce", [SUM, MEAN, MAX])
@pytest.mark.parametrize("weighted,gcn,self_loop", [
    (False, False, False), (True, False, False), (False, True, True), (True, True, False), (False, False, True),
])
def test_forward_matches_reference(graph, variant, F, reduce, weighted, gcn, self_loop):
    lib = sh.load(variant)
    rng = np.random.default_rng(F * 31 + reduce)
    g = graph
    X = rand(rng, g.n, F)
    w = rng.uniform(0.2, 1.5, g.num_edges).astype(np.float32) if weighted else None
    scale = gcn_scale(g, self_loop) if gcn else None
    Y, arg = run_forward(lib, g, X, reduce, w, scale, self_loop)
    assert np.isfinite(Y).all()
    assert_forward_matches(g, X, Y, arg, reduce, w, scale, self_loop)
    if not self_loop:  # zero in-degree rows are exactly zero, argmax -1
        empty = g.in_degree == 0
        assert empty.any()
        assert (Y[empty] == 0).all()
        if reduce == MAX:
            assert (arg[empty] == -1).all()


@pytest.mark.parametrize("reduce", [SUM, MEAN, MAX])
def test_listed_rows_are_the_full_aggregation_s_rows(graph, reduce):
    """spmm_rows computes exactly the listed rows (in any order), each as spmm does, and
    leaves every other row of the output untouched."""
    lib = sh.load("native")
    rng = np.random.default_rng(5 + reduce)
    g, F = graph, 37
    X = rand(rng, g.n, F)
    scale = gcn_scale(g, True)
    full, full_arg = run_forward(lib, g, X, reduce, None, scale, True)
    rows = rng.permutation(g.n)[: g.n // 3].astype(np.int64)
    Y = np.full((g.n, F), np.nan, np.float32)
    arg = np.full((g.n, F), -7, np.int64)
    assert lib.mgt_spmm_rows(g.n, i64(rows), rows.shape[0], i64(g.indptr), i64(g.col), f32(X), F, f32(Y), reduce,
                             f32(None), f32(scale), 1, i64(arg if reduce == MAX else None)) == 0
    np.testing.assert_array_equal(Y[rows], full[rows])
    others = np.setdiff1d(np.arange(g.n), rows)
    assert np.isnan(Y[others]).all()
    if reduce == MAX:
        np.testing.assert_array_equal(arg[rows], full_arg[rows])
        assert (arg[others] == -7).all()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("act", [sh.ACT_NONE, sh.ACT_RELU, sh.ACT_LEAKY, sh.ACT_ELU])
@pytest.mark.parametrize("reduce", [SUM, MEAN, MAX])
def test_fused_bias_activation_epilogue(graph, variant, act, reduce):
    lib = sh.load(variant)
    rng = np.random.default_rng(act + 10 * reduce)
    F = 47
    X, bias = rand(rng, graph.n, F), rand(rng, F)
    Y, _ = run_forward(lib, graph, X, reduce, bias=bias, act=act, alpha=0.2)
    if reduce == MAX:
        raw = ref_max(graph, X, None, None, False)[0]
    else:
        raw = operator(graph, reduce, None, None, False) @ X.astype(np.float64)
    np.testing.assert_allclose(Y, epilogue(raw, bias, act, 0.2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tile,lookahead", [(32, 0), (32, 16), (16, 8), (64, 8)])
@pytest.mark.parametrize("reduce", [SUM, MAX])
def test_tile_and_lookahead_variants_agree(graph, tile, lookahead, reduce):
    # hubs have in-degree > 60, so every lookahead takes its prefetching loop
    assert graph.in_degree.max() > 60
    lib = sh.load()
    rng = np.random.default_rng(tile + lookahead)
    for F in (5, 32, 47, 130):
        X = rand(rng, graph.n, F)
        w = rng.uniform(0.2, 1.5, graph.num_edges).astype(np.float32)
        Y, arg = run_forward(lib, graph, X, reduce, w, tile=tile, lookahead=lookahead)
        assert_forward_matches(graph, X, Y, arg, reduce, w)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("reduce", [SUM, MEAN, MAX])
def test_width_rounded_tiles_match_reference(graph, variant, reduce):
    """Rows between 32 and 64 floats wide take a tile of their width in whole vectors
    (spmm_tile_for: 40 -> 40 with AVX2, 48 with AVX-512; the portable build, without vectors,
    takes the 64 tile), full or with a masked last part, forward and transposed; the tile's
    prefetch covers the row's lines only."""
    lib = sh.load(variant)
    lanes = lib.mgt_simd_lanes()
    rng = np.random.default_rng(reduce)
    for F in (33, 40, 47, 56, 63):
        tile = lib.mgt_spmm_tile_for(F)
        if lanes > 1:
            assert tile >= F and tile % lanes == 0 and tile - F < lanes, (F, tile, lanes)
        else:
            assert tile == 64, (F, tile)
        X = rand(rng, graph.n, F)
        w = rng.uniform(0.2, 1.5, graph.num_edges).astype(np.float32)
        Y = np.full((graph.n, F), np.nan, np.float32)
        arg = np.full((graph.n, F), -7, np.int64)
        assert lib.mgt_spmm_width_tiled(graph.n, i64(graph.indptr), i64(graph.col), f32(X), F, f32(Y), reduce,
                                        f32(w), sh.ffi.NULL, 0, i64(arg)) == 0
        assert_forward_matches(graph, X, Y, arg, reduce, w)
        if reduce == MAX:
            continue
        G = rand(rng, graph.n, F)
        dX = np.full((graph.n, F), np.nan, np.float32)
        assert lib.mgt_spmm_transpose_width_tiled(graph.n, i64(graph.indptr), i64(graph.t_indptr), i64(graph.t_col),
                                                  i64(graph.t_eid), f32(G), F, f32(dX), reduce, f32(w),
                                                  sh.ffi.NULL, 1) == 0
        ref_t = operator(graph, reduce, w, None, True).T @ G.astype(np.float64)
        np.testing.assert_allclose(dX, ref_t, rtol=1e-5, atol=1e-5)


def test_unknown_variant_is_refused(graph):
    lib = sh.load()
    X = np.zeros((graph.n, 4), np.float32)
    Y = np.zeros_like(X)
    assert lib.mgt_spmm_variant(48, 3, graph.n, i64(graph.indptr), i64(graph.col), f32(X), 4, f32(Y),
                                SUM, sh.ffi.NULL, sh.ffi.NULL, 0, sh.ffi.NULL, 0, 0.0, sh.ffi.NULL) == -1


# ---------------------------------------------------------------------------------------------
# backward

def run_transpose(lib, g, G, reduce, w=None, scale=None, self_loop=False, accumulate_into=None):
    n, F = G.shape
    dX = np.full((n, F), np.nan, np.float32) if accumulate_into is None else accumulate_into
    st = lib.mgt_spmm_transpose(n, i64(g.indptr), i64(g.t_indptr), i64(g.t_col), i64(g.t_eid), f32(G), F,
                                f32(dX), reduce, f32(w), f32(scale), int(self_loop),
                                int(accumulate_into is not None))
    assert st == 0
    return dX


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("F", WIDTHS)
@pytest.mark.parametrize("reduce", [SUM, MEAN])
@pytest.mark.parametrize("weighted,gcn,self_loop", [
    (False, False, False), (True, False, False), (False, True, True), (True, True, True), (False, False, True),
])
def test_transpose_is_the_true_transpose(graph, variant, F, reduce, weighted, gcn, self_loop):
    lib = sh.load(variant)
    rng = np.random.default_rng(F + 100 * reduce)
    g = graph
    G = rand(rng, g.n, F)
    w = rng.uniform(0.2, 1.5, g.num_edges).astype(np.float32) if weighted else None
    scale = gcn_scale(g, self_loop) if gcn else None
    M = operator(g, reduce, w, scale, self_loop)
    assert not np.allclose(M, M.T), "the test graph must be asymmetric"
    dX = run_transpose(lib, g, G, reduce, w, scale, self_loop)
    np.testing.assert_allclose(dX, M.T @ G.astype(np.float64), rtol=1e-5, atol=1e-5)
    # adjoint identity through the kernels alone: <M X, G> == <X, M^T G>
    X = rand(rng, g.n, F)
    Y, _ = run_forward(lib, g, X, reduce, w, scale, self_loop)
    lhs, rhs = float(np.vdot(Y.astype(np.float64), G)), float(np.vdot(X.astype(np.float64), dX))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs))


def test_transpose_accumulates(graph):
    lib = sh.load()
    rng = np.random.default_rng(3)
    G = rand(rng, graph.n, 33)
    base = rand(rng, graph.n, 33)
    out = run_transpose(lib, graph, G, SUM, accumulate_into=base.copy())
    M = operator(graph, SUM, None, None, False)
    np.testing.assert_allclose(out, base + M.T @ G.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_transpose_refuses_max(graph):
    lib = sh.load()
    G = np.zeros((graph.n, 2), np.float32)
    dX = np.zeros_like(G)
    assert lib.mgt_spmm_transpose(graph.n, i64(graph.indptr), i64(graph.t_indptr), i64(graph.t_col),
                                  i64(graph.t_eid), f32(G), 2, f32(dX), MAX, sh.ffi.NULL, sh.ffi.NULL,
                                  0, 0) == 1


def run_max_backward(lib, g, arg, G, w=None, scale=None, self_loop=False, accumulate_into=None):
    n, F = G.shape
    dX = np.full((n, F), np.nan, np.float32) if accumulate_into is None else accumulate_into
    assert lib.mgt_spmm_max_backward(n, i64(g.t_indptr), i64(g.t_col), i64(g.t_eid), i64(arg), f32(G), F,
                                     f32(dX), f32(w), f32(scale), int(self_loop),
                                     int(accumulate_into is not None)) == 0
    return dX


def ref_max_backward(g, X, G, w, scale, self_loop):
    _, arg, win = ref_max(g, X, w, scale, self_loop)
    dX = np.zeros(X.shape)
    v, f = np.nonzero(arg >= 0)
    np.add.at(dX, (arg[v, f], f), win[v, f] * G[v, f])
    return dX


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("F", WIDTHS)
@pytest.mark.parametrize("gcn,self_loop", [(False, False), (True, True), (False, True), (True, False)])
def test_max_backward_unweighted_with_parallel_edges(graph, variant, F, gcn, self_loop):
    lib = sh.load(variant)
    rng = np.random.default_rng(F + 7)
    X, G = rand(rng, graph.n, F), rand(rng, graph.n, F)
    scale = gcn_scale(graph, self_loop) if gcn else None
    _, arg = run_forward(lib, graph, X, MAX, None, scale, self_loop)
    dX = run_max_backward(lib, graph, arg, G, None, scale, self_loop)
    np.testing.assert_allclose(dX, ref_max_backward(graph, X, G, None, scale, self_loop), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("F", (3, 33))
def test_max_backward_weighted(simple_graph, F):
    lib = sh.load()
    g = simple_graph
    rng = np.random.default_rng(F)
    X, G = rand(rng, g.n, F), rand(rng, g.n, F)
    w = rng.uniform(0.2, 1.5, g.num_edges).astype(np.float32)
    _, arg = run_forward(lib, g, X, MAX, w)
    dX = run_max_backward(lib, g, arg, G, w)
    np.testing.assert_allclose(dX, ref_max_backward(g, X, G, w, None, False), rtol=1e-5, atol=1e-5)
    base = rand(rng, g.n, F)
    acc = run_max_backward(lib, g, arg, G, w, accumulate_into=base.copy())
    np.testing.assert_allclose(acc, base + dX, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("F", (1, 7, 47))
@pytest.mark.parametrize("reduce,gcn,self_loop", [(SUM, False, False), (MEAN, False, True), (SUM, True, True)])
def test_edge_weight_grad(graph, F, reduce, gcn, self_loop):
    lib = sh.load()
    g = graph
    rng = np.random.default_rng(F * 3 + reduce)
    X, G = rand(rng, g.n, F), rand(rng, g.n, F)
    scale = gcn_scale(g, self_loop) if gcn else None
    dw = np.full(g.num_edges, np.nan, np.float32)
    assert lib.mgt_spmm_edge_weight_grad(g.n, i64(g.indptr), i64(g.col), f32(X), f32(G), F, f32(dw), reduce,
                                         f32(scale), int(self_loop)) == 0
    ref = np.einsum("ef,ef->e", G[g.dst].astype(np.float64), X[g.src].astype(np.float64))
    if scale is not None:
        ref *= scale[g.src] * scale[g.dst]
    if reduce == MEAN:
        ref /= (g.in_degree + int(self_loop))[g.dst]
    np.testing.assert_allclose(dw, ref, rtol=1e-5, atol=1e-5)
    # finite difference on one edge weight through the forward kernel
    w = rng.uniform(0.5, 1.5, g.num_edges).astype(np.float32)
    e, h = int(np.argmax(g.in_degree[g.dst])), 1e-2
    wp, wm = w.copy(), w.copy()
    wp[e] += h
    wm[e] -= h
    Yp, _ = run_forward(lib, g, X, reduce, wp, scale, self_loop)
    Ym, _ = run_forward(lib, g, X, reduce, wm, scale, self_loop)
    fd = (np.vdot(Yp.astype(np.float64), G) - np.vdot(Ym.astype(np.float64), G)) / (2 * h)
    assert abs(fd - dw[e]) <= 1e-3 * max(1.0, abs(fd))


@pytest.mark.parametrize("threads", [1, 2])
def test_results_do_not_depend_on_thread_count(graph, threads):
    lib = sh.load()
    rng = np.random.default_rng(5)
    X = rand(rng, graph.n, 47)
    lib.mgt_set_threads(threads)
    try:
        Y, arg = run_forward(lib, graph, X, MAX)
    finally:
        lib.mgt_set_threads(os.cpu_count() or 1)
    ref, ref_arg, _ = ref_max(graph, X, None, None, False)
    np.testing.assert_array_equal(arg, ref_arg)
    np.testing.assert_allclose(Y, ref, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# AddressSanitizer + UBSan run of the shim, in a child process with libasan preloaded.

def _asan_child(so_path: str) -> None:
    lib = sh.ffi.dlopen(so_path)
    rng = np.random.default_rng(0)
    g = sh.random_graph(rng, n=60, e=300, hubs=2, hub_degree=40)
    for F in (1, 33, 47):
        X, G = rand(rng, g.n, F), rand(rng, g.n, F)
        w = rng.uniform(0.2, 1.5, g.num_edges).astype(np.float32)
        scale = gcn_scale(g, True)
        bias = rand(rng, F)
        for reduce in (SUM, MEAN, MAX):
            Y, arg = run_forward(lib, g, X, reduce, w, scale, True, bias, sh.ACT_ELU, 1.0)
            ref = ref_max(g, X, w, scale, True)[0] if reduce == MAX else \
                operator(g, reduce, w, scale, True) @ X.astype(np.float64)
            np.testing.assert_allclose(Y, epilogue(ref, bias, sh.ACT_ELU, 1.0), rtol=1e-4, atol=1e-4)
            if reduce == MAX:
                run_max_backward(lib, g, arg, G, None, scale, True)
            else:
                run_transpose(lib, g, G, reduce, w, scale, True)
        dw = np.empty(g.num_edges, np.float32)
        assert lib.mgt_spmm_edge_weight_grad(g.n, i64(g.indptr), i64(g.col), f32(X), f32(G), F, f32(dw), SUM,
                                             sh.ffi.NULL, 0) == 0
        # sparse features (several column blocks, with and without dropout) + gemm
        Xs = sp.random(50, 40, density=0.1, format="csr", random_state=1, dtype=np.float32)
        indptr, col, val = (np.ascontiguousarray(a) for a in (Xs.indptr.astype(np.int64),
                                                                Xs.indices.astype(np.int32), Xs.data))
        W = rand(rng, 40, F)
        Ys = np.empty((50, F), np.float32)
        Gs = rand(rng, 50, F)
        dW = np.empty((40, F), np.float32)
        blocks = sh.SparseBlocks(lib, 50, 40, indptr, col, val, 16)
        for p in (0.5, 0.0):
            assert blocks.forward(F, W, Ys, p, (1, 2, 3)) == 0
            assert blocks.grad(F, Gs, dW, 0, p, (1, 2, 3)) == 0
        np.testing.assert_allclose(Ys, Xs.toarray() @ W, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(dW, Xs.toarray().T @ Gs, rtol=1e-4, atol=1e-4)
        del blocks
        C = np.empty((50, 40), np.float32)
        assert lib.mgt_gemm(0, 1, 50, 40, F, 1.0, f32(Gs), F, f32(W), F, 0.0, f32(C), 40) == 0
        np.testing.assert_allclose(C, Gs @ W.T, rtol=1e-4, atol=1e-4)
    print("asan-child-ok")


def test_shim_is_clean_under_asan_and_ubsan(tmp_path):
    from morphgen.toolchain import asan_runtime_path

    so = sh.build("native", sanitize=True)
    env = dict(os.environ)
    env["LD_PRELOAD"] = str(asan_runtime_path())
    # CPython itself keeps allocations alive at exit; leak checking would only report those.
    env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
    env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    env["PYTHONPATH"] = os.path.dirname(__file__) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, __file__, "--asan-child", str(so)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "asan-child-ok" in proc.stdout
    assert "runtime error" not in proc.stderr
    assert "AddressSanitizer" not in proc.stderr


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--asan-child":
    _asan_child(sys.argv[2])
