"""The dense/sparse feature-path threshold of a GPU, measured on the GPU (calibrate.cu).

A CUDA model multiplies its input features on the GPU, so the threshold tau = 1 - rho must
compare the GPU's two paths, not the host CPU's: cuBLAS on dense features against the CSR
kernels on sparse ones, over one layer's feature work (X W and X^T G), at the density where the
two take equal time (the method of morphgen.calibrate).  Measured once per GPU model, nvcc and
kernel sources, in a few seconds, and kept in the same cache file as the CPU's entries.

Where no GPU can measure it (the SIMT emulation, which runs the kernels on the CPU, or a
machine without a GPU that only builds CUDA models) the host CPU's calibration stands in, and
its source says so.  `MORPHGEN_TAU` overrides both.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from dataclasses import asdict, replace
from pathlib import Path

from morphgen import calibrate as cpu
from morphgen.calibrate import Calibration, CalibrationError

from . import toolchain

CDEF = """
int mgc_sparse_dense_crossover(int64_t rows, int64_t K, int64_t F, int reps, double* density,
                               double* sparse_gflops, double* dense_gflops, char* err, int err_len);
int mgc_device_name(char* name, int len);
"""

# One layer's feature work at the hidden width of the benchmark models: large enough that cuBLAS
# runs at full speed (17 GFLOP on the dense path, about a millisecond on an H100), small enough
# that the sweep over densities, host-side generation included, takes a few seconds.
BENCH_ROWS, BENCH_K, BENCH_F, BENCH_REPS = 32768, 2048, 64, 5
GRID_FLOOR = 0.001                   # calibrate.cu's lowest density
METHOD = "cuda-v1-layer-crossover"   # part of the cache key: a new method invalidates old entries
SOURCES = ("calibrate.cu", "ops.cuh", "kernels/dense.cuh", "kernels/sparse_features.cuh")


def calibrate(threads: int | None = None, force: bool = False) -> Calibration:
    """rho/tau of the GPU a CUDA model runs on: cached, else measured; the host CPU's where no GPU
    can measure it (`threads` is the CPU calibration's)."""
    if os.environ.get("MORPHGEN_TAU") is not None:
        return cpu.calibrate(threads)
    if toolchain.emulated():
        return _cpu_stand_in(threads, "the CUDA emulation runs the kernels on this CPU")
    if not gpu_present():
        return _cpu_stand_in(threads, "no GPU here to measure the GPU's")
    try:
        return _gpu_calibration(force)
    except CalibrationError as err:      # training goes on; the feature path's reason says why
        return _cpu_stand_in(threads, str(err))


def _gpu_calibration(force: bool) -> Calibration:
    ffi, lib = library()
    name = device_name(ffi, lib)
    key = f"cuda|{name}|{METHOD}|{_sources_digest()}|{_nvcc_identity()}"
    path = cpu._cache_file()
    table = cpu._read_table(path)
    if not force and key in table:
        return Calibration(**dict(table[key], source=f"{name}, cache"))
    rho, sparse, dense = cpu.median_crossover(lambda: _crossover(ffi, lib), floor=GRID_FLOOR)
    result = Calibration(rho=rho, tau=1.0 - rho, sparse_gflops=sparse, dense_gflops=dense,
                         triad_gbs=float("nan"), threads=0, source=f"{name}, measured")
    prefix = f"cuda|{name}|"        # this GPU's entries of older methods or kernels: never read again
    table = {k: v for k, v in table.items() if not k.startswith(prefix)}
    table[key] = {k: v for k, v in asdict(result).items() if k != "source"}
    cpu._write_table(path, table)
    return result


def _cpu_stand_in(threads, why: str) -> Calibration:
    cal = cpu.calibrate(threads)
    return replace(cal, source=f"{cal.source}, the host CPU's: {why}")


@functools.lru_cache(maxsize=None)
def gpu_present() -> bool:
    """Whether nvidia-smi lists a GPU: without one, building the calibration would be wasted.
    Asked once per process: a build asks for the calibration once or twice, `train` once more."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def no_gpu_here() -> bool:
    """Certainly no GPU: no device node and nvidia-smi lists none (a container may lack either
    one alone and still have a GPU, so both are asked)."""
    return not any(Path("/dev").glob("nvidia[0-9]*")) and not gpu_present()


@functools.lru_cache(maxsize=None)
def library():
    """The cffi handle of calibrate.cu, built for the GPU (or, under the emulation, the CPU)."""
    import cffi

    from morphgen.backends import REGISTRY
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    src = (Path(__file__).parent / "calibrate.cu").read_text()
    path = toolchain.build({"calibrate.cu": src}, "mg_cuda_calibrate", REGISTRY["cuda"].compiler)
    return ffi, ffi.dlopen(str(path))


def device_name(ffi, lib) -> str:
    buf = ffi.new("char[256]")
    status = lib.mgc_device_name(buf, 256)
    text = ffi.string(buf).decode(errors="replace")
    if status != 0:
        raise CalibrationError(f"the GPU calibration found no GPU: {text}")
    return text


def crossover(ffi, lib, rows: int, K: int, F: int, reps: int) -> tuple:
    """(rho, sparse GFLOP/s, dense GFLOP/s) of one run of calibrate.cu's sweep on this shape."""
    out, err = ffi.new("double[3]"), ffi.new("char[512]")
    if lib.mgc_sparse_dense_crossover(rows, K, F, reps, out + 0, out + 1, out + 2, err, 512) != 0:
        raise CalibrationError(f"the GPU calibration failed: {ffi.string(err).decode(errors='replace')}")
    rho, sparse, dense = float(out[0]), float(out[1]), float(out[2])
    if not (0.0 < rho <= 1.0) or not (dense > 0.0):
        raise CalibrationError(f"the GPU calibration produced rho={rho}, dense={dense} GFLOP/s")
    return rho, sparse, dense


def _crossover(ffi, lib) -> tuple:
    return crossover(ffi, lib, BENCH_ROWS, BENCH_K, BENCH_F, BENCH_REPS)


def _sources_digest() -> str:
    """The sources the calibration times: a rho measured on other kernels is stale."""
    digest = hashlib.sha256()
    root = Path(__file__).parent
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes())
    return digest.hexdigest()[:12]


@functools.lru_cache(maxsize=None)
def _nvcc_identity() -> str:
    from morphgen.backends import REGISTRY
    from morphgen.toolchain import _compiler_identity
    version = _compiler_identity(REGISTRY["cuda"].compiler).splitlines()
    return (version[-1] if version else "nvcc") + "|" + ",".join(toolchain.architectures())
