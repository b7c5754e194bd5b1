"""`morphgen compile --emit report`: every kernel's registers, spills and shared memory as ptxas
reports them, with an occupancy estimate per architecture.

nvcc runs with -Xptxas=-v (toolchain.NVCC_BASE_FLAGS), so the build.log beside every cached library
holds, per kernel and architecture:

    ptxas info    : Compiling entry function '_ZN2mg4cuda16aggregate_kernelILi1EEEv...' for 'sm_80'
    ptxas info    : Function properties for _ZN2mg4cuda16aggregate_kernelILi1EEEv...
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 40 registers, used 1 barriers, 64 bytes smem, 416 bytes cmem[0]

ptxas does not print a kernel's block size, so it is read from the kernel's __launch_bounds__ in
the sources (256 threads, the launch helper's kThreads, is assumed where there is none).
"""
from __future__ import annotations

import math
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from morphgen.errors import InternalError, UserError

from . import toolchain

# Per-SM limits of the architectures we build for (CUDA C Programming Guide, "Compute
# Capabilities"): sm_80 (A100) and sm_90 (H100) share all but the shared memory.
SMEM_PER_SM = {"sm_80": 164 * 1024, "sm_90": 228 * 1024}   # usable by blocks
SMEM_RESERVED_PER_BLOCK = 1024                             # the system's share of every block
REGISTERS_PER_SM = 65536
REGISTER_UNIT = 256          # registers are allocated per warp, rounded up to this many
THREADS_PER_SM = 2048
BLOCKS_PER_SM = 32
WARPS_PER_SM = THREADS_PER_SM // 32
ASSUMED_BLOCK = 256          # device.cuh kThreads: the block of every kernel launched through launch()


@dataclass
class KernelUsage:
    mangled: str
    arch: str                # "sm_80"
    registers: int = 0
    smem: int = 0            # static shared memory per block, bytes
    stack: int = 0
    spill_stores: int = 0    # bytes
    spill_loads: int = 0


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_log(text: str) -> list:
    """The KernelUsage of every entry function ptxas compiled, in the log's order."""
    kernels, current, properties_of = [], None, None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current, properties_of = KernelUsage(m[1], m[2]), None
            kernels.append(current)
        elif "Compiling " in line:
            current = None           # a non-entry function (separate compilation): not a kernel
        elif m := _PROPERTIES.search(line):
            properties_of = m[1]     # a callee's stack frame can follow; keep only the kernel's own
        elif (m := _FRAME.search(line)) and current is not None and properties_of == current.mangled:
            current.stack, current.spill_stores, current.spill_loads = map(int, m.groups())
        elif (m := _USED.search(line)) and current is not None:
            current.registers = int(m[1])
            smem = _SMEM.search(line)
            current.smem = int(smem[1]) if smem else 0
    return kernels


def demangle(names: Iterable[str]) -> dict:
    """mangled -> demangled with c++filt; a name stays mangled when c++filt is not there."""
    names = list(dict.fromkeys(names))
    tool = shutil.which("c++filt")
    if tool and names:
        try:
            proc = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=60)
            out = proc.stdout.splitlines()
            if proc.returncode == 0 and len(out) == len(names):
                return dict(zip(names, out))
        except (OSError, subprocess.SubprocessError):
            pass
    return {n: n for n in names}


def short_name(demangled: str) -> str:
    """`void mg::cuda::map_kernel<mg::cuda::AdamOp>(long, mg::cuda::AdamOp)` -> `map_kernel<AdamOp>`:
    the parameter list, the return type and the namespaces say nothing the table needs."""
    name = demangled
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    return re.sub(r"\b[A-Za-z_]\w*::", "", name)


# `template <int TILE> __global__ void __launch_bounds__(TILE * TILE) name(` (the template optional)
_BOUNDS = re.compile(r"(?:template\s*<([^<>]*)>\s*)?__global__\s+(?:void\s+)?__launch_bounds__\s*\(([^()]*)\)"
                     r"\s*(?:void\s+)?(\w+)\s*\(")
_CONSTANT = re.compile(r"constexpr\s+(?:int|unsigned|int64_t|size_t)\s+(\w+)\s*=\s*(\d+)\s*;")


class LaunchBounds:
    """The __launch_bounds__ of every kernel in some sources: the block size of an instantiation."""

    def __init__(self, texts: Iterable[str]):
        self.bounds, self.constants = {}, {}
        for text in texts:
            self.constants.update((k, v) for k, v in _CONSTANT.findall(text))
            for params, expr, name in _BOUNDS.findall(text):
                names = [p.split()[-1] for p in params.split(",") if p.split()]
                self.bounds[name] = (names, expr.split(",")[0])   # (max threads, min blocks)

    def block_size(self, kernel: str) -> Optional[int]:
        """Threads per block of `kernel` (a short name, template arguments included), or None."""
        base, _, args = kernel.partition("<")
        if base not in self.bounds:
            return None
        params, expr = self.bounds[base]
        values = dict(self.constants)
        values.update(zip(params, (a.strip() for a in args.rstrip(">").split(","))))
        expr = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: values.get(m[0], m[0]), expr)
        if not re.fullmatch(r"[\d\s*+()-]+", expr):
            return None              # a name we could not resolve: the caller assumes ASSUMED_BLOCK
        return int(eval(expr, {"__builtins__": {}}))   # digits and arithmetic only (checked above)


def occupancy(registers: int, smem: int, block: int, arch: str) -> Optional[tuple]:
    """(active warps / 64, what limits the resident blocks) on one SM, or None for an
    architecture whose limits this table does not know."""
    smem_per_sm = SMEM_PER_SM.get(arch.rstrip("a"))   # sm_90a has sm_90's limits
    if smem_per_sm is None or block <= 0:
        return None
    warps = math.ceil(block / 32)
    limits = {"threads": WARPS_PER_SM // warps, "blocks": BLOCKS_PER_SM}
    if registers:
        per_warp = math.ceil(registers * 32 / REGISTER_UNIT) * REGISTER_UNIT
        limits["registers"] = (REGISTERS_PER_SM // per_warp) // warps
    limits["shared memory"] = smem_per_sm // (smem + SMEM_RESERVED_PER_BLOCK)
    limiter = min(limits, key=limits.get)             # ties go to threads: the full-occupancy case
    return limits[limiter] * warps / WARPS_PER_SM, limiter


def render(kernels: list, bounds: LaunchBounds) -> str:
    """The table, one row per (kernel, architecture), and a summary line."""
    names = demangle(k.mangled for k in kernels)
    short = {m: short_name(d) for m, d in names.items()}
    if len(set(short.values())) < len(short):          # overloads: keep the parameter lists
        short = {m: re.sub(r"\b[A-Za-z_]\w*::", "", d.removeprefix("void ")) for m, d in names.items()}
    width = max([len("kernel")] + [len(s) for s in short.values()])
    lines = [f"{'kernel':<{width}}  {'arch':<6}{'regs':>5}  {'spill st/ld B':>13}  {'smem B':>7}  "
             f"{'block':>6}  occupancy"]
    assumed = False
    for k in sorted(kernels, key=lambda k: (short[k.mangled], k.arch)):
        block = bounds.block_size(short[k.mangled])
        assumed |= block is None
        block_text = f"{ASSUMED_BLOCK}*" if block is None else str(block)
        occ = occupancy(k.registers, k.smem, block or ASSUMED_BLOCK, k.arch)
        occ_text = "n/a" if occ is None else f"{occ[0] * 100:g}%" + ("" if occ[0] >= 1 else f" ({occ[1]})")
        lines.append(f"{short[k.mangled]:<{width}}  {k.arch:<6}{k.registers:>5}  "
                     f"{f'{k.spill_stores}/{k.spill_loads}':>13}  {k.smem:>7}  {block_text:>6}  {occ_text}")
    if assumed:
        lines.append(f"* no __launch_bounds__: {ASSUMED_BLOCK} threads assumed (kThreads, the block launch() uses)")
    spills = [f"{short[k.mangled]} on {k.arch} ({k.spill_stores} B stored, {k.spill_loads} B loaded)"
              for k in kernels if k.spill_stores or k.spill_loads]
    archs = sorted({k.arch for k in kernels})
    lines.append(f"{len(short)} kernels on {', '.join(archs)}; "
                 + ("no register spills" if not spills else "register spills: " + "; ".join(spills)))
    return "\n".join(lines)


def report(model, backend) -> str:
    """Build `model` with nvcc (even where $MORPHGEN_CUDA_EMULATION is set: ptxas runs only under
    nvcc) and return the table of its kernels."""
    reason = toolchain.nvcc_missing(backend.compiler)
    if reason is not None:
        raise UserError(f"morphgen: error: --emit report builds with nvcc, whose ptxas reports the kernels: {reason}")
    from morphgen.pipeline import lower
    sources = backend.emitter_class()(lower(model)).emit()
    # The name Backend.build gives the library: the report shares its cache entry with `compile`.
    lib = toolchain.build(sources, f"mg_{backend.name}", backend.compiler, emulation=False)
    try:
        log = (Path(lib).parent / "build.log").read_text(errors="replace")
    except OSError as err:
        raise InternalError(f"the build log of {lib} cannot be read ({err.strerror or err}); "
                            f"remove {Path(lib).parent} to rebuild it") from err
    kernels = parse_log(log)
    if not kernels:
        raise InternalError(f"no ptxas kernel lines in {Path(lib).parent / 'build.log'} (built without -Xptxas=-v?)")
    headers = sorted(Path(__file__).resolve().parent.glob("**/*.cuh"))
    return render(kernels, LaunchBounds([*sources.values(), *(h.read_text() for h in headers)]))
