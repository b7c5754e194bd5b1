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
                             edge_weight (edge [1]: the dataset's weight of e),
                             gcn_norm (edge [1], attrs self_loops)
add|sub|mul|div(a, b)        elementwise with broadcasting of width-1 rows and param rows
scale(x, c)                  x * c for a float attribute c
bias_add(x, b)               b param [M] added to every row
relu|exp|sigmoid|tanh(x)     elementwise; leaky_relu(x, alpha), elu(x, alpha)
sqrt|rsqrt|log|abs|gelu|softplus(x), pow(x, c), shift(x, c)
                             elementwise math; rsqrt(0) = 0; shift adds the constant c
softmax|log_softmax(x)       over the features of each row
dot(a, b, heads=1)           rowwise dot product -> [1]; with heads=H, one dot per head of the
                             head-major layout [H, W/H] -> [H]
head_mul(x, s, heads)        x [H*D] (rows, or a vector weight shared by every row) times s [H]:
                             each head's D features scaled by that head's entry of s
head_mean(x, heads)          [H*D] -> [D]: the mean over heads (concatenating heads needs no op)
edge_softmax(s)              edge [H] -> edge [H], softmax over each destination's in-edges
layer_standardize(x, eps)    each row to mean 0, variance 1 over its features (layer norm without
                             its affine part: the program multiplies and adds its own weights)
batch_standardize(x, mean, var, eps, momentum)
                             node rows: each feature to mean 0, variance 1 over the nodes (batch
                             norm without affine); training uses the batch statistics and updates
                             the running ``mean``/``var`` (untrainable params) in place, evaluation
                             uses the running statistics
basis_combine(A, V)          A [T,B]@etype|ntype, V [B,K,M] -> [T,K,M]@same: W_t = sum_b A[t,b] V[b]
                             (R-GCN's basis decomposition; one GEMM on the weights, no edge tensor)
typed_param(W)               W param [T,K] with domain etype|ntype -> edge|node [K]: row W[type]
concat(a, b, ...)            same association, widths add up
dropout(x, p)                inverted dropout during training, identity at evaluation
cross_entropy(logits, labels) softmax cross entropy, mean over the training mask -> scalar
link_loss(z, R, regularization)
                             link prediction: z node [H], R param [T,H]@etype; over the run's
                             triples (h, r, t, y) the DistMult score s = sum_k z[h,k] R[r,k] z[t,k],
                             binary cross entropy with logits, mean over triples, plus
                             regularization * (mean(z^2) + mean(R^2)) -> scalar

Ops introduced by passes (forward, on weights)
----------------------------------------------
param_slice(W, start, stop)  rows [start, stop) of a [K,M] weight: a view, not a copy
matvec(W, a)                 [K,M]·[M] -> [K]; typed: [T,K,M]·[T,M] -> [T,K] per type
linear(W, A) with W a param  [K,M]·[M,J] -> param [K,J] (weight-times-weight product)
typed_linear_bases(x, A, V)  typed_linear(x, basis_combine(A, V)) without forming every W_t: on
                             featureless rows, row r is Σ_b A[type(r),b] V[b][row(r)]
edge_typed_linear(x, W, end, layout)
                             typed_linear(gather(x, end), W) without per-edge copies of x: x node
                             [K], W [T,K,M]@etype -> edge [M], row e is x[end(e)] · W[type(e)];
                             layout compact (one product per distinct (node, type) pair, copied to
                             its edges) or edge (one per edge)

Backward ops (emitted by morphgen.autodiff; docs/ir.md is the backend contract)
--------------------------------------------------------------------------------
matmul_nt(g, W)              g·Wᵀ (linear's input gradient)
matmul_tn(x, g)              xᵀ·g -> param (linear's weight gradient; row scatter when x is the
                             featureless identity or rows of it)
typed_matmul_nt(g, W)        per row r: g[r]·W[type(r)]ᵀ
typed_matmul_tn(x, g, types) per type t: Σ_{type(r)=t} x[r]ᵀ g[r] -> param [T,K,M]
typed_row_sum(g, types)      per type t: Σ_{type(r)=t} g[r] -> param [T,K]
row_sum(g)                   Σ_r g[r] -> param [M] (bias and broadcast-param gradients)
feature_sum(g)               Σ_f g[r,f] -> [1] per row (broadcast width-1 gradients)
act_grad(g, y, act, alpha)   activation derivative expressed with the forward output y
math_grad(g, x, fn, c)       g ⊙ f'(x) for the elementwise math function fn (with constant c)
softmax_grad(g, y, log)      row softmax (log=False) or log-softmax (log=True) backward from y
head_repeat(g, heads, c)     [D] -> [H*D]: g copied to every head, times c (head_mean's gradient)
basis_coef_grad(g, V)        dA[t,b] = <g[t], V[b]>   (basis_combine's coefficient gradient)
basis_grad(A, g)             dV[b] = sum_t A[t,b] g[t] (basis_combine's bases gradient)
typed_linear_bases_coef_grad(x, g, V)
                             dA[t,b] = Σ_{type(r)=t} x[r] V[b] g[r]ᵀ (typed_linear_bases' coefficients)
typed_linear_bases_grad(x, A, g)
                             dV[b] = Σ_r A[type(r),b] x[r]ᵀ g[r] (typed_linear_bases' bases)
edge_typed_linear_input_grad(g, W, end, layout)
                             dx[n] = Σ_{end(e)=n} g[e] W[type(e)]ᵀ -> node [K]
edge_typed_linear_weight_grad(x, g, end, types, layout)
                             dW[t] = Σ_{type(e)=t} x[end(e)]ᵀ g[e] -> param [T,K,M]@etype
layer_standardize_grad(g, x, y, eps)   (g - mean_f g - y mean_f(g y)) / sigma_row
batch_standardize_grad(g, x, y, eps)   (g - mean_n g - y mean_n(g y)) / sigma_feature (training)
edge_softmax_grad(g, y)      y ⊙ (g − Σ_{in-edges of dst} y ⊙ g)
aggregate_max_grad(g, x, y)  route g[v,f] to the argmax source of the forward max
scatter_max_grad(g, m, y)    route g[v,f] to the argmax edge of the forward max
dropout_grad(g, p, site)     g ⊙ the forward mask of dropout ``site`` / (1 − p)
cross_entropy_grad(logits, labels)  (softmax − onehot) / |train mask| on masked rows, 0 elsewhere
link_loss_grad(z, R, regularization)      d link_loss / dz (node [H])
link_loss_rel_grad(z, R, regularization)  d link_loss / dR (param [T,H]@etype)
slice(g, start, stop)        columns [start, stop) (concat's gradient)
row_concat(a, b, ...)        weights stacked along rows (gradient of param_slice views)
outer(g, a)                  g ⊗ a per type: matvec's weight gradient
matvec_t(W, g)               Wᵀ·g per type: matvec's vector gradient
"""
from __future__ import annotations

from .ir_core import IRError, Op, Value, dim_add, dim_div, dim_mul, dim_sub

UNARY = ("relu", "leaky_relu", "elu", "exp", "sigmoid", "tanh", "neg")
ACTIVATIONS = ("relu", "leaky_relu", "elu", "exp", "sigmoid", "tanh")
MATH_FUNCTIONS = ("sqrt", "rsqrt", "log", "abs", "pow", "gelu", "softplus", "shift")
ROW_SOFTMAXES = ("softmax", "log_softmax")
BINARY = ("add", "sub", "mul", "div")
# gcn: 1/sqrt(d_src d_dst) with d the in-degree; gcn_weighted: d the sum of the in-edges' weights;
# node_scale: s_src s_dst with s a node [1] value given as the aggregate's last input (the program's
# own normalisation, folded from the row scales around a sum: passes/edge_aggregate.py)
AGGREGATE_NORMS = ("none", "gcn", "gcn_weighted", "node_scale")
REDUCTIONS = ("sum", "mean", "max")
GRAPH_SCALARS = {"in_degree": "node", "out_degree": "node", "rel_degree": "edge",
                 "gcn_norm": "edge", "mean_norm": "edge", "edge_weight": "edge"}


def aggregate_weights(op):
    """The edge weights an aggregate reads (its input after the rows), or None."""
    scaled = op.attrs.get("norm") == "node_scale"
    return op.inputs[1] if len(op.inputs) == (3 if scaled else 2) else None


def aggregate_scale(op):
    """The node scale an aggregate with norm=node_scale reads (its last input), or None."""
    return op.inputs[-1] if op.attrs.get("norm") == "node_scale" else None


def reads_edge_weights(op) -> bool:
    """Whether ``op`` reads the graph's own edge weights (e.edge_weight): a graph constant."""
    return op is not None and op.opcode == "graph_scalar" and op.attrs.get("kind") == "edge_weight"


def _same_width(a, b) -> bool:
    return a == b or isinstance(a, str) or isinstance(b, str)


def _need(cond: bool, message: str, loc=None):
    if not cond:
        raise IRError(message, loc)


def _rows(v: Value) -> bool:
    return v.assoc in ("node", "edge")


def infer(opcode: str, inputs: list, attrs: dict, loc=None):
    """Return ``(assoc, shape, dtype)`` of the op's result, or raise IRError."""
    return infer_full(opcode, inputs, attrs, loc)[:3]


def infer_full(opcode: str, inputs: list, attrs: dict, loc=None):
    """Return ``(assoc, shape, dtype, domain)``; ``domain`` is set for typed weight results."""
    fn = _RULES.get(opcode)
    if fn is None:
        raise IRError(f"unknown IR opcode '{opcode}'", loc)
    for i, v in enumerate(inputs):
        if not isinstance(v, Value):
            raise IRError(f"{opcode}: operand {i} is {type(v).__name__}, not an IR value", loc)
    result = tuple(fn(inputs, attrs, loc))
    return result if len(result) == 4 else result + (None,)


def _linear(ins, attrs, loc):
    x, w = ins
    if x.assoc == "param":       # weight-times-weight product introduced by reordering passes
        _need(len(x.shape) == 2 and x.domain is None and w.assoc == "param" and len(w.shape) == 2,
              f"linear of two weights needs [K,M] and [M,J], got {x.describe()} and {w.describe()}", loc)
        _need(_same_width(x.shape[1], w.shape[0]),
              f"linear: weight columns {x.shape[1]} do not match weight rows {w.shape[0]}", loc)
        return "param", (x.shape[0], w.shape[1]), "f32"
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
    _typed_input(x, w.domain, w.shape[1], loc)
    return x.assoc, (_blocked_width(w, attrs, loc),), "f32"


def blocks_of(op) -> int:
    """B of a typed product of B diagonal blocks per type (its ``blocks``), 1 for a plain one."""
    return op.attrs.get("blocks", 1)


def _blocks(attrs, loc) -> int:
    """The ``blocks`` attribute of a typed product, checked: W[t] is block diagonal, B blocks along
    its diagonal (stored as [T, B*D, M]: block b is rows b*D..(b+1)*D, multiplying x's columns
    b*D.. and giving the output's columns b*M..); 1, the default, is a plain [K, M] matrix per type."""
    blocks = attrs.get("blocks", 1)
    _need(isinstance(blocks, int) and not isinstance(blocks, bool) and blocks >= 1,
          f"blocks must be a positive integer, got {blocks!r}", loc)
    return blocks


def _blocked_width(w, attrs, loc):
    """The output width of x * W[type] (W [T, B*D, M]): B*M."""
    blocks = _blocks(attrs, loc)
    if blocks == 1:
        return w.shape[2]
    _need(isinstance(w.shape[1], int) and isinstance(w.shape[2], int) and w.shape[1] % blocks == 0,
          f"a weight of {blocks} diagonal blocks needs numeric sizes, its rows a multiple of {blocks}; "
          f"got {w.describe()}", loc)
    return blocks * w.shape[2]


def _per_block(width, attrs, loc):
    """A width of the output side of a blocked product (B*M) back to one block's M."""
    blocks = _blocks(attrs, loc)
    if blocks == 1:
        return width
    _need(isinstance(width, int) and width % blocks == 0,
          f"a product of {blocks} diagonal blocks needs a width that is a multiple of {blocks}, got {width}", loc)
    return width // blocks


def _typed_input(x, domain: str, rows, loc) -> None:
    """``x`` must be rows of the kind ``domain`` types (edges for etype), as wide as the weight's rows."""
    want = "edge" if domain == "etype" else "node"
    _need(x.assoc == want, f"a weight sliced by {domain} needs {want} input, got {x.assoc}", loc)
    _need(_same_width(x.width, rows), f"typed linear: input width {x.width} does not match weight rows {rows}", loc)


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
    scaled = attrs.get("norm") == "node_scale"
    if scaled:
        _need(len(ins) in (2, 3), "aggregate norm=node_scale needs its node scale as the last input", loc)
        s = ins[-1]
        _need(s.assoc == "node" and s.width == 1, f"a node scale must be node [1], got {s.describe()}", loc)
    if len(ins) == (3 if scaled else 2):
        w = ins[1]
        _need(w.assoc == "edge" and w.width == 1, f"edge weights must be edge [1], got {w.describe()}", loc)
    _need(len(ins) <= (3 if scaled else 2), "aggregate takes rows, optional edge weights and a node scale", loc)
    _need(attrs.get("reduce") in REDUCTIONS, f"unknown reduction {attrs.get('reduce')!r}", loc)
    _need(attrs.get("norm", "none") in AGGREGATE_NORMS,
          "aggregate norm must be none, gcn, gcn_weighted or node_scale", loc)
    _need(attrs.get("direction", "in") in ("in", "out"), "aggregate direction must be in or out", loc)
    _need(attrs.get("norm", "none") == "none" or attrs.get("reduce") == "sum",
          f"aggregate norm={attrs.get('norm')} needs reduce=sum", loc)
    _need(attrs.get("norm") != "gcn_weighted" or len(ins) == 2,
          "aggregate norm=gcn_weighted needs the edge weights its degrees sum", loc)
    if attrs.get("reduce") == "max":
        _need(len(ins) == 1, "aggregate reduce=max takes no edge weights", loc)
        _need(attrs.get("direction", "in") == "in", "aggregate reduce=max only runs over in-edges", loc)
    return "node", x.shape, "f32"


def _graph_scalar(ins, attrs, loc):
    kind = attrs.get("kind")
    _need(kind in GRAPH_SCALARS, f"unknown graph scalar {kind!r}", loc)
    return GRAPH_SCALARS[kind], (1,), "f32"


def _broadcast(a: Value, b: Value, loc, what: str):
    if a.assoc == "param" and _rows(b):
        a, b = b, a
    if _rows(a) and b.assoc == "param":
        # A weight of width 1 is a learned scalar: it scales every feature (GIN's eps, a gate).
        _need(len(b.shape) == 1 and (a.width == 1 or b.width == 1 or _same_width(a.width, b.width)),
              f"{what}: cannot broadcast {b.describe()} over {a.describe()}", loc)
        return a.assoc, (a.shape if a.width != 1 else b.shape)
    if a.assoc == "scalar" or b.assoc == "scalar":
        other = b if a.assoc == "scalar" else a
        return other.assoc, other.shape
    _need(a.assoc == b.assoc, f"{what}: cannot combine a {a.assoc} value with a {b.assoc} value", loc)
    if a.assoc == "param":
        # No weight-by-weight broadcasting: its gradient would need a reduction over a weight.
        _need(_same_width(a.width, b.width), f"{what}: weights of widths {a.width} and {b.width} "
                                             f"cannot be combined", loc)
        return a.assoc, a.shape
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


def _math(ins, attrs, loc):
    (x,) = ins
    _need(_rows(x), f"elementwise math needs node or edge rows, got {x.describe()}", loc)
    _need(isinstance(attrs.get("c", 0.0), float), "the constant of pow/shift must be a float", loc)
    return x.assoc, x.shape, "f32"


def _row_softmax(ins, attrs, loc):
    (x,) = ins
    _need(_rows(x), f"softmax over features needs node or edge rows, got {x.describe()}", loc)
    return x.assoc, x.shape, "f32"


def _bias_add(ins, attrs, loc):
    x, b = ins
    _need(b.assoc == "param" and len(b.shape) == 1, f"bias must be a [M] weight, got {b.describe()}", loc)
    _need(_same_width(x.width, b.width), f"bias width {b.width} does not match {x.width}", loc)
    return x.assoc, x.shape, "f32"


def _head_count(attrs, loc, what) -> int:
    heads = attrs.get("heads", 1)
    _need(isinstance(heads, int) and not isinstance(heads, bool) and heads >= 1,
          f"{what}: heads must be a positive integer, got {heads!r}", loc)
    return heads


def _heads(x: Value, attrs, loc, what) -> int:
    """The head count of a per-head op: a positive int dividing ``x``'s width (features are
    laid out head-major, ``[heads, width / heads]``, so concatenating heads is free)."""
    heads = _head_count(attrs, loc, what)
    _need(dim_div(x.width, heads) is not None, f"{what}: width {x.width} is not a multiple of {heads} heads", loc)
    return heads


def _dot(ins, attrs, loc):
    a, b = ins
    _need(a.assoc == b.assoc or b.assoc == "param",
          f"dot: cannot combine a {a.assoc} value with a {b.assoc} value", loc)
    _need(_same_width(a.width, b.width), f"dot: widths {a.width} and {b.width} differ", loc)
    return a.assoc, (_heads(a, attrs, loc, "dot"),), "f32"


def _head_mul(ins, attrs, loc):
    x, s = ins
    heads = _heads(x, attrs, loc, "head_mul")
    _need(_rows(s) and s.width == heads,
          f"head_mul needs one value per head ({heads}) per row, got {s.describe()}", loc)
    _need(x.assoc in (s.assoc, "param"), f"head_mul: cannot combine {x.describe()} with {s.describe()}", loc)
    _need(x.assoc != "param" or len(x.shape) == 1 and x.domain is None,
          f"head_mul needs a vector weight, got {x.describe()}", loc)
    return s.assoc, (x.width,), "f32"


def _head_mean(ins, attrs, loc):
    (x,) = ins
    _need(_rows(x), f"head_mean needs a node or edge value, got {x.describe()}", loc)
    heads = _heads(x, attrs, loc, "head_mean")
    return x.assoc, (dim_div(x.width, heads),), "f32"


def _basis_combine(ins, attrs, loc):
    a, v = ins
    _need(a.assoc == "param" and len(a.shape) == 2 and a.domain in ("etype", "ntype"),
          f"basis coefficients must be a typed [T,B] weight, got {a.describe()}", loc)
    _need(v.assoc == "param" and len(v.shape) == 3 and v.domain is None,
          f"bases must be an untyped [B,K,M] weight, got {v.describe()}", loc)
    _need(_same_width(a.shape[1], v.shape[0]),
          f"basis combination: {a.shape[1]} coefficients per type but {v.shape[0]} bases", loc)
    return "param", (a.shape[0], v.shape[1], v.shape[2]), "f32", a.domain


def _layer_standardize(ins, attrs, loc):
    (x,) = ins
    _need(_rows(x), f"layer norm needs a node or edge value, got {x.describe()}", loc)
    _need(attrs.get("eps", 0) > 0, "layer norm needs eps > 0", loc)
    return x.assoc, x.shape, "f32"


def _batch_standardize(ins, attrs, loc):
    x, mean, var = ins
    _need(x.assoc == "node", f"batch norm needs a node value, got {x.describe()}", loc)
    for v in (mean, var):
        _need(v.assoc == "param" and len(v.shape) == 1 and _same_width(v.width, x.width),
              f"batch norm statistics must be [{x.width}] weights, got {v.describe()}", loc)
    _need(attrs.get("eps", 0) > 0 and 0 <= attrs.get("momentum", -1) <= 1,
          "batch norm needs eps > 0 and momentum in [0, 1]", loc)
    return "node", x.shape, "f32"


def _edge_softmax(ins, attrs, loc):
    (s,) = ins
    _need(s.assoc == "edge", f"edge softmax needs an edge value, got {s.describe()}", loc)
    return "edge", s.shape, "f32"


def _concat(ins, attrs, loc):
    assoc = ins[0].assoc
    _need(all(v.assoc == assoc for v in ins), "concat: all parts must have the same association", loc)
    total = 0
    for v in ins:
        total = dim_add(total, v.width)
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
    classes = attrs.get("classes", logits.width)
    _need(_same_width(logits.width, classes),
          f"the loss needs one logit per class ({classes}), but the output has width {logits.width}", loc)
    return "scalar", (), "f32"


def _link_inputs(ins, attrs, loc, what):
    z, rel = ins
    _need(z.assoc == "node" and len(z.shape) == 1, f"{what}: z must be a node value [H]", loc)
    _need(rel.assoc == "param" and rel.domain == "etype" and len(rel.shape) == 2,
          f"{what}: R must be a per-edge-type weight [etypes, H]", loc)
    _need(_same_width(z.width, rel.shape[1]), f"{what}: z has width {z.width}, R rows {rel.shape[1]}", loc)
    reg = attrs.get("regularization", 0.0)
    _need(isinstance(reg, float) and reg >= 0.0, f"{what}: regularization must be a float >= 0", loc)
    return z, rel


def _link_loss(ins, attrs, loc):
    _link_inputs(ins, attrs, loc, "link_loss")
    return "scalar", (), "f32"


_RULES = {
    "linear": _linear, "typed_linear": _typed_linear, "typed_param": _typed_param, "gather": _gather, "scatter": _scatter,
    "aggregate": _aggregate, "graph_scalar": _graph_scalar, "bias_add": _bias_add,
    "scale": _unary, "dot": _dot, "head_mul": _head_mul, "head_mean": _head_mean,
    "basis_combine": _basis_combine, "layer_standardize": _layer_standardize,
    "batch_standardize": _batch_standardize, "edge_softmax": _edge_softmax, "concat": _concat,
    "dropout": _dropout, "cross_entropy": _cross_entropy, "link_loss": _link_loss,
    **{op: _binary for op in BINARY}, **{op: _unary for op in UNARY},
    **{op: _math for op in MATH_FUNCTIONS}, **{op: _row_softmax for op in ROW_SOFTMAXES},
}

FORWARD_OPCODES = tuple(_RULES)


# -- ops introduced by passes and by autodiff --------------------------------------------
def _typed_domain(w: Value) -> str:
    return "edge" if w.domain == "etype" else "node"


def _typed_rows(g: Value, attrs, loc, what):
    dom = attrs.get("domain")
    _need(dom in ("etype", "ntype"), f"{what} needs domain etype or ntype, got {dom!r}", loc)
    want = "edge" if dom == "etype" else "node"
    _need(g.assoc == want, f"{what} over {dom} needs {want} rows, got {g.describe()}", loc)
    types = attrs.get("types")
    _need(isinstance(types, (int, str)) and not isinstance(types, bool),
          f"{what} needs a type count 'types'", loc)
    return dom, types


def _param_slice(ins, attrs, loc):
    (w,) = ins
    _need(w.assoc == "param" and len(w.shape) == 2 and w.domain is None,
          f"param_slice needs an untyped [K,M] weight, got {w.describe()}", loc)
    start, stop = attrs.get("start"), attrs.get("stop")
    _need(start is not None and stop is not None, "param_slice needs start and stop", loc)
    return "param", (_extent(start, stop), w.shape[1]), "f32"


def _extent(start, stop):
    _need(start is not None and stop is not None, "slice needs start and stop")
    if isinstance(start, int) and isinstance(stop, int):
        _need(0 <= start < stop, f"empty or negative slice [{start}, {stop})")
        return stop - start
    return dim_sub(stop, start)


def _matvec(ins, attrs, loc):
    w, a = ins
    _need(w.assoc == "param" and a.assoc == "param", "matvec multiplies two weights", loc)
    if w.domain is None:
        _need(len(w.shape) == 2 and len(a.shape) == 1 and a.domain is None,
              f"matvec needs [K,M] and [M], got {w.describe()} and {a.describe()}", loc)
        _need(_same_width(w.shape[1], a.shape[0]), "matvec: inner widths differ", loc)
        return "param", (w.shape[0],), "f32", None
    _need(len(w.shape) == 3 and len(a.shape) == 2 and a.domain == w.domain,
          f"typed matvec needs [T,K,M] and [T,M] over one domain, got {w.describe()} and "
          f"{a.describe()}", loc)
    _need(_same_width(w.shape[2], a.shape[1]), "matvec: inner widths differ", loc)
    return "param", (w.shape[0], w.shape[1]), "f32", w.domain


def _matmul_nt(ins, attrs, loc):
    g, w = ins
    _need(w.assoc == "param" and len(w.shape) == 2 and w.domain is None,
          f"matmul_nt needs an untyped [K,M] weight, got {w.describe()}", loc)
    _need(_same_width(g.width, w.shape[1]), f"matmul_nt: width {g.width} vs weight {w.describe()}", loc)
    if g.assoc == "param":
        return "param", (g.shape[0], w.shape[0]), "f32"
    return g.assoc, (w.shape[0],), "f32"


def _matmul_tn(ins, attrs, loc):
    x, g = ins
    _need(x.assoc == g.assoc, f"matmul_tn: {x.describe()} and {g.describe()} have different rows", loc)
    return "param", (x.width if x.assoc != "param" else x.shape[1], g.width), "f32"


def _typed_matmul_nt(ins, attrs, loc):
    g, w = ins
    _need(w.assoc == "param" and len(w.shape) == 3 and w.domain in ("etype", "ntype"),
          f"typed_matmul_nt needs a [T,K,M] typed weight, got {w.describe()}", loc)
    _need(g.assoc == _typed_domain(w), f"typed_matmul_nt: rows {g.assoc} vs {w.domain}", loc)
    _need(_same_width(g.width, _blocked_width(w, attrs, loc)), f"typed_matmul_nt: width {g.width} vs weight "
          f"{w.describe()}", loc)
    return g.assoc, (w.shape[1],), "f32"


def _typed_matmul_tn(ins, attrs, loc):
    x, g = ins
    dom, types = _typed_rows(g, attrs, loc, "typed_matmul_tn")
    _need(x.assoc == g.assoc, "typed_matmul_tn: operands have different rows", loc)
    return "param", (types, x.width, _per_block(g.width, attrs, loc)), "f32", dom


def _typed_row_sum(ins, attrs, loc):
    (g,) = ins
    dom, types = _typed_rows(g, attrs, loc, "typed_row_sum")
    return "param", (types, g.width), "f32", dom


def _row_sum(ins, attrs, loc):
    (g,) = ins
    _need(_rows(g), f"row_sum needs node or edge rows, got {g.describe()}", loc)
    return "param", (g.width,), "f32"


def _feature_sum(ins, attrs, loc):
    (g,) = ins
    _need(_rows(g), f"feature_sum needs node or edge rows, got {g.describe()}", loc)
    return g.assoc, (1,), "f32"


def _act_grad(ins, attrs, loc):
    g, y = ins
    _need(attrs.get("act") in ACTIVATIONS, f"act_grad: unknown activation {attrs.get('act')!r}", loc)
    _need(g.assoc == y.assoc and _same_width(g.width, y.width), "act_grad: g and y differ", loc)
    return g.assoc, g.shape, "f32"


def _math_grad(ins, attrs, loc):
    g, x = ins
    _need(attrs.get("fn") in MATH_FUNCTIONS, f"math_grad: unknown function {attrs.get('fn')!r}", loc)
    _need(g.assoc == x.assoc and _same_width(g.width, x.width), "math_grad: g and x differ", loc)
    return g.assoc, g.shape, "f32"


def _softmax_grad(ins, attrs, loc):
    g, y = ins
    _need(isinstance(attrs.get("log"), bool), "softmax_grad needs 'log'", loc)
    _need(g.assoc == y.assoc and _same_width(g.width, y.width), "softmax_grad: g and y differ", loc)
    return g.assoc, g.shape, "f32"


def _head_repeat(ins, attrs, loc):
    (g,) = ins
    _need(_rows(g), f"head_repeat needs a node or edge value, got {g.describe()}", loc)
    return g.assoc, (dim_mul(g.width, _head_count(attrs, loc, "head_repeat")),), "f32"


def _basis_coef_grad(ins, attrs, loc):
    g, v = ins
    _need(g.assoc == "param" and len(g.shape) == 3 and g.domain is not None and v.assoc == "param"
          and len(v.shape) == 3, f"basis_coef_grad needs [T,K,M] and [B,K,M] weights, got {g.describe()} "
          f"and {v.describe()}", loc)
    return "param", (g.shape[0], v.shape[0]), "f32", g.domain


def _basis_grad(ins, attrs, loc):
    a, g = ins
    _need(a.assoc == "param" and len(a.shape) == 2 and g.assoc == "param" and len(g.shape) == 3,
          f"basis_grad needs [T,B] and [T,K,M] weights, got {a.describe()} and {g.describe()}", loc)
    return "param", (a.shape[1], g.shape[1], g.shape[2]), "f32"


def _standardize_grad(ins, attrs, loc):
    g, x, y = ins
    _need(_rows(g) and g.assoc == x.assoc == y.assoc, "standardize gradients need rows", loc)
    return g.assoc, g.shape, "f32"


_layer_standardize_grad = _batch_standardize_grad = _standardize_grad


def _edge_softmax_grad(ins, attrs, loc):
    g, y = ins
    _need(g.assoc == "edge" and y.assoc == "edge", "edge_softmax_grad needs edge values", loc)
    return "edge", g.shape, "f32"


def _aggregate_max_grad(ins, attrs, loc):
    g, x, y = ins
    _need(g.assoc == x.assoc == y.assoc == "node", "aggregate_max_grad needs node values", loc)
    return "node", x.shape, "f32"


def _scatter_max_grad(ins, attrs, loc):
    g, m, y = ins
    _need(g.assoc == "node" and m.assoc == "edge" and y.assoc == "node",
          "scatter_max_grad needs (node grad, edge messages, node result)", loc)
    _need(attrs.get("end", "dst") in ("src", "dst"), "scatter end must be src or dst", loc)
    return "edge", m.shape, "f32"


def _dropout_grad(ins, attrs, loc):
    (g,) = ins
    _need(isinstance(attrs.get("site"), int), "dropout_grad needs the forward dropout 'site'", loc)
    _dropout(ins, attrs, loc)
    return g.assoc, g.shape, "f32"


def _cross_entropy_grad(ins, attrs, loc):
    logits, labels = ins
    _need(logits.assoc == "node" and labels.assoc == "node", "cross_entropy_grad needs node values", loc)
    return "node", logits.shape, "f32"


def _link_loss_grad(ins, attrs, loc):
    z, _ = _link_inputs(ins, attrs, loc, "link_loss_grad")
    return "node", z.shape, "f32"


def _link_loss_rel_grad(ins, attrs, loc):
    _, rel = _link_inputs(ins, attrs, loc, "link_loss_rel_grad")
    return "param", rel.shape, "f32", rel.domain


def _slice(ins, attrs, loc):
    (g,) = ins
    _need(_rows(g), f"slice needs node or edge rows, got {g.describe()}", loc)
    return g.assoc, (_extent(attrs.get("start"), attrs.get("stop")),), "f32"


def _row_concat(ins, attrs, loc):
    _need(ins and all(v.assoc == "param" and len(v.shape) == 2 for v in ins),
          "row_concat stacks [K,M] weights", loc)
    total = 0
    for v in ins:
        total = dim_add(total, v.shape[0])
    return "param", (total, ins[0].shape[1]), "f32"


def _outer(ins, attrs, loc):
    g, a = ins
    _need(g.assoc == a.assoc == "param" and g.domain == a.domain, "outer multiplies two weights", loc)
    if g.domain is None:
        return "param", (g.shape[0], a.shape[0]), "f32", None
    return "param", (g.shape[0], g.shape[1], a.shape[1]), "f32", g.domain


def _typed_linear_bases(ins, attrs, loc):
    x, a, v = ins
    _basis_combine([a, v], attrs, loc)
    _typed_input(x, a.domain, v.shape[1], loc)
    return x.assoc, (v.shape[2],), "f32"


def _typed_linear_bases_coef_grad(ins, attrs, loc):
    x, g, v = ins
    dom, types = _typed_rows(g, attrs, loc, "typed_linear_bases_coef_grad")
    _need(x.assoc == g.assoc and v.assoc == "param" and len(v.shape) == 3,
          f"typed_linear_bases_coef_grad needs rows, their gradient and [B,K,M] bases, got {x.describe()}, "
          f"{g.describe()} and {v.describe()}", loc)
    return "param", (types, v.shape[0]), "f32", dom


def _typed_linear_bases_grad(ins, attrs, loc):
    x, a, g = ins
    _need(x.assoc == g.assoc and a.assoc == "param" and len(a.shape) == 2 and a.domain is not None,
          f"typed_linear_bases_grad needs rows, [T,B] coefficients and the rows' gradient, got {x.describe()}, "
          f"{a.describe()} and {g.describe()}", loc)
    return "param", (a.shape[1], x.width, g.width), "f32"


def _matvec_t(ins, attrs, loc):
    w, g = ins
    _need(w.assoc == g.assoc == "param", "matvec_t multiplies two weights", loc)
    if w.domain is None:
        return "param", (w.shape[1],), "f32", None
    return "param", (w.shape[0], w.shape[2]), "f32", w.domain


EDGE_TYPED_LAYOUTS = ("compact", "edge")


def _edge_typed_attrs(attrs, loc, what):
    _need(attrs.get("end") in ("src", "dst"), f"{what}: end must be src or dst", loc)
    _need(attrs.get("layout") in EDGE_TYPED_LAYOUTS,
          f"{what}: layout must be one of {', '.join(EDGE_TYPED_LAYOUTS)}, got {attrs.get('layout')!r}", loc)


def _edge_typed_weight(w, loc, what):
    _need(w.assoc == "param" and len(w.shape) == 3 and w.domain == "etype",
          f"{what} needs a [T,K,M] weight per edge type, got {w.describe()}", loc)


def _edge_typed_linear(ins, attrs, loc):
    x, w = ins
    _edge_typed_attrs(attrs, loc, "edge_typed_linear")
    _edge_typed_weight(w, loc, "edge_typed_linear")
    _need(x.assoc == "node", f"edge_typed_linear reads node rows, got {x.describe()}", loc)
    _need(_same_width(x.width, w.shape[1]),
          f"edge_typed_linear: input width {x.width} does not match weight rows {w.shape[1]}", loc)
    return "edge", (_blocked_width(w, attrs, loc),), "f32"


def _edge_typed_linear_input_grad(ins, attrs, loc):
    g, w = ins
    _edge_typed_attrs(attrs, loc, "edge_typed_linear_input_grad")
    _edge_typed_weight(w, loc, "edge_typed_linear_input_grad")
    _need(g.assoc == "edge" and _same_width(g.width, _blocked_width(w, attrs, loc)),
          f"edge_typed_linear_input_grad needs edge rows as wide as the weight's columns, got {g.describe()}", loc)
    return "node", (w.shape[1],), "f32"


def _edge_typed_linear_weight_grad(ins, attrs, loc):
    x, g = ins
    _edge_typed_attrs(attrs, loc, "edge_typed_linear_weight_grad")
    _need(x.assoc == "node" and g.assoc == "edge",
          f"edge_typed_linear_weight_grad needs node rows and edge gradients, got {x.describe()} and "
          f"{g.describe()}", loc)
    types = attrs.get("types")
    _need(isinstance(types, (int, str)) and not isinstance(types, bool),
          "edge_typed_linear_weight_grad needs a type count 'types'", loc)
    return "param", (types, x.width, _per_block(g.width, attrs, loc)), "f32", "etype"


PASS_OPCODES = ("param_slice", "matvec", "typed_linear_bases", "edge_typed_linear")
BACKWARD_OPCODES = ("matmul_nt", "matmul_tn", "typed_matmul_nt", "typed_matmul_tn", "typed_row_sum",
                    "row_sum", "feature_sum", "head_repeat", "act_grad", "math_grad", "softmax_grad", "edge_softmax_grad",
                    "aggregate_max_grad", "scatter_max_grad", "dropout_grad",
                    "cross_entropy_grad", "slice", "row_concat", "outer", "matvec_t", "basis_coef_grad",
                    "basis_grad", "layer_standardize_grad", "batch_standardize_grad",
                    "link_loss_grad", "link_loss_rel_grad", "typed_linear_bases_coef_grad",
                    "typed_linear_bases_grad", "edge_typed_linear_input_grad", "edge_typed_linear_weight_grad")


def register(opcode: str, rule) -> None:
    """Add an opcode with its shape rule ``rule(inputs, attrs, loc) -> (assoc, shape, dtype[, domain])``."""
    _RULES[opcode] = rule


def opcodes() -> tuple:
    """Every registered opcode."""
    return tuple(_RULES)


for _name in PASS_OPCODES + BACKWARD_OPCODES:
    register(_name, globals()["_" + _name])


class Builder:
    """Appends ops to a program's forward list with shape inference (used by lowering)."""

    def __init__(self, program, ops=None):
        self.program = program
        self.ops = program.forward if ops is None else ops

    def emit(self, opcode: str, *inputs: Value, loc=None, name: str = "", **attrs) -> Value:
        assoc, shape, dtype, domain = infer_full(opcode, list(inputs), attrs, loc)
        out = self.program.new_value(assoc, shape, dtype, name, domain)
        self.ops.append(Op(opcode, list(inputs), out, dict(attrs), loc))
        return out
