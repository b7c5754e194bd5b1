"""Measure this machine's sparse/dense efficiency ratio rho (and the triad bandwidth), cached.

The OpenMP backend picks the sparse input-feature path when the feature sparsity s exceeds
tau = 1 - rho, where rho = (FLOP/s of the sparse path) / (FLOP/s of the dense path). Both are
measured on a whole layer's feature work (X W and X^T G, the product's own kernels) at the density
where the two paths take equal time, so rho is that crossover density and tau predicts the
crossover directly (backends/openmp/kernels/calibrate.h). It is measured once per machine and
thread count, in a few seconds (the median of several runs, see CROSSOVER_RUNS), and kept as JSON
in the morphgen cache directory.
`MORPHGEN_TAU` overrides the threshold without measuring.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from .toolchain import _cpu_identity, cache_root, compile_shared, isa_flags, kernel_include_dir

CDEF = """
double mg_stream_triad_gbs(int64_t n, int reps);
int mg_sparse_dense_crossover(int64_t rows, int64_t K, int64_t F, int reps, double* density,
                              double* sparse_gflops, double* dense_gflops);
double mg_spmm_seconds(int la, int64_t n, const int64_t* indptr, const int64_t* col,
                       const float* X, int64_t F, float* Y, int reps);
double mg_spmm_bytes(int64_t n, int64_t e, int64_t F);
void mg_set_threads(int n);
int mg_max_threads(void);
const char* mg_simd_isa(void);
"""

# Microbenchmark shape: a bag-of-words-like feature matrix (rows x K) through a K x F weight at the
# hidden width of the benchmark models, large enough that sgemm runs at full speed, small enough
# that the whole density sweep (11 densities, forward + weight gradient each) stays near a second.
BENCH_ROWS, BENCH_K, BENCH_F, BENCH_REPS = 4096, 2048, 32, 3
METHOD = "v3-layer-crossover-spmm"   # part of the cache key: a new method invalidates old entries
# The aggregation's speed (what hoisting saves the dense path): one SpMM, 32 columns, over a
# random graph whose rows do not fit in the last-level cache.
SPMM_NODES, SPMM_EDGES, SPMM_COLUMNS = 1 << 17, 1 << 21, 32
TRIAD_FLOATS, TRIAD_REPS = 1 << 24, 5  # 3 x 64 MiB: far beyond the last-level cache


class CalibrationError(RuntimeError):
    """The calibration could not run or produced an unusable value."""


@dataclass(frozen=True)
class Calibration:
    rho: float
    tau: float
    sparse_gflops: float
    dense_gflops: float
    triad_gbs: float
    threads: int
    source: str  # "measured", "cache" or "override"
    spmm_gbs: float = float("nan")   # the aggregation kernel, bytes as spmm_bytes counts them


def kernel_isa() -> str:
    """The vector ISA this machine's kernel builds use: "avx512", "avx2" or "portable"."""
    ffi, lib = library()
    return ffi.string(lib.mg_simd_isa()).decode()


@functools.lru_cache(maxsize=None)
def library():
    """The cffi handle of the calibration kernels (built once, cached on disk)."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    src = (kernel_include_dir() / "calibrate_capi.cpp").read_text()
    path = compile_shared({"calibrate_capi.cpp": src}, name="mg_calibrate")
    return ffi, ffi.dlopen(str(path))


def _cache_file() -> Path:
    return cache_root() / "calibration.json"


def _kernels_digest() -> str:
    """The kernel sources the calibration times: a cached rho measured on other kernels is stale."""
    digest = hashlib.sha256()
    for header in sorted(kernel_include_dir().glob("*.h")):
        digest.update(header.name.encode() + b"\0" + header.read_bytes())
    return digest.hexdigest()[:12]


def _machine_prefix(threads: int) -> str:
    # The kernels' ISA ($MORPHGEN_ISA) is part of it: an AVX2 build's crossover is its own.
    isa = "".join(isa_flags())
    return f"{hashlib.sha256((_cpu_identity() + isa).encode()).hexdigest()[:16]}-t{threads}-"


def _machine_key(threads: int) -> str:
    return f"{_machine_prefix(threads)}{METHOD}-k{_kernels_digest()}"


# The crossover is measured at least CROSSOVER_RUNS times and the median kept: a run that other
# work on the machine disturbed (its sparse timings slowed, or its dense one not) lands far from
# the others. A crossover at the grid's lowest density (sparse never faster, even with 0.2% of
# the values) is a disturbed run, never a machine's property: up to CROSSOVER_MAX_RUNS runs are
# made to find CROSSOVER_RUNS above it. (Measured on a 2-core machine while both cores ran other
# work: rho 0.002, tau 0.998, which sent a 97%-sparse dataset down the dense path, 3x slower.)
# The same holds at the other end: a crossover above CREDIBLE_CEILING (the sparse kernel faster
# even where three values in four are nonzero) means the dense timing was slowed, as when a
# 1-thread run shared its core: rho 0.92 at 5.5 dense GFLOP/s, against 0.44 at 72 measured alone.
CROSSOVER_RUNS, CROSSOVER_MAX_RUNS = 3, 7
GRID_FLOOR = 0.002                   # calibrate.h's lowest density
CREDIBLE_CEILING = 0.75


def _crossover(ffi, lib) -> tuple:
    """(rho, sparse GFLOP/s, dense GFLOP/s) of one run of the crossover kernel."""
    out = ffi.new("double[3]")
    st = lib.mg_sparse_dense_crossover(BENCH_ROWS, BENCH_K, BENCH_F, BENCH_REPS, out + 0, out + 1, out + 2)
    if st != 0:
        raise CalibrationError(f"calibration kernel failed (status {st})")
    rho, sparse, dense = float(out[0]), float(out[1]), float(out[2])
    if not (0.0 < rho <= 1.0) or not (dense > 0.0):
        raise CalibrationError(f"calibration produced rho={rho}, dense={dense} GFLOP/s")
    return rho, sparse, dense


def median_crossover(run, floor: float = GRID_FLOOR, ceiling: float = CREDIBLE_CEILING) -> tuple:
    """The median (by rho) of CROSSOVER_RUNS runs of `run()` above the grid floor, or of every
    run made when fewer than that cleared it within CROSSOVER_MAX_RUNS; of those, the runs at or
    below the credible ceiling when there are any (no run is made again for the ceiling: on a
    machine busy throughout every run lands above it, and `morphgen calibrate` measures again)."""
    runs = []
    while len(runs) < CROSSOVER_MAX_RUNS:
        runs.append(run())
        above_floor = [r for r in runs if r[0] > floor * (1 + 1e-9)]
        if len(above_floor) >= CROSSOVER_RUNS:
            runs = above_floor
            break
    credible = [r for r in runs if r[0] <= ceiling]
    runs = sorted(credible or runs, key=lambda r: r[0])
    return runs[len(runs) // 2]


def measure(threads: int | None = None) -> Calibration:
    """Run the microbenchmarks now (no cache)."""
    ffi, lib = library()
    if threads is not None:
        lib.mg_set_threads(int(threads))
    nthreads = int(lib.mg_max_threads())
    rho, sparse, dense = median_crossover(lambda: _crossover(ffi, lib))
    triad = float(lib.mg_stream_triad_gbs(TRIAD_FLOATS, TRIAD_REPS))
    return Calibration(rho=rho, tau=1.0 - rho, sparse_gflops=sparse, dense_gflops=dense,
                       triad_gbs=triad, threads=nthreads, source="measured", spmm_gbs=_spmm_gbs(ffi, lib))


def _spmm_gbs(ffi, lib) -> float:
    import numpy as np
    rng = np.random.default_rng(0)
    n, e, f = SPMM_NODES, SPMM_EDGES, SPMM_COLUMNS
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rng.integers(0, n, e), minlength=n), out=indptr[1:])
    col = rng.integers(0, n, e).astype(np.int64)
    x = rng.standard_normal((n, f)).astype(np.float32)
    y = np.empty_like(x)
    ptr = lambda a, t: ffi.cast(t, a.ctypes.data)  # noqa: E731
    seconds = lib.mg_spmm_seconds(8, n, ptr(indptr, "int64_t *"), ptr(col, "int64_t *"), ptr(x, "float *"), f,
                                  ptr(y, "float *"), 3)
    if not seconds > 0:
        raise CalibrationError(f"the SpMM calibration kernel failed (returned {seconds})")
    return float(lib.mg_spmm_bytes(n, e, f)) / seconds / 1e9


def calibrate(threads: int | None = None, force: bool = False) -> Calibration:
    """rho/tau for this machine and thread count: from the cache, else measured and stored.

    MORPHGEN_TAU (a number in [0, 1]) overrides tau (and rho = 1 - tau) without measuring.
    """
    override = os.environ.get("MORPHGEN_TAU")
    if override is not None:
        try:
            tau = float(override)
        except ValueError:
            raise CalibrationError(f"MORPHGEN_TAU={override!r} is not a number") from None
        if not 0.0 <= tau <= 1.0:
            raise CalibrationError(f"MORPHGEN_TAU={override!r} must lie in [0, 1]")
        return Calibration(rho=1.0 - tau, tau=tau, sparse_gflops=float("nan"), dense_gflops=float("nan"),
                           triad_gbs=float("nan"), threads=threads or 0, source="override")
    _, lib = library()
    if threads is not None:
        lib.mg_set_threads(int(threads))
    key = _machine_key(int(lib.mg_max_threads()))
    path = _cache_file()
    table = _read_table(path)
    if not force and key in table:
        entry = dict(table[key])
        entry["source"] = "cache"
        return Calibration(**entry)
    result = measure(threads)
    # entries of this CPU and thread count from older methods or kernels can never be read again
    prefix = _machine_prefix(int(lib.mg_max_threads()))
    table = {k: v for k, v in table.items() if not k.startswith(prefix)}
    table[key] = {k: v for k, v in asdict(result).items() if k != "source"}
    _write_table(path, table)
    return result


def _read_table(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_table(path: Path, table: dict) -> None:
    # Atomic replace: concurrent calibrations never leave a torn JSON file behind.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".calibration-", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(table, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)


def use_sparse_features(sparsity: float, tau: float | None = None) -> bool:
    """True when a feature matrix with this fraction of zeros should take the sparse path."""
    if not 0.0 <= sparsity <= 1.0:
        raise CalibrationError(f"feature sparsity {sparsity} must lie in [0, 1]")
    return sparsity > (calibrate().tau if tau is None else tau)
