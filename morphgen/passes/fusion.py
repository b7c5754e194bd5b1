"""Fusion candidates: annotate chains that a backend may run as one kernel.

The IR stays unchanged; the groups go into the side table ``program.fusion`` as
:class:`FusionGroup` records that backends may honour or ignore.

* ``aggregate_epilogue``: ``aggregate|scatter -> bias_add -> activation`` (either tail op
  optional, at least one present): the epilogue runs on each output tile before its one write.
* ``linear_epilogue``: the same tail after a ``linear`` (a first layer whose aggregation was
  hoisted out of the epoch ends this way).
* ``binary_epilogue``: the same tail after a node-wise ``add``/``sub``/``mul``/``div`` (SAGE's
  sum of its two products; a norm layer's scale before its shift and activation).
* ``edge_chain``: edge-wise elementwise ops (gathers, arithmetic, dots, activations, graph
  scalars, typed_param rows) feeding a ``scatter`` or a weighted ``aggregate``: one traversal
  computes each edge's message and reduces it without materialising the edge tensors
  (Graphiler's scatter -> aggregate fusion).

An intermediate joins a group only if no other forward op reads it.  Intermediates that the
backward reads are listed in ``FusionGroup.keep``: the fused kernel must still write them
(or the backend must recompute them).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Program
from ..ir_ops import aggregate_weights

EPILOGUE_ACTIVATIONS = ("relu", "leaky_relu", "elu", "sigmoid", "tanh")
EPILOGUE_HEADS = {"aggregate": "aggregate_epilogue", "scatter": "aggregate_epilogue", "linear": "linear_epilogue",
                  "add": "binary_epilogue", "sub": "binary_epilogue", "mul": "binary_epilogue",
                  "div": "binary_epilogue"}
EDGE_ELEMENTWISE = ("gather", "add", "sub", "mul", "div", "scale", "neg", "dot", "graph_scalar",
                    "typed_param", "relu", "leaky_relu", "elu", "exp", "sigmoid", "tanh")


@dataclass(eq=False)
class FusionGroup:
    kind: str                  # aggregate_epilogue | linear_epilogue | binary_epilogue | edge_chain
    ops: list                  # the forward ops, in program order
    keep: list = field(default_factory=list)   # intermediates the backward still reads

    def __repr__(self) -> str:
        chain = " -> ".join(op.opcode for op in self.ops)
        kept = f" keep={self.keep}" if self.keep else ""
        return f"{self.kind}: {chain}{kept}"


def annotate_fusion(program: Program) -> list:
    """Fill ``program.fusion`` (replacing earlier annotations) and return it."""
    uses: dict = {}
    for op in program.forward:
        for v in op.inputs:
            uses.setdefault(v.id, []).append(op)
    external = {v.id for v in (program.loss, program.logits) if v is not None}
    backward_reads = {v.id for op in program.backward for v in op.inputs}
    producer = {op.output.id: op for op in program.forward}
    position = {id(op): i for i, op in enumerate(program.forward)}

    def only_reader(v):
        readers = uses.get(v.id, [])
        return readers[0] if len(readers) == 1 and v.id not in external else None

    groups = []
    for op in program.forward:
        binary = EPILOGUE_HEADS.get(op.opcode) == "binary_epilogue"
        if op.opcode in EPILOGUE_HEADS and (not binary or op.output.assoc == "node"):
            chain = [op]
            nxt = only_reader(op.output)
            if nxt is not None and nxt.opcode == "bias_add" and nxt.inputs[0] is chain[-1].output:
                chain.append(nxt)
                nxt = only_reader(nxt.output)
            if nxt is not None and nxt.opcode in EPILOGUE_ACTIVATIONS:
                chain.append(nxt)
            if len(chain) > 1:
                groups.append(_group(EPILOGUE_HEADS[op.opcode], chain, backward_reads))
        message = (op.inputs[0] if op.opcode == "scatter" else
                   aggregate_weights(op) if op.opcode == "aggregate" else None)
        if message is not None:
            members = _edge_producers(message, producer, only_reader, op)
            if members:
                chain = sorted(members, key=lambda o: position[id(o)]) + [op]
                groups.append(_group("edge_chain", chain, backward_reads))
    program.fusion = groups
    return groups


def _edge_producers(root, producer, only_reader, sink) -> list:
    """Edge-wise producers of ``root`` whose results are read only inside the chain."""
    members, stack, inside = [], [(root, sink)], {id(sink)}
    while stack:
        v, reader = stack.pop()
        op = producer.get(v.id)
        if op is None or op.opcode not in EDGE_ELEMENTWISE or op.output.assoc != "edge":
            continue
        if only_reader(v) is not reader or id(op) in inside:
            continue
        members.append(op)
        inside.add(id(op))
        stack += [(u, op) for u in op.inputs]
    return members


def _group(kind, chain, backward_reads) -> FusionGroup:
    keep = [op.output for op in chain[:-1] if op.output.id in backward_reads]
    return FusionGroup(kind, chain, keep)
