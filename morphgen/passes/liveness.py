"""Buffer liveness over forward + backward and a peak-memory estimate.

Steps are the positions in ``program.forward + program.backward``.  A value lives from the
step that defines it to the last step that reads it; inputs (features, labels) live the
whole step; parameter gradients, the loss and the logits live to the end (the optimizer
and the evaluation read them); values the backward reads therefore stay live across the
forward/backward boundary.  Parameters and the optimizer state live forever and are
reported apart.

Sizes in bytes: node values ``N * width``, edge values ``E * width`` elements of 4 bytes
(f32) or 8 bytes (i64); the featureless identity costs nothing and values derived from it
by gather/dropout store one index and one scale per row (12 bytes).  A max reduction whose
gradient is generated keeps an 8-byte argmax (int64, the backends' index buffers) per output
element from the forward op to its gradient op.  Dropout masks are regenerated from the
counter-based RNG and cost nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from ..ir import IRBug, Program, Value
from .rewrite import identity_derived

ELEMENT_BYTES = {"f32": 4, "i64": 8, "bool": 1}
OPTIMIZER_STATE_COPIES = {"adam": 2, "adamw": 2, "sgd": 1}


@dataclass
class Liveness:
    intervals: dict = field(default_factory=dict)   # value id -> (first step, last step)
    sizes: dict = field(default_factory=dict)       # value id (or "argmax:<id>") -> bytes
    peak_bytes: int = 0                             # activations + gradients at the peak
    peak_step: int = -1
    param_bytes: int = 0                            # weights
    optimizer_bytes: int = 0                        # moments / momentum buffers

    @property
    def total_peak_bytes(self) -> int:
        return self.peak_bytes + self.param_bytes + self.optimizer_bytes


def lifetimes(program: Program, ops: list, defined_at: dict = None, read_at: list = ()) -> dict:
    """value id -> (first step, last step) over the steps of ``ops``: the one lifetime rule of
    the memory report and of the backends' buffer plans.

    A value lives from the step that defines it to the last step that reads it.  Inputs and
    graph constants (``graph_scalar``: written once when the data is bound) and the invariant
    section's values (computed once at load time, each in a buffer of its own) live from
    before the first step (-1) to the end; parameter gradients, the loss and the logits to the end
    (the optimizer and the evaluation read them).  Parameters have no lifetime here.  A backend
    that runs ops fused passes ``defined_at`` (value id -> the step whose kernel writes it) and
    ``read_at`` ((value id, step) pairs its fused kernels read besides the ops' own inputs).
    """
    end = len(ops)
    params = {p.value.id for p in program.params}
    live = {v.id: (-1, end) for v in program.inputs.values()}
    once = {op.output.id for op in program.invariant}
    for step, op in enumerate(ops):
        for v in op.inputs:
            if v.id in live:
                live[v.id] = (live[v.id][0], max(live[v.id][1], step))
        if op.output is not None and op.output.id not in params and op.output.id not in live:
            constant = op.opcode == "graph_scalar" or op.output.id in once
            live[op.output.id] = (-1, end) if constant else (step, step)
    for vid, step in (defined_at or {}).items():
        if vid in live:
            live[vid] = (min(live[vid][0], step), live[vid][1])
    for vid, step in read_at:
        if vid in live:
            live[vid] = (live[vid][0], max(live[vid][1], step))
    for v in list(program.grads.values()) + [program.loss, program.logits]:
        if v is not None and v.id in live:
            live[v.id] = (live[v.id][0], end)
    return live


def analyse_liveness(program: Program, num_nodes: int, num_edges: int, unstored=frozenset()) -> Liveness:
    """``unstored``: ids of values the backend keeps outside its buffers (the input features,
    counted with the data; dropped sparse features, which the kernels never materialise)."""
    ops = program.all_ops()
    end = len(ops)
    params = {p.value.id for p in program.params}
    prod_of = {op.output.id: op for op in program.forward if op.output is not None}
    result = Liveness()

    def size(v: Value) -> int:
        dims = [num_nodes if v.assoc == "node" else num_edges if v.assoc == "edge" else 1]
        for d in v.shape:
            if not isinstance(d, int):
                raise IRBug(f"liveness needs bound sizes; {v!r} has width {d!r}")
            dims.append(d)
        if v.assoc in ("node", "edge") and identity_derived(program, v, prod_of):
            return dims[0] * 12
        return prod(dims) * ELEMENT_BYTES.get(v.dtype, 4)

    result.intervals = lifetimes(program, ops)
    features = program.inputs.get("features")
    if program.featureless and features is not None:
        del result.intervals[features.id]              # the identity is never stored
    for v in program.inputs.values():
        if v.id in result.intervals:
            result.sizes[v.id] = 0 if v.id in unstored else size(v)
    for op in ops:
        if op.output is not None and op.output.id not in params:
            # a param_slice is a view into its weight: no buffer of its own
            stored = op.opcode != "param_slice" and op.output.id not in unstored
            result.sizes[op.output.id] = size(op.output) if stored else 0
    for step, op in enumerate(ops):           # argmax side buffers of max reductions
        if op.opcode in ("aggregate_max_grad", "scatter_max_grad"):
            fwd = op.inputs[2]
            key = f"argmax:{fwd.id}"
            result.intervals[key] = (result.intervals[fwd.id][0], step)
            result.sizes[key] = 2 * size(fwd)     # an 8-byte index per 4-byte float element
    for step in range(-1, end + 1):
        live = sum(result.sizes[k] for k, (a, b) in result.intervals.items() if a <= step <= b)
        if live > result.peak_bytes:
            result.peak_bytes, result.peak_step = live, step
    for p in program.params:
        result.param_bytes += size(p.value)
    copies = OPTIMIZER_STATE_COPIES.get(program.optimizer.kind, 2)
    if program.optimizer.kind == "sgd" and not program.optimizer.momentum:
        copies = 0
    result.optimizer_bytes = copies * result.param_bytes
    return result
