"""Fused op-layer calls (backends/openmp/ops.h) equal the unfused sequence they replace, bit for bit."""
import functools

import numpy as np
import pytest
from cffi import FFI

from morphgen import toolchain
from morphgen.backends.openmp.emitter import OpenMPEmitter
from morphgen.pipeline import include_dirs

SOURCE = r'''
#include "ops.h"
extern "C" {
void t_act_grad(int act, float alpha, const float* G, const float* Y, int64_t n, float* dX) {
    mg::op::act_grad(static_cast<mg::op::ActKind>(act), alpha, G, Y, n, dX);
}
void t_dropout_grad(const float* G, float* dX, int64_t n, float p, uint64_t seed, uint64_t epoch, uint64_t site) {
    mg::op::dropout_grad(G, dX, n, p, seed, epoch, site);
}
void t_dropout_act_grad(int act, float alpha, const float* G, const float* Y, int64_t n, float p, uint64_t seed,
                        uint64_t epoch, uint64_t site, float* dX) {
    mg::op::dropout_act_grad(static_cast<mg::op::ActKind>(act), alpha, G, Y, n, p, seed, epoch, site, dX);
}
}
'''
CDEF = """
void t_act_grad(int act, float alpha, const float* G, const float* Y, int64_t n, float* dX);
void t_dropout_grad(const float* G, float* dX, int64_t n, float p, uint64_t seed, uint64_t epoch, uint64_t site);
void t_dropout_act_grad(int act, float alpha, const float* G, const float* Y, int64_t n, float p, uint64_t seed,
                        uint64_t epoch, uint64_t site, float* dX);
"""
ffi = FFI()
ffi.cdef(CDEF)


@functools.lru_cache(maxsize=None)
def lib():
    path = toolchain.compile_shared({"ops_fused.cpp": SOURCE}, name="ops_fused_shim", include_dirs=include_dirs(),
                                      prebuilt_units=OpenMPEmitter.ops_units)
    return ffi.dlopen(str(path))


def f32(a):
    return ffi.cast("float *", a.ctypes.data)


@pytest.mark.parametrize("act", range(6))      # relu, leaky_relu, elu, exp, sigmoid, tanh
@pytest.mark.parametrize("p, n", [(0.5, 100_003), (0.1, 17), (0.0, 50_000)])
def test_dropout_act_grad_equals_dropout_grad_then_act_grad(act, p, n):
    rng = np.random.default_rng(act * 10 + n)
    G = rng.standard_normal(n).astype(np.float32)
    Y = rng.standard_normal(n).astype(np.float32)
    dropped, unfused, fused = (np.full(n, np.nan, np.float32) for _ in range(3))
    key = (7, 3, 12)
    lib().t_dropout_grad(f32(G), f32(dropped), n, p, *key)
    lib().t_act_grad(act, 0.2, f32(dropped), f32(Y), n, f32(unfused))
    lib().t_dropout_act_grad(act, 0.2, f32(G), f32(Y), n, p, *key, f32(fused))
    np.testing.assert_array_equal(fused, unfused)
    if p > 0 and n > 1000:
        assert 0.4 < np.mean(dropped == 0) < 0.6            # the mask is really applied
