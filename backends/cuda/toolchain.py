"""How the CUDA backend builds a generated model.

On a machine with a GPU: nvcc, one fat binary for sm_80 (A100) and sm_90 (H100), linked with
cuBLAS from the `nvidia-cublas` wheel (the `cuda` extra).  The cache key holds nvcc's version and
the architectures (they are in the flags).

Without a GPU, MORPHGEN_CUDA_EMULATION=1 builds the same generated source with the host C++
compiler against simt.h, whose SIMT emulation runs every kernel on the CPU (device memory is host
memory).  The test suite uses it to run the CUDA kernels where no GPU exists.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional

from morphgen.errors import UserError

EMULATION_ENV = "MORPHGEN_CUDA_EMULATION"
ARCHITECTURES = ("80", "90")
# A build for one GPU only (e.g. MORPHGEN_CUDA_ARCHS=90): ptxas runs once instead of twice.
ARCHITECTURES_ENV = "MORPHGEN_CUDA_ARCHS"
# -Xptxas=-v: ptxas writes every kernel's registers, spills and shared memory into build.log,
# which `morphgen compile --emit report` reads (backends/cuda/report.py).
NVCC_BASE_FLAGS = ("-std=c++17", "-shared", "-Xcompiler", "-fPIC,-fopenmp,-march=native", "-lineinfo", "-Xptxas=-v")
# -O1: the emulation is for checking kernels, not for speed; -O3 takes 1.8x as long to build
# (6.5 s against 3.7 s for GAT) for an epoch 4x faster on tests' graphs of a few hundred nodes.
EMULATION_FLAGS = ("-DMORPHGEN_SIMT_EMULATION", "-O1")


def architectures() -> tuple:
    """The compute capabilities the fat binary holds: $MORPHGEN_CUDA_ARCHS (comma-separated, e.g.
    "90"), else sm_80 and sm_90."""
    value = os.environ.get(ARCHITECTURES_ENV, "").strip()
    if not value:
        return ARCHITECTURES
    archs = tuple(a.strip().removeprefix("sm_") for a in value.split(","))
    if not all(a.isdigit() and len(a) in (2, 3) for a in archs):
        raise UserError(f"morphgen: error: ${ARCHITECTURES_ENV}: expected compute capabilities such as "
                        f"'80,90', got {value!r}")
    return archs


def nvcc_flags() -> tuple:
    return NVCC_BASE_FLAGS + tuple(f"-gencode=arch=compute_{a},code=sm_{a}" for a in architectures())


DEVICE_ENV = "MORPHGEN_CUDA_DEVICE"


def device_index() -> Optional[int]:
    """The GPU the library opens ($MORPHGEN_CUDA_DEVICE, which `train --device` sets; default 0), or
    None under the emulation, which uses no GPU.  A value that is not a number is refused."""
    value = os.environ.get(DEVICE_ENV, "").strip() or "0"
    if not value.isdigit():
        raise UserError(f"morphgen: error: ${DEVICE_ENV} must be a GPU number, not {value!r}")
    return None if emulated() else int(value)


def emulated() -> bool:
    """Whether CUDA models are built for the SIMT emulation instead of a GPU."""
    return os.environ.get(EMULATION_ENV, "") not in ("", "0")


def _include_dir() -> Path:
    return Path(__file__).resolve().parent


def cublas_paths() -> Optional[tuple]:
    """(include dir, lib dir) of the pip `nvidia-cublas` wheel, or None when it is not installed."""
    try:
        import nvidia  # namespace package of NVIDIA's wheels
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for sub in ("cu13", "cublas"):
            base = Path(root) / sub
            if (base / "include" / "cublas_v2.h").is_file() and any((base / "lib").glob("libcublas.so*")):
                return base / "include", base / "lib"
    return None


def _cublas_link(lib: Path) -> list:
    names = sorted(p.name for p in lib.glob("libcublas.so*"))
    return [f"-L{lib}", f"-l:{names[0]}" if names[0] != "libcublas.so" else "-lcublas", "-Xlinker", f"-rpath,{lib}"]


def missing(nvcc: str) -> Optional[str]:
    """What keeps this machine from building CUDA models (a phrase), or None."""
    return None if emulated() else nvcc_missing(nvcc)


def nvcc_missing(nvcc: str) -> Optional[str]:
    """What keeps this machine from building with nvcc (a phrase), or None, emulation or not:
    the ptxas report needs the real build even where the tests run the emulation."""
    if shutil.which(nvcc) is None:
        return f"its compiler '{nvcc}' is not on PATH (set $MORPHGEN_NVCC to use another)"
    if cublas_paths() is None:
        return "cuBLAS is not installed (pip install 'morphgen[cuda]' installs nvidia-cublas)"
    return None


def build(sources: dict, name: str, nvcc: str, sanitize: bool = False, emulation: Optional[bool] = None) -> Path:
    """Compile the generated CUDA source into a loadable library (cached).  emulation: build for
    the SIMT emulation (True) or with nvcc (False); None, the default, follows $MORPHGEN_CUDA_EMULATION."""
    from morphgen.toolchain import compile_shared, runtime_include_dir
    dirs = [runtime_include_dir(), _include_dir()]
    if emulation is None:
        emulation = emulated()
    if emulation:
        host_sources = {(k[:-3] + ".cpp" if k.endswith(".cu") else k): v for k, v in sources.items()}
        return compile_shared(host_sources, name=f"{name}_simt", include_dirs=dirs, flags=EMULATION_FLAGS,
                              sanitize=sanitize, kernel_headers=False, precompiled_header="ops.cuh")
    if sanitize:
        raise UserError("morphgen: error: --sanitize builds host code with AddressSanitizer; for CUDA kernels "
                        "run the library under compute-sanitizer instead")
    paths = cublas_paths()
    if paths is None:
        raise UserError(f"morphgen: error: the cuda backend: {nvcc_missing(nvcc)}")
    include, lib = paths
    return compile_shared(sources, name=name, include_dirs=dirs + [include], cxx=nvcc, base_flags=nvcc_flags(),
                          link_flags=_cublas_link(lib), kernel_headers=False)
