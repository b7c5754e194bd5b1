"""Measure this machine's limits: memory bandwidth (STREAM copy and triad) and sgemm GFLOP/s.

These are the roofline ceilings a benchmark report puts next to epoch times: a sparse aggregation
can go no faster than the bytes it must move at `triad_gbs`, a dense layer no faster than
`sgemm_gflops`. The kernels are the C++ in machine_limits.cpp, built by morphgen.toolchain and
loaded with cffi; sgemm is scipy-openblas32's, the BLAS the generated code links against.

Conventions (McCalpin's STREAM): double arrays, each much larger than the last-level cache
(4x, at least 128 MiB); bytes counted are those the kernel names (copy: 16 B per element, triad:
24 B; write-allocate traffic not counted); the best of `reps` repetitions after one untimed pass.
GEMM: 2*m*n*k flops, best of `reps`.

    python -m morphgen.bench.machine [--threads T]
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Optional

import numpy as np

from morphgen.errors import UserError
from morphgen.resources import usable_cores

_SOURCE = Path(__file__).with_name("machine_limits.cpp")

_CDEF = """
void mg_fill(double* a, int64_t n, double value, int threads);
void mg_copy(double* dst, const double* src, int64_t n, int threads);
void mg_triad(double* a, const double* b, const double* c, double scalar, int64_t n, int threads);
void mg_time_copy(double* dst, const double* src, int64_t n, int threads, int reps, double* times);
void mg_time_triad(double* a, const double* b, const double* c, double scalar, int64_t n,
                   int threads, int reps, double* times);
void mg_time_sgemm(int m, int n, int k, const float* A, const float* B, float* C, int threads,
                   int reps, double* times);
"""

MIN_STREAM_BYTES = 128 << 20


class MachineError(UserError, ValueError):
    """Bad arguments to a machine measurement; the message names the argument."""


@functools.lru_cache(maxsize=1)
def load_kernels():
    """(ffi, lib) of the compiled machine_limits.cpp (built once, cached by the toolchain)."""
    import cffi

    from morphgen.toolchain import compile_shared

    so = compile_shared({"machine_limits.cpp": _SOURCE.read_text()}, name="machine_limits")
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    return ffi, ffi.dlopen(str(so))


def _check_threads(threads: int) -> int:
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise MachineError(f"threads: must be a positive integer, got {threads!r}")
    return threads


def _check_reps(reps: int) -> int:
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise MachineError(f"reps: must be a positive integer, got {reps!r}")
    return reps


def last_level_cache_bytes() -> Optional[int]:
    """Size of the largest CPU cache listed in sysfs, or None when it cannot be read."""
    best = None
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in sorted(base.glob("index*")) if base.is_dir() else []:
        try:
            text = (idx / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text[:-1] if text[-1:] in "KMG" else text
        if digits.isdigit():
            best = max(best or 0, int(digits) * mult)
    return best


def default_stream_elements() -> int:
    """Elements per array: 4x the last-level cache, at least MIN_STREAM_BYTES (STREAM's rule)."""
    llc = last_level_cache_bytes() or 0
    return max(4 * llc, MIN_STREAM_BYTES) // 8


def stream_bandwidth(threads: int, n: Optional[int] = None, reps: int = 10) -> dict:
    """STREAM copy and triad bandwidth in GB/s (1e9 bytes/s), best of `reps`."""
    _check_threads(threads)
    _check_reps(reps)
    n = default_stream_elements() if n is None else n
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise MachineError(f"n: must be a positive integer, got {n!r}")
    ffi, lib = load_kernels()
    a, b, c = (np.empty(n, dtype=np.float64) for _ in range(3))
    pa, pb, pc = (ffi.cast("double *", ffi.from_buffer(v)) for v in (a, b, c))
    for p, v in ((pa, 1.0), (pb, 2.0), (pc, 0.5)):
        lib.mg_fill(p, n, v, threads)
    times = np.empty(reps, dtype=np.float64)
    pt = ffi.cast("double *", ffi.from_buffer(times))
    lib.mg_copy(pa, pb, n, threads)                        # untimed pass: faults, frequency ramp
    lib.mg_time_copy(pa, pb, n, threads, reps, pt)
    copy_s = float(times.min())
    lib.mg_triad(pa, pb, pc, 3.0, n, threads)
    lib.mg_time_triad(pa, pb, pc, 3.0, n, threads, reps, pt)
    triad_s = float(times.min())
    return {"copy_gbs": 16.0 * n / copy_s / 1e9, "triad_gbs": 24.0 * n / triad_s / 1e9,
            "stream_elements": n, "stream_array_bytes": 8 * n}


def sgemm_gflops(threads: int, size: int = 2048, reps: int = 5) -> float:
    """Single-precision GEMM rate (size x size x size) through scipy-openblas32, best of `reps`."""
    _check_threads(threads)
    _check_reps(reps)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise MachineError(f"size: must be a positive integer, got {size!r}")
    ffi, lib = load_kernels()
    rng = np.random.default_rng(0)
    A = rng.standard_normal((size, size), dtype=np.float32)
    B = rng.standard_normal((size, size), dtype=np.float32)
    C = np.empty((size, size), dtype=np.float32)
    times = np.empty(reps + 1, dtype=np.float64)
    f = lambda arr, t: ffi.cast(t, ffi.from_buffer(arr))   # noqa: E731
    lib.mg_time_sgemm(size, size, size, f(A, "float *"), f(B, "float *"), f(C, "float *"), threads,
                      reps + 1, f(times, "double *"))
    return 2.0 * size ** 3 / float(times[1:].min()) / 1e9   # first run warms the BLAS thread pool


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _kernel_isa() -> str:
    from morphgen.calibrate import kernel_isa
    try:
        return kernel_isa()
    except Exception as exc:   # noqa: BLE001 -- a report without the ISA beats no report
        return f"unknown ({exc})"


def describe_cpu() -> str:
    """The CPU model and the kernels' ISA, e.g. 'AMD EPYC, avx512 kernels'."""
    return f"{cpu_model()}, {_kernel_isa()} kernels"


def measure_machine(threads: Optional[int] = None, stream_elements: Optional[int] = None,
                    gemm_size: int = 2048, reps: int = 10) -> dict:
    """All limits with `threads` threads (default: every usable core)."""
    threads = usable_cores() if threads is None else _check_threads(threads)
    stream = stream_bandwidth(threads, stream_elements, reps)
    return {
        "copy_gbs": stream["copy_gbs"], "triad_gbs": stream["triad_gbs"],
        "sgemm_gflops": sgemm_gflops(threads, gemm_size, max(1, reps // 2)),
        "threads": threads, "cpu_model": cpu_model(), "kernel_isa": _kernel_isa(), "cores": usable_cores(),
        "stream_array_bytes": stream["stream_array_bytes"], "gemm_size": gemm_size,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m morphgen.bench.machine", description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--gemm-size", type=int, default=2048)
    args = ap.parse_args(argv)
    try:
        print(json.dumps(measure_machine(args.threads, gemm_size=args.gemm_size), indent=2))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:            # toolchain.BuildError: the kernels did not build
        print(f"error: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
