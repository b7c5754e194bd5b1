"""Reverse-mode differentiation of IR programs: the forward list in, a backward list out.

One gradient rule per forward opcode (``GRADIENT_RULES``), like an autograd table.  The
backward is itself IR: it reuses forward opcodes where they express the gradient exactly
(``aggregate(direction="out")`` is the transpose of ``aggregate``, ``scatter`` is the
gradient of ``gather`` and vice versa) and otherwise uses the small set of backward opcodes
registered in :mod:`morphgen.ir_ops` (``BACKWARD_OPCODES``), which every backend implements.

Only gradients that reach a parameter are generated: values that do not depend on any
parameter (features, labels, graph scalars) never get one, and backward ops whose result
no parameter gradient needs are removed at the end.
"""
from __future__ import annotations

from .ir import IRBug, IRError, Program, Value, dim_add
from .ir_ops import MATH_FUNCTIONS, ROW_SOFTMAXES, Builder, aggregate_scale, aggregate_weights, blocks_of


def differentiate(program: Program) -> None:
    """Fill ``program.backward`` and ``program.grads`` (param name -> gradient value)."""
    if program.loss is None:
        raise IRError(f"program '{program.name}' has no loss to differentiate")
    producer = program.producer(program.forward)
    loss_op = producer.get(program.loss.id)
    if loss_op is None or loss_op.opcode not in ("cross_entropy", "link_loss"):
        raise IRError("the loss must be the result of cross_entropy or link_loss",
                      loss_op.loc if loss_op is not None else None)
    program.backward = []
    program.grads = {}
    ctx = _Context(program)

    if loss_op.opcode == "cross_entropy":
        logits, labels = loss_op.inputs
        if ctx.needs(logits):
            ctx.accumulate(logits, ctx.b.emit("cross_entropy_grad", logits, labels, loc=loss_op.loc,
                                              name="d_" + (logits.name or "logits")))
    else:
        z, rel = loss_op.inputs
        for v, opcode in ((z, "link_loss_grad"), (rel, "link_loss_rel_grad")):
            if ctx.needs(v):
                ctx.accumulate(v, ctx.b.emit(opcode, z, rel, loc=loss_op.loc, name="d_" + (v.name or "z"),
                                             **loss_op.attrs))
    for op in reversed(program.forward):
        if op is loss_op or op.output is None:
            continue
        g = ctx.grads.get(op.output.id)
        if g is None:
            continue
        rule = GRADIENT_RULES.get(op.opcode)
        if rule is None:
            raise IRError(f"no gradient rule for opcode '{op.opcode}'", op.loc)
        ctx.loc = op.loc
        rule(ctx, op, g)
    ctx.finish_slices()

    for p in program.params:
        g = ctx.grads.get(p.value.id)
        if g is not None and p.trainable:
            program.grads[p.name] = g
    program.backward = _live_ops(program.backward, program.grads.values())
    program.validate()


class _Context:
    """State of one differentiation: gradient accumulators and the backward builder."""

    def __init__(self, program: Program):
        self.program = program
        self.b = Builder(program, program.backward)
        self.grads: dict = {}
        self.loc = None
        self.slice_grads: dict = {}      # weight id -> {group: [(part, start, stop, grad)]}
        self.requires = _requires_grad(program)

    def needs(self, v: Value) -> bool:
        return v.id in self.requires

    def emit(self, opcode, *inputs, **attrs) -> Value:
        return self.b.emit(opcode, *inputs, loc=self.loc, **attrs)

    def accumulate(self, v: Value, g: Value) -> None:
        if not self.needs(v):
            return
        prev = self.grads.get(v.id)
        self.grads[v.id] = g if prev is None else self.emit("add", prev, g)

    def reduce_to(self, g: Value, target: Value) -> Value:
        """Undo broadcasting: sum ``g`` down to the shape of the operand ``target``."""
        if target.assoc == "param":
            if g.assoc == "param":
                return g
            if target.width == 1 and g.width != 1:      # a scalar weight scaled every feature
                g = self.emit("feature_sum", g)
            return self.emit("row_sum", g)
        if target.assoc == "scalar":
            raise IRError("gradients of scalar operands are not supported", self.loc)
        if target.width == 1 and g.width != 1:
            return self.emit("feature_sum", g)
        return g

    def finish_slices(self) -> None:
        """Stack the gradients of ``param_slice`` views back into their weight's gradient."""
        for wid, groups in self.slice_grads.items():
            weight = next(p.value for p in self.program.params if p.value.id == wid)
            for parts in groups.values():
                parts.sort(key=lambda t: t[0])
                edge = 0
                for _, start, stop, _g in parts:
                    if dim_add(start, 0) != dim_add(edge, 0):
                        raise IRBug(f"slices of weight {weight!r} do not tile its rows")
                    edge = stop
                if dim_add(edge, 0) != dim_add(weight.shape[0], 0):
                    raise IRBug(f"slices of weight {weight!r} do not cover all its rows")
                self.loc = None
                stacked = self.emit("row_concat", *[t[3] for t in parts])
                self.accumulate(weight, stacked)


def _requires_grad(program: Program) -> set:
    """Ids of values that depend on some parameter (only those can need a gradient)."""
    req = {p.value.id for p in program.params if p.trainable}
    for op in program.forward:
        if op.output is not None and any(v.id in req for v in op.inputs):
            req.add(op.output.id)
    return req


def _live_ops(ops: list, roots) -> list:
    """Drop ops whose results nothing in ``roots`` depends on (dead gradient code)."""
    needed = {v.id for v in roots}
    kept = []
    for op in reversed(ops):
        if op.output is not None and op.output.id in needed:
            kept.append(op)
            needed |= {v.id for v in op.inputs}
    return kept[::-1]


# -- gradient rules: rule(ctx, op, g) accumulates into the inputs that need gradients -----
def _linear(ctx, op, g):
    x, w = op.inputs
    if ctx.needs(x):
        ctx.accumulate(x, ctx.emit("matmul_nt", g, w))
    if ctx.needs(w):
        ctx.accumulate(w, ctx.emit("matmul_tn", x, g))


def _blocks(op) -> dict:
    """A block-diagonal product's ``blocks`` for its gradients (none for a plain one)."""
    return {"blocks": blocks_of(op)} if blocks_of(op) != 1 else {}


def _typed_linear(ctx, op, g):
    x, w = op.inputs
    if ctx.needs(x):
        ctx.accumulate(x, ctx.emit("typed_matmul_nt", g, w, **_blocks(op)))
    if ctx.needs(w):
        ctx.accumulate(w, ctx.emit("typed_matmul_tn", x, g, types=w.shape[0], domain=w.domain, **_blocks(op)))


def _edge_typed_linear(ctx, op, g):
    x, w = op.inputs
    placement = {"end": op.attrs["end"], "layout": op.attrs["layout"], **_blocks(op)}
    if ctx.needs(x):
        ctx.accumulate(x, ctx.emit("edge_typed_linear_input_grad", g, w, **placement))
    if ctx.needs(w):
        ctx.accumulate(w, ctx.emit("edge_typed_linear_weight_grad", x, g, types=w.shape[0], **placement))


def _typed_param(ctx, op, g):
    (w,) = op.inputs
    ctx.accumulate(w, ctx.emit("typed_row_sum", g, types=w.shape[0], domain=w.domain))


def _gather(ctx, op, g):
    ctx.accumulate(op.inputs[0], ctx.emit("scatter", g, reduce="sum", end=op.attrs["end"]))


def _scatter(ctx, op, g):
    (m,) = op.inputs
    end = op.attrs.get("end", "dst")
    reduce = op.attrs["reduce"]
    if reduce == "max":
        ctx.accumulate(m, ctx.emit("scatter_max_grad", g, m, op.output, end=end))
        return
    back = ctx.emit("gather", g, end=end)
    if reduce == "mean":   # every edge's end node has degree >= 1, so no division by zero
        deg = ctx.emit("graph_scalar", kind="in_degree" if end == "dst" else "out_degree")
        back = ctx.emit("div", back, ctx.emit("gather", deg, end=end))
    ctx.accumulate(m, back)


def _aggregate(ctx, op, g):
    x = op.inputs[0]
    attrs = dict(op.attrs)
    if attrs["reduce"] == "max":
        ctx.accumulate(x, ctx.emit("aggregate_max_grad", g, x, op.output,
                                   self_loops=attrs.get("self_loops", False)))
        return
    inward = attrs.get("direction", "in") == "in"
    if ctx.needs(x):   # the transpose of a linear operator: same coefficients, edges reversed
        flipped = dict(attrs, direction="out" if inward else "in")
        ctx.accumulate(x, ctx.emit("aggregate", g, *op.inputs[1:], **flipped))
    scale, weights = aggregate_scale(op), aggregate_weights(op)
    if scale is not None and ctx.needs(scale):
        raise IRError("aggregate norm=node_scale: the node scale must not need a gradient", op.loc)
    if weights is not None and ctx.needs(weights):
        if attrs.get("norm") in ("gcn_weighted", "node_scale"):     # its degrees depend on the weights too
            raise IRError("aggregate norm=gcn_weighted: the edge weights must be the graph's (e.edge_weight), "
                          "not values that need a gradient", op.loc)
        # dL/dw_e = c_e <g[row end], x[column end]> with c_e the normalisation coefficient
        g_end, x_end = ("dst", "src") if inward else ("src", "dst")
        dw = ctx.emit("dot", ctx.emit("gather", g, end=g_end), ctx.emit("gather", x, end=x_end))
        norm = attrs.get("norm", "none")
        kind = "gcn_norm" if norm == "gcn" else ("mean_norm" if attrs["reduce"] == "mean" else None)
        if kind is not None:
            coef = ctx.emit("graph_scalar", kind=kind, self_loops=attrs.get("self_loops", False))
            dw = ctx.emit("mul", dw, coef)
        ctx.accumulate(weights, dw)


def _add(ctx, op, g):
    a, b = op.inputs
    for operand in (a, b):
        if ctx.needs(operand):
            ctx.accumulate(operand, ctx.reduce_to(g, operand))


def _sub(ctx, op, g):
    a, b = op.inputs
    if ctx.needs(a):
        ctx.accumulate(a, ctx.reduce_to(g, a))
    if ctx.needs(b):
        ctx.accumulate(b, ctx.reduce_to(ctx.emit("neg", g), b))


def _mul(ctx, op, g):
    a, b = op.inputs
    if ctx.needs(a):
        ctx.accumulate(a, ctx.reduce_to(ctx.emit("mul", g, b), a))
    if ctx.needs(b):
        ctx.accumulate(b, ctx.reduce_to(ctx.emit("mul", g, a), b))


def _div(ctx, op, g):
    a, b = op.inputs
    if ctx.needs(a):
        ctx.accumulate(a, ctx.reduce_to(ctx.emit("div", g, b), a))
    if ctx.needs(b):   # d(a/b)/db = -(a/b)/b = -y/b
        gb = ctx.emit("neg", ctx.emit("div", ctx.emit("mul", g, op.output), b))
        ctx.accumulate(b, ctx.reduce_to(gb, b))


def _scale(ctx, op, g):
    ctx.accumulate(op.inputs[0], ctx.emit("scale", g, c=op.attrs["c"]))


def _neg(ctx, op, g):
    ctx.accumulate(op.inputs[0], ctx.emit("neg", g))


def _bias_add(ctx, op, g):
    x, b = op.inputs
    ctx.accumulate(x, g)
    if ctx.needs(b):
        ctx.accumulate(b, ctx.emit("row_sum", g))


def _activation(ctx, op, g):
    attrs = {"act": op.opcode}
    if op.opcode in ("leaky_relu", "elu"):
        attrs["alpha"] = float(op.attrs.get("alpha", 0.01 if op.opcode == "leaky_relu" else 1.0))
        if attrs["alpha"] <= 0.0:   # act_grad reads the sign of the output, valid for alpha > 0
            raise IRError(f"{op.opcode}: alpha must be positive, got {attrs['alpha']}", op.loc)
    ctx.accumulate(op.inputs[0], ctx.emit("act_grad", g, op.output, **attrs))


def _math(ctx, op, g):
    x = op.inputs[0]
    ctx.accumulate(x, ctx.emit("math_grad", g, x, fn=op.opcode, c=float(op.attrs.get("c", 0.0))))


def _row_softmax(ctx, op, g):
    ctx.accumulate(op.inputs[0], ctx.emit("softmax_grad", g, op.output, log=op.opcode == "log_softmax"))


def _dot(ctx, op, g):
    a, b = op.inputs
    heads = op.attrs.get("heads", 1)
    # one gradient entry per head, spread over that head's features
    spread = (lambda v: ctx.emit("head_mul", v, g, heads=heads)) if heads > 1 else (lambda v: ctx.emit("mul", g, v))
    if ctx.needs(a):
        ctx.accumulate(a, ctx.reduce_to(spread(b), a))
    if ctx.needs(b):
        ctx.accumulate(b, ctx.reduce_to(spread(a), b))


def _head_mul(ctx, op, g):
    x, s = op.inputs
    heads = op.attrs["heads"]
    if ctx.needs(x):
        ctx.accumulate(x, ctx.reduce_to(ctx.emit("head_mul", g, s, heads=heads), x))
    if ctx.needs(s):
        ctx.accumulate(s, ctx.emit("dot", g, x, heads=heads))


def _basis_combine(ctx, op, g):
    a, v = op.inputs
    if ctx.needs(a):
        ctx.accumulate(a, ctx.emit("basis_coef_grad", g, v))
    if ctx.needs(v):
        ctx.accumulate(v, ctx.emit("basis_grad", a, g))


def _typed_linear_bases(ctx, op, g):
    x, a, v = op.inputs
    if ctx.needs(x):      # a rewrite only makes this op for featureless rows, which need none
        ctx.accumulate(x, ctx.emit("typed_matmul_nt", g, ctx.emit("basis_combine", a, v)))
    if ctx.needs(a):
        ctx.accumulate(a, ctx.emit("typed_linear_bases_coef_grad", x, g, v, types=a.shape[0], domain=a.domain))
    if ctx.needs(v):
        ctx.accumulate(v, ctx.emit("typed_linear_bases_grad", x, a, g))


def _standardize(ctx, op, g):
    x = op.inputs[0]
    ctx.accumulate(x, ctx.emit(op.opcode + "_grad", g, x, op.output, eps=op.attrs["eps"]))


def _head_mean(ctx, op, g):
    heads = op.attrs["heads"]
    ctx.accumulate(op.inputs[0], ctx.emit("head_repeat", g, heads=heads, c=1.0 / heads))


def _edge_softmax(ctx, op, g):
    ctx.accumulate(op.inputs[0], ctx.emit("edge_softmax_grad", g, op.output))


def _concat(ctx, op, g):
    start = 0
    for part in op.inputs:
        stop = dim_add(start, part.width)
        if ctx.needs(part):
            ctx.accumulate(part, ctx.emit("slice", g, start=start, stop=stop))
        start = stop


def _dropout(ctx, op, g):
    ctx.accumulate(op.inputs[0], ctx.emit("dropout_grad", g, p=op.attrs["p"], site=op.output.id))


def _matvec(ctx, op, g):
    w, a = op.inputs
    if ctx.needs(w):
        ctx.accumulate(w, ctx.emit("outer", g, a))
    if ctx.needs(a):
        ctx.accumulate(a, ctx.emit("matvec_t", w, g))


def _param_slice(ctx, op, g):
    (w,) = op.inputs
    group = ctx.slice_grads.setdefault(w.id, {}).setdefault(op.attrs.get("group", 0), [])
    group.append((op.attrs.get("part", len(group)), op.attrs["start"], op.attrs["stop"], g))


def _no_gradient(ctx, op, g):
    """Graph scalars are constants of the graph."""


GRADIENT_RULES = {
    "linear": _linear, "typed_linear": _typed_linear, "typed_param": _typed_param,
    "gather": _gather, "scatter": _scatter, "aggregate": _aggregate,
    "graph_scalar": _no_gradient, "add": _add, "sub": _sub, "mul": _mul, "div": _div,
    "scale": _scale, "neg": _neg, "bias_add": _bias_add, "dot": _dot, "head_mul": _head_mul, "head_mean": _head_mean, "basis_combine": _basis_combine,
    "typed_linear_bases": _typed_linear_bases, "edge_typed_linear": _edge_typed_linear,
    "layer_standardize": _standardize, "batch_standardize": _standardize,
    "edge_softmax": _edge_softmax, "concat": _concat, "dropout": _dropout,
    "matvec": _matvec, "param_slice": _param_slice,
    **{act: _activation for act in ("relu", "leaky_relu", "elu", "exp", "sigmoid", "tanh")},
    **{fn: _math for fn in MATH_FUNCTIONS}, **{fn: _row_softmax for fn in ROW_SOFTMAXES},
}
