"""`morphgen doctor`: what this machine can build and run, and why not.

A diagnosis, so it never fails: every probe that cannot run says so in its line, and the exit
status is 0.  Each line is for a person reading a bug report, not for a script.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from . import __version__
from .resources import usable_cores
from .toolchain import cpu_flags


def _run(cmd, timeout=20):
    """(exit status, stdout + stderr) of `cmd`, or (None, why) when it cannot be run."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as err:
        return None, str(err)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def _version_line(text: str) -> str:
    """The line of `--version` output that names the version: nvcc's 'release' line, MPICH
    mpiexec's 'Version:' field (its first line is a heading), else the first line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "release" in ln:
            return ln
        if ln.lower().startswith("version:"):
            return "version " + ln.split(":", 1)[1].strip()
    return lines[0] if lines else "no version output"


def _cpu() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    first = {}                        # the first CPU's fields (every CPU repeats them)
    for ln in text.splitlines():
        key, _, value = ln.partition(":")
        first.setdefault(key.strip(), value.strip())
    model = first.get("model name") or platform.processor() or platform.machine()
    flags = cpu_flags()
    if not flags:
        simd = "SIMD unknown (no flags in /proc/cpuinfo)"
    elif "avx512f" in flags:
        simd = "AVX-512: yes (" + " ".join(sorted(f for f in flags if f.startswith("avx512"))) + ")"
    elif "avx2" in flags:
        simd = "AVX-512: no, AVX2 only"
    else:
        simd = "AVX-512: no, AVX2: no"
    return f"{model}; {os.cpu_count()} cores ({usable_cores()} usable by this process); {simd}"


def _gpu() -> tuple:
    """(whether a GPU is usable, what to say about it)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False, "none found (no nvidia-smi on PATH)"
    code, out = _run([smi, "-L"])
    if code == 0 and out:
        return True, "; ".join(out.splitlines())
    return False, f"none usable (nvidia-smi -L: {out.splitlines()[0] if out else f'exit {code}'})"


def _compilers(registry) -> list:
    """One line per backend's compiler driver (the one it would use: $MORPHGEN_CXX etc. honoured)."""
    lines, seen = [], set()
    for backend in registry.values():
        if backend.compiler in seen:
            continue
        seen.add(backend.compiler)
        path = shutil.which(backend.compiler)
        if path is None:
            lines.append(f"{backend.compiler_default:<8} not found ('{backend.compiler}'; ${backend.compiler_env} "
                         f"overrides it)")
            continue
        code, out = _run([path, "--version"])
        version = _version_line(out) if code == 0 else f"--version failed: {out.splitlines()[0] if out else code}"
        lines.append(f"{backend.compiler_default:<8} {path}: {version}")
    return lines


def _cublas() -> str:
    from .backends.cuda.toolchain import cublas_paths
    paths = cublas_paths()
    if paths is None:
        return "not installed (pip install 'morphgen[cuda]' installs nvidia-cublas)"
    from importlib.metadata import PackageNotFoundError, version
    try:
        wheel = f"nvidia-cublas {version('nvidia-cublas')}"
    except PackageNotFoundError:
        wheel = "an NVIDIA wheel"
    return f"{wheel} ({paths[1]})"


def _mpiexec() -> str:
    from .backends.mpi.launch import mpiexec
    from .errors import UserError
    try:
        path = mpiexec()
    except UserError as err:
        return str(err).removeprefix("morphgen: error: ")
    code, out = _run([path, "--version"])
    return f"{path}" + (f": {_version_line(out)}" if code == 0 and out else "")


def _probe(fn, *args):
    """fn(*args), or a line saying it failed: one broken probe must not hide the others."""
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001 - a diagnosis reports every failure and goes on
        return f"could not tell ({type(err).__name__}: {err})"


def run(args=None) -> int:
    from . import backends
    from .backends.cuda.toolchain import EMULATION_ENV, emulated
    gpu, gpu_text = _gpu()
    print(f"morphgen {__version__} (Python {platform.python_version()}, {sys.executable})")
    print("backends:")
    for backend in backends.REGISTRY.values():
        missing = _probe(backend.missing)
        if missing is not None:
            state = f"not available: {missing}"
        elif backend.capabilities.device_memory and emulated():
            state = f"available, emulated on the CPU (${EMULATION_ENV} is set)"
        elif backend.capabilities.device_memory and not gpu:
            state = f"builds, but no GPU here to run on (${EMULATION_ENV}=1 runs its kernels on the CPU)"
        else:
            state = "available"
        print(f"  {backend.name:<8} {state}")
    print(f"cpu:      {_probe(_cpu)}")
    print("compilers:")
    for line in _compilers(backends.REGISTRY):
        print(f"  {line}")
    print(f"gpu:      {gpu_text}" + ("" if gpu else f"; {EMULATION_ENV}=1 runs the CUDA kernels on the CPU"))
    print(f"cublas:   {_probe(_cublas)}")
    print(f"mpiexec:  {_probe(_mpiexec)}")
    print(f"cache:    {_probe(_cache)}")
    return 0


def _cache() -> str:
    """Where the build cache is, what it holds and its limit (`morphgen cache` has the details)."""
    from .build_cache import held_bytes, human_bytes, max_bytes
    from .errors import UserError
    from .toolchain import cache_root
    root = cache_root()
    held = held_bytes(root)
    try:
        limit = max_bytes()
    except UserError as err:            # a bad $MORPHGEN_CACHE_MAX_GB: doctor says so, still exits 0
        return f"{root}, {human_bytes(held)}; {err}"
    return f"{root}, {human_bytes(held)} of {human_bytes(limit) if limit is not None else 'no limit'}"
