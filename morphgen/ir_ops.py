"""The IR operation set: one entry per opcode with its shape/association inference.

Every op is layout free.  ``docs/ir.md`` describes the semantics of each; the numpy
interpreter (``morphgen.interp``) is the executable definition and the test oracle.

Forward ops
-----------
linear(x, W)                 x node|edge [K], W param [K,M]           -> same assoc [M]
typed_linear(x, W)           W param [T,K,M] with domain etype (x edge) or ntype (x node)
gather(x, end=src|dst)       node [*] -> edge [*]: row e takes x[src(e)] or x[dst(e)]
scatter(m, reduce, end=dst)  edge [*] -> node [*]: reduce (sum|mean|max) of the edges whose
                             ``end`` is the node (dst = incoming edges); empty -> 0
aggregate(x[, w], reduce, norm, self_loops, direction=in)
                             fused gather(src) * w -> scatter(dst): node -> node.
                             norm=gcn weighs u->v by 1/sqrt(d(u) d(v)) with d = in-degree
                             (+1 with self_loops).  direction=out is the transpose.
graph_scalar(kind)           no inputs; kind in_degree|out_degree (node [1]),
                             rel_degree (edge [1]: incoming edges of dst(e) of e's type),
                             gcn_norm (edge [1], attrs self_loops)
add|sub|mul|div(a, b)        elementwise with broadcasting of width-1 rows and param rows
scale(x, c)                  x * c for a float attribute c
bias_add(x, b)               b param [M] added to every row
relu|exp|sigmoid|tanh(x)     elementwise; leaky_relu(x, alpha), elu(x, alpha)
dot(a, b)                    rowwise dot product -> [1]
edge_softmax(s)              edge [H] -> edge [H], softmax over each destination's in-edges
typed_param(W)               W param [T,K] with domain etype|ntype -> edge|node [K]: row W[type]
concat(a, b, ...)            same association, widths add up
dropout(x, p)                inverted dropout during training, identity at evaluation
cross_entropy(logits, labels) softmax cross entropy, mean over the training mask -> scalar
"""
from __future__ import annotations

from .ir import IRError, Op, Value

UNARY = ("relu", "leaky_relu", "elu", "exp", "sigmoid", "tanh", "neg")
BINARY = ("add", "sub", "mul", "div")
REDUCTIONS = ("sum", "mean", "max")
GRAPH_SCALARS = {"in_degree": "node", "out_degree": "node", "rel_degree": "edge",
                 "gcn_norm": "edge"}


def _same_width(a, b) -> bool:
    return a == b or isinstance(a, str) or isinstance(b, str)


def _need(cond: bool, message: str, loc=None):
    if not cond:
        raise IRError(message, loc)


def _rows(v: Value) -> bool:
    return v.assoc in ("node", "edge")


def infer(opcode: str, inputs: list, attrs: dict, loc=None):
    """Return ``(assoc, shape, dtype)`` of the op's result, or raise IRError."""
    fn = _RULES.get(opcode)
    if fn is None:
        raise IRError(f"unknown IR opcode '{opcode}'", loc)
    return fn(inputs, attrs, loc)


def _linear(ins, attrs, loc):
    x, w = ins
    _need(_rows(x), f"linear needs node or edge input, got {x.describe()}", loc)
    _need(w.assoc == "param" and len(w.shape) == 2 and w.domain is None,
          f"linear needs an untyped [K,M] weight, got {w.describe()}", loc)
    _need(_same_width(x.width, w.shape[0]),
          f"linear: input width {x.width} does not match weight rows {w.shape[0]}", loc)
    return x.assoc, (w.shape[1],), "f32"


def _typed_linear(ins, attrs, loc):
    x, w = ins
    _need(w.assoc == "param" and len(w.shape) == 3 and w.domain in ("etype", "ntype"),
          f"typed linear needs a [T,K,M] weight with a type dimension, got {w.describe()}", loc)
    want = "edge" if w.domain == "etype" else "node"
    _need(x.assoc == want, f"a weight sliced by {w.domain} needs {want} input, got {x.assoc}", loc)
    _need(_same_width(x.width, w.shape[1]),
          f"typed linear: input width {x.width} does not match weight rows {w.shape[1]}", loc)
    return x.assoc, (w.shape[2],), "f32"


def _typed_param(ins, attrs, loc):
    (w,) = ins
    _need(w.assoc == "param" and len(w.shape) == 2 and w.domain in ("etype", "ntype"),
          f"typed slice needs a [T,K] weight with a type dimension, got {w.describe()}", loc)
    return ("edge" if w.domain == "etype" else "node"), (w.shape[1],), "f32"


def _gather(ins, attrs, loc):
    (x,) = ins
    _need(x.assoc == "node", f"gather needs a node value, got {x.describe()}", loc)
    _need(attrs.get("end") in ("src", "dst"), "gather end must be src or dst", loc)
    return "edge", x.shape, x.dtype


def _scatter(ins, attrs, loc):
    (m,) = ins
    _need(m.assoc == "edge", f"scatter needs an edge value, got {m.describe()}", loc)
    _need(attrs.get("reduce") in REDUCTIONS, f"unknown reduction {attrs.get('reduce')!r}", loc)
    _need(attrs.get("end", "dst") in ("src", "dst"), "scatter end must be src or dst", loc)
    return "node", m.shape, "f32"


def _aggregate(ins, attrs, loc):
    x = ins[0]
    _need(x.assoc == "node", f"aggregate needs a node value, got {x.describe()}", loc)
    if len(ins) == 2:
        w = ins[1]
        _need(w.assoc == "edge" and w.width == 1, f"edge weights must be edge [1], got {w.describe()}", loc)
    _need(attrs.get("reduce") in REDUCTIONS, f"unknown reduction {attrs.get('reduce')!r}", loc)
    _need(attrs.get("norm", "none") in ("none", "gcn"), "aggregate norm must be none or gcn", loc)
    _need(attrs.get("direction", "in") in ("in", "out"), "aggregate direction must be in or out", loc)
    return "node", x.shape, "f32"


def _graph_scalar(ins, attrs, loc):
    kind = attrs.get("kind")
    _need(kind in GRAPH_SCALARS, f"unknown graph scalar {kind!r}", loc)
    return GRAPH_SCALARS[kind], (1,), "f32"


def _broadcast(a: Value, b: Value, loc, what: str):
    if a.assoc == "param" and _rows(b):
        a, b = b, a
    if _rows(a) and b.assoc == "param":
        _need(len(b.shape) == 1 and _same_width(a.width, b.width),
              f"{what}: cannot broadcast {b.describe()} over {a.describe()}", loc)
        return a.assoc, a.shape
    if a.assoc == "scalar" or b.assoc == "scalar":
        other = b if a.assoc == "scalar" else a
        return other.assoc, other.shape
    _need(a.assoc == b.assoc, f"{what}: cannot combine a {a.assoc} value with a {b.assoc} value", loc)
    if a.width == 1:
        return a.assoc, b.shape
    if b.width == 1:
        return a.assoc, a.shape
    _need(_same_width(a.width, b.width), f"{what}: widths {a.width} and {b.width} differ", loc)
    return a.assoc, a.shape


def _binary(ins, attrs, loc):
    a, b = ins
    assoc, shape = _broadcast(a, b, loc, "elementwise op")
    return assoc, shape, "f32"


def _unary(ins, attrs, loc):
    (x,) = ins
    return x.assoc, x.shape, "f32"


def _bias_add(ins, attrs, loc):
    x, b = ins
    _need(b.assoc == "param" and len(b.shape) == 1, f"bias must be a [M] weight, got {b.describe()}", loc)
    _need(_same_width(x.width, b.width), f"bias width {b.width} does not match {x.width}", loc)
    return x.assoc, x.shape, "f32"


def _dot(ins, attrs, loc):
    a, b = ins
    _need(a.assoc == b.assoc or b.assoc == "param",
          f"dot: cannot combine a {a.assoc} value with a {b.assoc} value", loc)
    _need(_same_width(a.width, b.width), f"dot: widths {a.width} and {b.width} differ", loc)
    return a.assoc, (1,), "f32"


def _edge_softmax(ins, attrs, loc):
    (s,) = ins
    _need(s.assoc == "edge", f"edge softmax needs an edge value, got {s.describe()}", loc)
    return "edge", s.shape, "f32"


def _concat(ins, attrs, loc):
    assoc = ins[0].assoc
    _need(all(v.assoc == assoc for v in ins), "concat: all parts must have the same association", loc)
    widths = [v.width for v in ins]
    total = sum(widths) if all(isinstance(w, int) for w in widths) else "+".join(map(str, widths))
    return assoc, (total,), "f32"


def _dropout(ins, attrs, loc):
    (x,) = ins
    p = attrs.get("p")
    _need(isinstance(p, float) and 0.0 <= p < 1.0, f"dropout rate must be in [0, 1), got {p!r}", loc)
    return x.assoc, x.shape, "f32"


def _cross_entropy(ins, attrs, loc):
    logits, labels = ins
    _need(logits.assoc == "node" and labels.assoc == "node",
          "cross entropy needs node logits and node labels", loc)
    return "scalar", (), "f32"


_RULES = {
    "linear": _linear, "typed_linear": _typed_linear, "typed_param": _typed_param, "gather": _gather, "scatter": _scatter,
    "aggregate": _aggregate, "graph_scalar": _graph_scalar, "bias_add": _bias_add,
    "scale": _unary, "dot": _dot, "edge_softmax": _edge_softmax, "concat": _concat,
    "dropout": _dropout, "cross_entropy": _cross_entropy,
    **{op: _binary for op in BINARY}, **{op: _unary for op in UNARY},
}

FORWARD_OPCODES = tuple(_RULES)


def register(opcode: str, rule) -> None:
    """Add an opcode (used by autodiff for its backward-only ops)."""
    _RULES[opcode] = rule


class Builder:
    """Appends ops to a program's forward list with shape inference (used by lowering)."""

    def __init__(self, program, ops=None):
        self.program = program
        self.ops = program.forward if ops is None else ops

    def emit(self, opcode: str, *inputs: Value, loc=None, name: str = "", **attrs) -> Value:
        assoc, shape, dtype = infer(opcode, list(inputs), attrs, loc)
        out = self.program.new_value(assoc, shape, dtype, name)
        self.ops.append(Op(opcode, list(inputs), out, dict(attrs), loc))
        return out
