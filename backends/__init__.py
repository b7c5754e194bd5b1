"""The backend registry: every code generator morphgen knows, as one bundle each.

A backend is its emitter (IR -> sources), the compiler driver that builds them, and what it
can do, stated as data (`Capabilities`) so that the pipeline asks the backend instead of
knowing backends by name.  The command line (`--backend`, its help text), the Python API
(`morphgen.compile(..., backend=)`) and the error for an unknown or unavailable backend all
read this one table.
"""
from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path
from dataclasses import dataclass
from typing import Optional

from morphgen.errors import UserError


class BackendUnavailable(UserError):
    """The backend asked for does not exist, is not built yet, or its toolchain is missing."""


@dataclass(frozen=True)
class Capabilities:
    sparse_features: bool        # multiplies CSR input features by weights without densifying them
    hoist_invariants: bool       # computes aggregations of dense input features once, at load time
    featureless: bool            # takes the identity input (embedding lookups) of featureless data
    distributed: bool = False    # splits the graph over ranks with halo exchange
    device_memory: bool = False  # buffers live on an accelerator, not in host memory
    link_prediction: bool = False  # has the kernels of gnn.linkLoss (triple scoring)
    bases_per_lookup: bool = False  # reads featureless lookups of W_t = sum_b A[t,b] V_b from the bases
    edge_typed_linear: bool = False  # reads gathered node rows of typed linears in place (compact or per edge)


@dataclass(frozen=True)
class Backend:
    name: str
    summary: str
    capabilities: Capabilities
    compiler_env: str            # environment variable that overrides the compiler driver
    compiler_default: str
    emitter: Optional[str] = None     # "module:Class" of the emitter; None while not built
    toolchain: Optional[str] = None   # module with build() and missing() when not the host C++ build
    # "module:function" giving the feature path's Calibration (rho, tau) for a thread count: the
    # processor that multiplies the features is the one to measure
    calibration: str = "morphgen.calibrate:calibrate"

    @property
    def compiler(self) -> str:
        """The compiler driver: $compiler_env, else the one installed beside this Python (pip's
        `mpich` puts mpicxx in the environment's bin, which need not be on PATH), else PATH's."""
        if self.compiler_env in os.environ:
            return os.environ[self.compiler_env]
        beside = Path(sys.executable).parent / self.compiler_default
        return str(beside) if beside.is_file() else self.compiler_default

    @property
    def include_dir(self) -> Optional[str]:
        """This backend's own headers, when the generated source includes any."""
        folder = Path(__file__).parent / self.name
        return str(folder) if any(folder.glob("*.h")) else None

    def missing(self) -> Optional[str]:
        """What keeps this backend from building programs here (a short phrase), or None."""
        if self.emitter is None:
            return "not available yet in this version"
        if self.toolchain is not None:
            return importlib.import_module(self.toolchain).missing(self.compiler)
        if shutil.which(self.compiler) is None:
            return f"its compiler '{self.compiler}' is not on PATH (set ${self.compiler_env} to use another)"
        return None

    def unavailable_reason(self) -> Optional[str]:
        """Why this backend cannot build programs here, as a sentence, or None when it can."""
        missing = self.missing()
        return None if missing is None else f"the {self.name} backend: {missing}"

    def build(self, sources: dict, sanitize: bool = False) -> Path:
        """Compile the emitter's sources into a loadable library (cached): its path."""
        if self.toolchain is not None:
            return importlib.import_module(self.toolchain).build(sources, f"mg_{self.name}", self.compiler, sanitize)
        from morphgen.pipeline import include_dirs
        from morphgen.toolchain import compile_shared
        emitter = self.emitter_class()
        return compile_shared(sources, name=f"mg_{self.name}", sanitize=sanitize, include_dirs=include_dirs(self),
                              cxx=self.compiler, precompiled_header=emitter.ops_header,
                              prebuilt_units=emitter.ops_units)

    def feature_calibration(self, threads: Optional[int] = None):
        """The dense/sparse feature-path calibration of the processor this backend computes on."""
        module, function = self.calibration.split(":")
        return getattr(importlib.import_module(module), function)(threads)

    def emitter_class(self):
        module, cls = self.emitter.split(":")
        return getattr(importlib.import_module(module), cls)

    def check_program(self, program) -> None:
        """Refuse, with a user-facing error, a program this backend has no kernels for."""
        if program.task == "link" and not self.capabilities.link_prediction:
            raise UserError(f"morphgen: error: program '{program.name}' predicts links (gnn.linkLoss), which "
                            f"the {self.name} backend does not run yet; use --backend openmp")


REGISTRY = {
    "openmp": Backend(
        "openmp", "one multicore CPU: OpenMP, SIMD sparse kernels, BLAS",
        Capabilities(sparse_features=True, hoist_invariants=True, featureless=True, link_prediction=True,
                     bases_per_lookup=True, edge_typed_linear=True),
        "MORPHGEN_CXX", "g++", "morphgen.backends.openmp.emitter:OpenMPEmitter"),
    "cuda": Backend(
        "cuda", "one NVIDIA GPU: block-per-row SpMM, cuBLAS (MORPHGEN_CUDA_EMULATION=1: SIMT emulation on the CPU)",
        Capabilities(sparse_features=True, hoist_invariants=True, featureless=True, device_memory=True,
                     link_prediction=True, bases_per_lookup=True, edge_typed_linear=True),
        "MORPHGEN_NVCC", "nvcc", "morphgen.backends.cuda.emitter:CUDAEmitter", "morphgen.backends.cuda.toolchain",
        "morphgen.backends.cuda.calibrate:calibrate"),
    "mpi": Backend(
        "mpi", "a cluster of CPU nodes: partitioned graph, halo exchange",
        Capabilities(sparse_features=True, hoist_invariants=True, featureless=True, distributed=True,
                     link_prediction=True, bases_per_lookup=True, edge_typed_linear=True),
        "MORPHGEN_MPICXX", "mpicxx", "morphgen.backends.mpi.emitter:MPIEmitter"),
}


def names() -> tuple:
    return tuple(REGISTRY)


def one_process_names() -> tuple:
    """The backends that run in one process (what `morphgen predict` takes)."""
    return tuple(n for n, b in REGISTRY.items() if not b.capabilities.distributed)


def available_names() -> tuple:
    return tuple(n for n, b in REGISTRY.items() if b.unavailable_reason() is None)


def help_text(only: tuple = None) -> str:
    """One phrase per backend (those named in `only`, default all) for `--help`."""
    parts = []
    for b in (REGISTRY[n] for n in (only or names())):
        missing = b.missing()
        parts.append(f"{b.name} ({b.summary}{'' if missing is None else '; ' + missing})")
    return "; ".join(parts)


def require(name: str) -> Backend:
    """The backend called `name`, ready to build programs, or a BackendUnavailable that says why."""
    backend = REGISTRY.get(name)
    if backend is None:
        raise BackendUnavailable(f"morphgen: error: unknown backend {name!r}; backends: {', '.join(names())}")
    reason = backend.unavailable_reason()
    if reason is not None:
        ready = available_names()
        raise BackendUnavailable(f"morphgen: error: {reason}; available: {', '.join(ready) or 'none'}")
    return backend
