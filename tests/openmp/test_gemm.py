"""Toolchain (build cache, errors, concurrency), BLAS wrappers (gemm.h) and the sparse-feature
path (sparse_features.h) against numpy/scipy."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

from tests.openmp import shim_a_loader as sh
from morphgen.toolchain import BuildError, compile_shared, kernel_include_dir
from tests.openmp.shim_a_loader import f32, i32, i64

TINY = 'extern "C" int answer() { return %d; }\n'


# ---------------------------------------------------------------------------------------------
# toolchain

def test_build_is_cached_and_keyed_by_source_and_flags(tmp_path):
    a = compile_shared({"m.cpp": TINY % 1}, name="tiny", cache_dir=tmp_path)
    mtime = a.stat().st_mtime_ns
    again = compile_shared({"m.cpp": TINY % 1}, name="tiny", cache_dir=tmp_path)
    assert again == a and again.stat().st_mtime_ns == mtime
    assert compile_shared({"m.cpp": TINY % 2}, name="tiny", cache_dir=tmp_path) != a
    assert compile_shared({"m.cpp": TINY % 1}, name="tiny", flags=("-DX=1",), cache_dir=tmp_path) != a
    ffi = sh.cffi.FFI()
    ffi.cdef("int answer(void);")
    assert ffi.dlopen(str(a)).answer() == 1


def test_cache_key_follows_included_headers(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "value.h").write_text("#pragma once\n#define VALUE 5\n")
    src = {"m.cpp": '#include "value.h"\nextern "C" int answer() { return VALUE; }\n'}
    first = compile_shared(src, name="dep", include_dirs=[inc], cache_dir=tmp_path / "c")
    (inc / "unrelated.h").write_text("#define OTHER 1\n")
    assert compile_shared(src, name="dep", include_dirs=[inc], cache_dir=tmp_path / "c") == first
    (inc / "value.h").write_text("#pragma once\n#define VALUE 6\n")
    second = compile_shared(src, name="dep", include_dirs=[inc], cache_dir=tmp_path / "c")
    assert second != first
    ffi = sh.cffi.FFI()
    ffi.cdef("int answer(void);")
    assert ffi.dlopen(str(second)).answer() == 6


def test_compile_error_names_build_dir_and_first_error(tmp_path):
    with pytest.raises(BuildError) as info:
        compile_shared({"broken.cpp": "int f( {\n"}, name="broken", cache_dir=tmp_path)
    msg = str(info.value)
    assert "broken.cpp:1" in msg and "error" in msg
    assert info.value.build_dir is not None and (info.value.build_dir / "build.log").exists()
    assert str(info.value.build_dir) in msg
    assert len(msg.splitlines()) < 20  # the first lines, not the whole log


@pytest.mark.parametrize("sources,name,field", [
    ({}, "m", "sources"),
    ({"m.cpp": TINY % 1}, "bad name!", "name"),
    ({"../m.cpp": TINY % 1}, "m", "filename"),
    ({"m.h": "int x;"}, "m", "translation unit"),
])
def test_bad_arguments_are_reported(tmp_path, sources, name, field):
    with pytest.raises(BuildError, match=field):
        compile_shared(sources, name=name, cache_dir=tmp_path)


def test_two_processes_building_the_same_library_both_succeed(tmp_path):
    script = textwrap.dedent(f"""
        import sys, cffi
        from morphgen.toolchain import compile_shared
        src = {{"race.cpp": '#include <cmath>\\nextern "C" double root(double x) {{ return std::sqrt(x); }}\\n'}}
        p = compile_shared(src, name="race", cache_dir=sys.argv[1])
        ffi = cffi.FFI(); ffi.cdef("double root(double);")
        assert ffi.dlopen(str(p)).root(16.0) == 4.0
        print(p)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert outs[0][0].strip() == outs[1][0].strip()
    leftovers = [q.name for q in tmp_path.iterdir() if q.name.startswith(".tmp-")]
    assert leftovers == []


def test_kernel_include_dir_holds_the_headers():
    for h in ("common.h", "spmm.h", "gemm.h", "sparse_features.h", "calibrate.h", "layout.h"):
        assert (kernel_include_dir() / h).is_file(), h


# ---------------------------------------------------------------------------------------------
# gemm

@pytest.mark.parametrize("ta", [0, 1])
@pytest.mark.parametrize("tb", [0, 1])
def test_gemm_all_transpositions_with_padded_leading_dims(ta, tb):
    lib = sh.load()
    rng = np.random.default_rng(ta * 2 + tb)
    M, N, K, pad = 13, 7, 29, 3
    A_log = rng.standard_normal((M, K)).astype(np.float32)
    B_log = rng.standard_normal((K, N)).astype(np.float32)
    A_st = A_log.T if ta else A_log
    B_st = B_log.T if tb else B_log
    A = np.zeros((A_st.shape[0], A_st.shape[1] + pad), np.float32)
    A[:, :A_st.shape[1]] = A_st
    B = np.zeros((B_st.shape[0], B_st.shape[1] + pad), np.float32)
    B[:, :B_st.shape[1]] = B_st
    C = rng.standard_normal((M, N + pad)).astype(np.float32)
    C0 = C.copy()
    assert lib.mgt_gemm(ta, tb, M, N, K, 0.5, f32(A), A.shape[1], f32(B), B.shape[1], 2.0, f32(C), C.shape[1]) == 0
    ref = 0.5 * A_log.astype(np.float64) @ B_log + 2.0 * C0[:, :N]
    np.testing.assert_allclose(C[:, :N], ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(C[:, N:], C0[:, N:])  # padding untouched


def test_gemm_rejects_bad_leading_dimension_and_parallel_callers():
    lib = sh.load()
    A = np.ones((4, 4), np.float32)
    C = np.zeros((4, 4), np.float32)
    assert lib.mgt_gemm(0, 0, 4, 4, 4, 1.0, f32(A), 3, f32(A), 4, 0.0, f32(C), 4) == 1
    assert lib.mgt_gemm_inside_parallel(f32(A), f32(A), f32(C)) == 2


def test_linear_helpers():
    lib = sh.load()
    rng = np.random.default_rng(1)
    rows, fin, fout = 37, 33, 7
    X = rng.standard_normal((rows, fin)).astype(np.float32)
    W = rng.standard_normal((fin, fout)).astype(np.float32)
    G = rng.standard_normal((rows, fout)).astype(np.float32)
    Y = np.empty((rows, fout), np.float32)
    dW = np.ones((fin, fout), np.float32)
    dX = np.empty((rows, fin), np.float32)
    assert lib.mgt_linear_forward(rows, fin, fout, f32(X), f32(W), f32(Y), 0.0) == 0
    assert lib.mgt_linear_weight_grad(rows, fin, fout, f32(X), f32(G), f32(dW), 1.0) == 0  # accumulates
    assert lib.mgt_linear_input_grad(rows, fin, fout, f32(G), f32(W), f32(dX), 0.0) == 0
    np.testing.assert_allclose(Y, X @ W, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(dW, 1.0 + X.T @ G, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(dX, G @ W.T, rtol=1e-5, atol=1e-4)


def test_blas_thread_count_is_settable():
    lib = sh.load()
    before = lib.mgt_blas_threads()
    try:
        lib.mgt_blas_set_threads(1)
        assert lib.mgt_blas_threads() == 1
        lib.mgt_blas_set_threads(0)  # 0 -> the OpenMP thread count
        assert lib.mgt_blas_threads() == lib.mgt_max_threads()
    finally:
        lib.mgt_blas_set_threads(before)


# ---------------------------------------------------------------------------------------------
# tall-skinny forward product (narrow outputs skip BLAS)

@pytest.mark.parametrize("variant", sh.VARIANTS)
# Outputs of one vector (M <= 16 with AVX-512, <= 8 with AVX2) take taller tiles: full and
# partial vectors, several tiles per thread (fetching the next) and a remainder.
# Wider outputs end on a last tile of two vectors, of one full vector (AVX-512 48, AVX2 24 and 40)
# or of one partial vector (AVX-512 33 and 40), and 49-64 columns (AVX-512: 6-row tiles of four
# vectors, the last partial; AVX2: a last tile of one or two partial vectors) with rows in several
# tiles per thread and a remainder.
@pytest.mark.parametrize("rows, K, M", [(1, 5, 1), (7, 3, 16), (8, 1, 17), (61, 47, 32), (203, 130, 33),
                                        (100, 9, 64), (29, 50, 7), (0, 4, 8), (90, 20, 16), (301, 70, 8),
                                        (77, 33, 5), (45, 21, 40), (50, 12, 48), (33, 10, 24),
                                        (203, 130, 64), (97, 77, 57), (13, 500, 49), (5, 3, 64),
                                        (12, 7, 64), (31, 40, 50)])
def test_tall_skinny_matches_numpy(variant, rows, K, M):
    lib = sh.load(variant)
    rng = np.random.default_rng(rows + K + M)
    X = rng.standard_normal((rows, K)).astype(np.float32)
    W = rng.standard_normal((K, M)).astype(np.float32)
    Y = np.full((rows, M), np.nan, np.float32)
    assert lib.mgt_tall_skinny_nn(rows, K, M, f32(X), f32(W), f32(Y)) == 0
    np.testing.assert_allclose(Y, X.astype(np.float64) @ W, rtol=1e-5, atol=1e-4)


def test_tall_skinny_rejects_a_wide_output():
    lib = sh.load()
    X, W, Y = (np.ones(s, np.float32) for s in ((4, 2), (2, 65), (4, 65)))
    assert lib.mgt_tall_skinny_nn(4, 2, 65, f32(X), f32(W), f32(Y)) == 1
    assert lib.mgt_tall_skinny_tn(4, 2, 65, f32(X), f32(Y), f32(W)) == 1


def _epilogue_reference(Y, bias, act, alpha, residual=None):
    Y = Y + (residual if residual is not None else 0.0) + (bias if bias is not None else 0.0)
    if act == 1:
        return np.maximum(Y, 0.0)
    if act == 2:
        return np.where(Y > 0, Y, alpha * Y)
    if act == 3:
        return np.where(Y > 0, Y, alpha * np.expm1(Y))
    return Y


# M <= 64 runs the tall-skinny kernel, M = 80 OpenBLAS on row blocks; both apply the epilogue,
# the residual (the other operand of a fused add) first.
@pytest.mark.parametrize("variant", sh.VARIANTS)
@pytest.mark.parametrize("M", [7, 32, 80])
@pytest.mark.parametrize("act, with_bias, with_residual", [(0, True, False), (1, True, False), (1, False, False),
                                                           (2, True, False), (3, True, False), (1, True, True),
                                                           (0, False, True)])
def test_dense_product_epilogue(variant, M, act, with_bias, with_residual):
    lib = sh.load(variant)
    rng = np.random.default_rng(M + act)
    rows, K, alpha = 37, 19, 0.2
    X = rng.standard_normal((rows, K)).astype(np.float32)
    W = rng.standard_normal((K, M)).astype(np.float32)
    bias = rng.standard_normal(M).astype(np.float32) if with_bias else None
    residual = rng.standard_normal((rows, M)).astype(np.float32) if with_residual else None
    Y = np.full((rows, M), np.nan, np.float32)
    assert lib.mgt_gemm_rows_epilogue(rows, K, M, f32(X), f32(W), f32(Y),
                                      f32(bias), act, alpha, f32(residual)) == 0
    want = _epilogue_reference(X.astype(np.float64) @ W, bias, act, alpha, residual)
    np.testing.assert_allclose(Y, want, rtol=1e-5, atol=1e-4)


# K crosses the 6- and 8-column register blocks (every tail 1..7), M ends on a full or partial
# vector of either width (1..8, 16, 17, 24, 33, 40, 64), rows cross the 16-row chunk, the
# 1,024-row span summed apart and the split between threads.
@pytest.mark.parametrize("variant", sh.VARIANTS)
# G of 49-64 columns: rows of X of 128 or more values (prefetched chunks; with AVX-512 the 6 x 4
# vector tiles from 96 values on), K not a multiple of the tile's block (every tail 1..5 of the
# 6-column block), rows crossing chunks and spans (whose ends the chunks fetch across).
@pytest.mark.parametrize("rows, K, M", [(1, 5, 1), (7, 3, 16), (8, 1, 17), (61, 47, 32), (203, 130, 33),
                                        (300, 48, 7), (129, 49, 5), (257, 500, 3), (100, 9, 64),
                                        (3, 2, 2), (0, 4, 8), (4099, 13, 40), (2600, 31, 24),
                                        (17, 15, 8), (203, 130, 64), (1100, 257, 57), (70, 11, 49),
                                        (2049, 128, 64), (97, 97, 50), (130, 99, 64), (65, 96, 63),
                                        (1100, 101, 56)])
def test_tall_skinny_weight_gradient_matches_numpy(variant, rows, K, M):
    lib = sh.load(variant)
    assert_weight_gradient(rows, K, M, lambda *a: lib.mgt_tall_skinny_tn(rows, K, M, *a), seed=rows * 7 + K + M)


def assert_weight_gradient(rows, K, M, gradient, seed):
    """gradient(X, G, dW) writes dW = X^T G; it must succeed and match numpy's."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, K)).astype(np.float32)
    G = rng.standard_normal((rows, M)).astype(np.float32)
    dW = np.full((K, M), np.nan, np.float32)
    assert gradient(f32(X), f32(G), f32(dW)) == 0
    np.testing.assert_allclose(dW, X.T.astype(np.float64) @ G, rtol=1e-5, atol=1e-4)


# The instances of a known narrow width (the emitter's matmul_tn<M>; with AVX-512 G's values
# broadcast against X's rows): K crosses the blocks of vectors (3 or 4 per block, then one at a
# time, the last masked), rows cross the 128-row chunk, the 1,024-row span and the threads.
@pytest.mark.parametrize("variant", sh.VARIANTS)
@pytest.mark.parametrize("M", range(1, 9))
@pytest.mark.parametrize("rows, K", [(1, 1), (130, 15), (300, 64), (1100, 49), (2051, 100), (40, 500)])
def test_weight_gradient_of_a_known_narrow_width_matches_numpy(variant, M, rows, K):
    lib = sh.load(variant)
    assert_weight_gradient(rows, K, M, lambda *a: lib.mgt_tall_skinny_tn_width(M, rows, K, M, *a),
                           seed=rows * 13 + K + M)


def test_an_instance_refuses_another_width():
    lib = sh.load(sh.VARIANTS[0])
    X, G, dW = (np.zeros(s, np.float32) for s in ((4, 3), (4, 6), (3, 6)))
    assert lib.mgt_tall_skinny_tn_width(7, 4, 3, 6, f32(X), f32(G), f32(dW)) == 1     # kErrArgument


# ---------------------------------------------------------------------------------------------
# sparse feature path

def sparse_features(rng, rows, K, density):
    X = sp.random(rows, K, density=density, format="csr", random_state=int(rng.integers(1 << 30)),
                  dtype=np.float32)
    keep = np.ones(rows, np.float32)
    keep[::9] = 0.0  # every ninth row empty
    X = sp.csr_matrix(sp.diags(keep) @ X, dtype=np.float32)
    X.eliminate_zeros()
    X.data = rng.standard_normal(X.nnz).astype(np.float32)
    X.data[0] = 0.0  # an explicitly stored zero must behave like any value
    # unsorted columns inside a row, as a CSR built by hand may have them
    for r in range(0, rows, 2):
        lo, hi = X.indptr[r], X.indptr[r + 1]
        X.indices[lo:hi] = X.indices[lo:hi][::-1].copy()
        X.data[lo:hi] = X.data[lo:hi][::-1].copy()
    return X, X.indptr.astype(np.int64), X.indices.astype(np.int32), np.ascontiguousarray(X.data)


def dropout_mask(lib, rows, K, p, key):
    """Keep-mask of the dense layout, element (r, c) at index r*K + c, scaled like inverted dropout."""
    keep = np.array([[lib.mgt_dropout_keep(*key, p, r * K + c) for c in range(K)] for r in range(rows)], bool)
    return keep / np.float32(1 - p)


# block_cols 8 and 16 cut K into many blocks with a narrow last one; 4096 is one block
BLOCKINGS = [8, 16, 4096]


@pytest.mark.parametrize("variant", sh.VARIANTS)
@pytest.mark.parametrize("F", [1, 3, 7, 31, 33, 47])
@pytest.mark.parametrize("block_cols", BLOCKINGS)
def test_sparse_forward_matches_dense(variant, F, block_cols):
    lib = sh.load(variant)
    rng = np.random.default_rng(F)
    rows, K = 90, 70
    X, indptr, col, val = sparse_features(rng, rows, K, 0.08)
    assert (np.diff(indptr) == 0).any(), "want some empty rows"
    W = rng.standard_normal((K, F)).astype(np.float32)
    Y = np.full((rows, F), np.nan, np.float32)
    assert sh.SparseBlocks(lib, rows, K, indptr, col, val, block_cols).forward(F, W, Y) == 0
    np.testing.assert_allclose(Y, X.toarray() @ W, rtol=1e-5, atol=1e-5)
    # dense and sparse paths agree: the dense path is the BLAS gemm
    Yd = np.empty((rows, F), np.float32)
    Xd = np.ascontiguousarray(X.toarray())
    assert lib.mgt_linear_forward(rows, K, F, f32(Xd), f32(W), f32(Yd), 0.0) == 0
    np.testing.assert_allclose(Yd, Y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", sh.VARIANTS)
@pytest.mark.parametrize("F", [1, 3, 7, 31, 33, 47])
@pytest.mark.parametrize("block_cols", BLOCKINGS)
def test_sparse_weight_grad_matches_numpy(variant, F, block_cols):
    lib = sh.load(variant)
    rng = np.random.default_rng(F + 50)
    rows, K = 80, 64
    X, indptr, col, val = sparse_features(rng, rows, K, 0.1)
    G = rng.standard_normal((rows, F)).astype(np.float32)
    ref = X.toarray().astype(np.float64).T @ G
    blocks = sh.SparseBlocks(lib, rows, K, indptr, col, val, block_cols)
    for accumulate in (0, 1):
        base = rng.standard_normal((K, F)).astype(np.float32)
        dW = base.copy() if accumulate else np.full((K, F), np.nan, np.float32)
        assert blocks.grad(F, G, dW, accumulate) == 0
        np.testing.assert_allclose(dW, ref + (base if accumulate else 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", sh.VARIANTS)
@pytest.mark.parametrize("rows, K, block_cols", [(40, 30, 8), (40, 30, 4096),
                                                 # over 64k entries: the mask is drawn by threads,
                                                 # in chunks that start inside segments
                                                 (700, 400, 64)])
def test_sparse_dropout_is_the_dense_layouts_mask(variant, rows, K, block_cols):
    """Dropout inside the sparse kernels drops element (r, c) exactly when the dense path does,
    and a new key (the next epoch) draws a new mask: the kernels cache the mask of one key."""
    lib = sh.load(variant)
    rng = np.random.default_rng(7)
    F, p = 33, 0.4
    X, indptr, col, val = sparse_features(rng, rows, K, 0.3)
    W = rng.standard_normal((K, F)).astype(np.float32)
    G = rng.standard_normal((rows, F)).astype(np.float32)
    blocks = sh.SparseBlocks(lib, rows, K, indptr, col, val, block_cols)
    for key in [(11, 3, 5), (11, 4, 5), (11, 3, 5)]:
        mask = dropout_mask(lib, rows, K, p, key)
        assert 0.3 < (mask == 0).mean() < 0.5
        Xdrop = X.toarray() * mask
        Y = np.empty((rows, F), np.float32)
        assert blocks.forward(F, W, Y, p, key) == 0
        np.testing.assert_allclose(Y, Xdrop @ W, rtol=1e-5, atol=1e-4)
        dW = np.empty((K, F), np.float32)
        assert blocks.grad(F, G, dW, 0, p, key) == 0
        np.testing.assert_allclose(dW, Xdrop.T @ G, rtol=1e-5, atol=1e-4)
    assert blocks.forward(F, W, Y, 0.0, key) == 0  # no dropout: the cached mask is not applied
    np.testing.assert_allclose(Y, X.toarray() @ W, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("indptr, col, block_cols", [
    ([0, 2, 1], [0, 1], 8),          # a decreasing row pointer
    ([0, 1, 2], [0, 5], 8),          # a column out of range (K = 4)
    ([0, 1, 2], [0, -1], 8),         # a negative column
    ([1, 1, 2], [0, 1], 8),          # a row pointer that does not start at 0
    ([0, 1, 2], [0, 1], 6),          # a block width that is not a power of two
])
def test_sparse_blocks_reject_bad_csr(indptr, col, block_cols):
    lib = sh.load()
    indptr, col = np.array(indptr, np.int64), np.array(col, np.int32)
    blocks = sh.SparseBlocks(lib, 2, 4, indptr, col, np.ones(2, np.float32), block_cols)
    assert blocks.status == 1 and blocks.handle == sh.ffi.NULL


# ---------------------------------------------------------------------------------------------
# calibration (rho, tau, triad) and its cache

def test_calibration_measures_caches_and_can_be_overridden(tmp_path, monkeypatch):
    from morphgen import calibrate as cal

    monkeypatch.delenv("MORPHGEN_TAU", raising=False)
    monkeypatch.setattr(cal, "_cache_file", lambda: tmp_path / "calibration.json")
    first = cal.calibrate(force=True)
    assert first.source == "measured"
    assert 0.0 < first.rho <= 1.0 and abs(first.tau - (1.0 - first.rho)) < 1e-12
    assert first.dense_gflops > 0 and first.sparse_gflops > 0 and first.triad_gbs > 0
    again = cal.calibrate()
    assert again.source == "cache" and again.rho == first.rho
    monkeypatch.setenv("MORPHGEN_TAU", "0.75")
    assert cal.calibrate().tau == 0.75 and cal.use_sparse_features(0.8) and not cal.use_sparse_features(0.7)
    monkeypatch.setenv("MORPHGEN_TAU", "high")
    with pytest.raises(cal.CalibrationError, match="MORPHGEN_TAU"):
        cal.calibrate()


@pytest.mark.parametrize("key, p", [((0, 0, 3), 0.5), ((11, 3, 5), 0.4), ((2**63 + 5, 7, 123), 0.1),
                                    ((1, 2, 3), 0.9)])
def test_interpreter_dropout_mask_is_the_kernels(key, p):
    """The numpy oracle regenerates the kernels' counter-based mask bit for bit, so programs
    with dropout can be compared with the interpreter element by element."""
    from morphgen.interp import dropout_keep_mask
    lib = sh.load("portable")
    n = 517
    kernel = np.array([lib.mgt_dropout_keep(*key, p, i) for i in range(n)], bool)
    np.testing.assert_array_equal(dropout_keep_mask(*key, p, n), kernel)


def test_sparse_weight_grad_is_the_same_bits_every_run():
    """Xᵀ·G sums per-thread slabs: the rows each slab gets must not depend on timing.  Four
    threads on a smaller machine and uneven rows make a timing-dependent split show up."""
    lib = sh.load()
    rng = np.random.default_rng(8)
    rows, K, F = 6000, 300, 16
    X, indptr, col, val = sparse_features(rng, rows, K, 0.03)
    heavy = sp.random(rows // 10, K, density=0.5, format="csr", random_state=3, dtype=np.float32)
    X = sp.vstack([X[: rows - rows // 10], heavy], format="csr").astype(np.float32)
    indptr, col, val = X.indptr.astype(np.int64), X.indices.astype(np.int32), np.ascontiguousarray(X.data)
    G = rng.standard_normal((rows, F)).astype(np.float32)
    blocks = sh.SparseBlocks(lib, rows, K, indptr, col, val, 4096)
    lib.mgt_set_threads(4)
    try:
        results = []
        for _ in range(40):
            dW = np.empty((K, F), np.float32)
            assert blocks.grad(F, G, dW, 0) == 0
            results.append(dW)
    finally:
        lib.mgt_set_threads(os.cpu_count() or 1)
    for dW in results[1:]:
        np.testing.assert_array_equal(dW, results[0])
