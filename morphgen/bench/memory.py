"""Memory accounting for benchmarks: the process's resident set, and the analytic minimum of a GCN
(or of an R-GCN).

Measured side: `peak_rss_bytes` (the kernel's high-water mark of the resident set, VmHWM),
`vm_hwm_bytes` / `current_rss_bytes` (read from /proc/self/status), and
`start_training_peak`, which every system calls once its data is loaded: it resets the high-water
mark (writing 5 to /proc/self/clear_refs), so the peak read at the end is the peak of training.

Analytic side: `analytic_minimum_bytes` is the smallest footprint a full-batch GCN training epoch can
have with fp32 values, int32 column indices and int64 row pointers. It is the yardstick the measured
peaks of morphgen and its peers are compared against; the formula is spelled out in
`analytic_minimum_breakdown` (one entry per term) so a report can show where the bytes go.
"""
from __future__ import annotations

import resource
import sys
from typing import Optional, Sequence

from morphgen.errors import UserError

FP32 = 4
INDEX32 = 4
INDEX64 = 8


class MemoryModelError(UserError, ValueError):
    """Bad arguments to the analytic memory model; the message names the argument."""


def peak_rss_bytes() -> int:
    """Peak resident set of this process in bytes.

    VmHWM where /proc has it: ru_maxrss also carries the resident set of the parent at the fork
    that started this process (Linux keeps it across execve), so a child of a process that holds a
    large dataset would report the parent's size as its own peak. Elsewhere ru_maxrss (KiB on
    Linux, bytes on macOS)."""
    hwm = vm_hwm_bytes()
    if hwm:
        return hwm
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def _status_field(name: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024      # the kernel reports kB
    except OSError:
        return None
    return None


def current_rss_bytes() -> Optional[int]:
    """Resident set right now (VmRSS), or None where /proc is unavailable."""
    return _status_field("VmRSS")


def vm_hwm_bytes() -> Optional[int]:
    """Resident-set high-water mark (VmHWM), or None where /proc is unavailable."""
    return _status_field("VmHWM")


def _trim_heap() -> None:
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass      # not glibc: nothing to trim


def start_training_peak() -> Optional[int]:
    """Mark the start of training and return the resident set now (the baseline).

    Resets the kernel's resident-set high-water mark (which also resets ru_maxrss), so that
    `peak_rss_bytes` afterwards is the peak since this moment: without it, the peak would still
    hold whatever transient peak loading or generating the data reached, and "growth during
    training" would measure the loader. Where the reset is not possible the peak stays the
    lifetime peak (an overestimate, never an underestimate).

    First hands the heap's free memory back to the system (glibc malloc_trim): memory that the
    loader freed but the allocator kept would otherwise sit in the baseline and be silently reused
    by training, hiding training's own allocations from the growth figure."""
    _trim_heap()
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass
    return current_rss_bytes()


def _positive(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise MemoryModelError(f"analytic_minimum_bytes: '{name}' must be a positive integer, got {v!r}")
    return v


def analytic_minimum_breakdown(N: int, E: int, F: int, widths: Sequence[int], classes: int,
                               sparse_nnz: Optional[int] = None, *, adam: bool = True,
                               dropout: bool = True, relations: int = 0, bases: Optional[int] = None,
                               identity_input: bool = False) -> dict[str, int]:
    """Bytes per term of the minimum footprint of one full-batch GCN training epoch.

    N nodes, E edges (count self loops in E if the model adds them), F input features, `widths`
    the HIDDEN widths (e.g. [32, 32] for a 3-layer GCN), `classes` the output width; the layer
    dimensions are d = [F, *widths, classes]. sparse_nnz: the features are stored as CSR with
    this many non-zeros (None: dense).

      graph       = (N+1)*8 + E*4 + N*4     one CSR (int64 row pointer, int32 columns) and one
                                            fp32 degree norm per node; edge weights d_u^-1/2 d_v^-1/2
                                            are recomputed from it, the transpose is not stored
                                            (backward aggregation scatters over the same CSR)
      features    = N*F*4                   dense, or (N+1)*8 + nnz*(4+4) as CSR
      labels      = N*4 + N                 int32 label and a one-byte split code per node
      parameters  = P*4 * (2 + 2*adam)      P = sum_l d_l*d_{l+1} + d_{l+1}; values, gradients,
                                            and Adam's first and second moments
      activations = N*4 * (sum(widths) + classes)
                                            what backward must keep: each hidden layer's output
                                            (ReLU's mask and the next layer's input) and the logits
                                            (overwritten in place by the softmax gradient)
      dropout     = ceil(N*sum(widths)/8)   one mask bit per dropped hidden value
      workspace   = 2 * N*4 * max(widths + [classes])
                                            the transient product H*W and one gradient buffer,
                                            reused by every layer

    relations > 0: an R-GCN (relations edge types, no self loops in E) instead of a GCN:
      graph       = (N+1)*8 + E*4 + E*4 + E*4
                                            the CSR, one int32 edge type and one fp32 1/c_{i,r}
                                            per edge
      parameters  = P = sum_l R*d_l*d_{l+1} + d_l*d_{l+1} + d_{l+1}
                                            one matrix per relation and the self-loop weight, or
                                            with `bases` B: B*d_l*d_{l+1} + R*B instead of R*d_l*d_{l+1}
    identity_input: a featureless graph (F = N): the identity input is not stored (features = 0),
      the first layer looks its weights up.
    """
    N, E, F, classes = (_positive(n, v) for n, v in (("N", N), ("E", E), ("F", F), ("classes", classes)))
    widths = list(widths)
    for i, w in enumerate(widths):
        _positive(f"widths[{i}]", w)
    if sparse_nnz is not None and (isinstance(sparse_nnz, bool) or not isinstance(sparse_nnz, int)
                                   or not 0 <= sparse_nnz <= N * F):
        raise MemoryModelError(f"analytic_minimum_bytes: 'sparse_nnz' must be an integer in [0, N*F], got {sparse_nnz!r}")
    for name, v in (("relations", relations), ("bases", bases or 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise MemoryModelError(f"analytic_minimum_bytes: '{name}' must be a non-negative integer, got {v!r}")
    dims = [F, *widths, classes]
    if relations:
        typed = [(bases * dims[i] * dims[i + 1] + relations * bases) if bases else relations * dims[i] * dims[i + 1]
                 for i in range(len(dims) - 1)]
        params = sum(t + dims[i] * dims[i + 1] + dims[i + 1] for i, t in enumerate(typed))
        graph = (N + 1) * INDEX64 + E * INDEX32 + E * INDEX32 + E * FP32
    else:
        params = sum(dims[i] * dims[i + 1] + dims[i + 1] for i in range(len(dims) - 1))
        graph = (N + 1) * INDEX64 + E * INDEX32 + N * FP32
    hidden = sum(widths)
    if identity_input:
        features = 0
    elif sparse_nnz is None:
        features = N * F * FP32
    else:
        features = (N + 1) * INDEX64 + sparse_nnz * (INDEX32 + FP32)
    return {
        "graph": graph,
        "features": features,
        "labels": N * INDEX32 + N,
        "parameters": params * FP32 * (4 if adam else 2),
        "activations": N * FP32 * (hidden + classes),
        "dropout": -(-N * hidden // 8) if dropout else 0,
        "workspace": 2 * N * FP32 * max(widths + [classes]),
    }


def analytic_minimum_bytes(N: int, E: int, F: int, widths: Sequence[int], classes: int,
                           sparse_nnz: Optional[int] = None, *, adam: bool = True,
                           dropout: bool = True, relations: int = 0, bases: Optional[int] = None,
                           identity_input: bool = False) -> int:
    """Sum of `analytic_minimum_breakdown` (see there for the formula)."""
    return sum(analytic_minimum_breakdown(N, E, F, widths, classes, sparse_nnz, adam=adam, dropout=dropout,
                                          relations=relations, bases=bases,
                                          identity_input=identity_input).values())
