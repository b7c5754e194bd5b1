"""Timing script (not a test): SpMM bandwidth vs a STREAM-like triad, and the lookahead sweep.

    .venv/bin/python backends/openmp/kernels/bench_spmm.py [--nodes 100000] [--edges 2000000] [--threads 2]

Prints, for F = 32 and F = 128, the effective GB/s of the sum aggregation (bytes = CSR + one source
row per edge + one output row per node) for each compiled lookahead, next to the triad GB/s.
"""
from __future__ import annotations

import argparse

import numpy as np

from morphgen.calibrate import TRIAD_FLOATS, library


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--edges", type=int, default=2_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    ffi, lib = library()
    lib.mg_set_threads(args.threads)
    rng = np.random.default_rng(0)
    n, e = args.nodes, args.edges
    dst = np.sort(rng.integers(0, n, e))
    col = np.ascontiguousarray(rng.integers(0, n, e), dtype=np.int64)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    triad = lib.mg_stream_triad_gbs(TRIAD_FLOATS, args.reps)
    print(f"graph: {n} nodes, {e} edges, uniform random sources; threads={args.threads}")
    print(f"triad: {triad:.2f} GB/s")
    p = lambda a, t: ffi.cast(t, a.ctypes.data)  # noqa: E731
    for F in (32, 128):
        X = rng.standard_normal((n, F)).astype(np.float32)
        Y = np.empty_like(X)
        nbytes = lib.mg_spmm_bytes(n, e, F)
        for la in (0, 4, 8, 16, 32):
            t = lib.mg_spmm_seconds(la, n, p(indptr, "int64_t *"), p(col, "int64_t *"), p(X, "float *"), F,
                                    p(Y, "float *"), args.reps)
            print(f"F={F:4d} lookahead={la:2d}: {t * 1e3:8.2f} ms  {nbytes / t / 1e9:6.2f} GB/s "
                  f"({nbytes / t / 1e9 / triad * 100:5.1f}% of triad)")


if __name__ == "__main__":
    main()
