"""Small model programs built with the IR Builder, the way the front end expands directives.

Each function returns an unbound :class:`Program` (symbolic ``F``/``C``/``etypes``/``ntypes``;
featureless programs use ``N`` for the feature width).  The widths are small so that whole
models can be checked by finite differences.
"""
from __future__ import annotations

from morphgen.ir_core import dim_mul
from morphgen.ir import Param, Program
from morphgen.ir_ops import Builder


class ModelBuilder:
    """A Builder plus helpers for inputs, params and the loss."""

    def __init__(self, name: str, featureless: bool = False, feature_width="F"):
        self.program = Program(name)
        self.b = Builder(self.program)
        self.program.featureless = featureless
        width = "N" if featureless else feature_width
        self.x = self.program.new_value("node", (width,), name="x")
        self.y = self.program.new_value("node", (1,), "i64", name="y")
        self.program.inputs = {"features": self.x, "labels": self.y}

    def param(self, name, shape, init="glorot", domain=None, weight_decay=True, trainable=True):
        v = self.program.new_value("param", tuple(shape), name=name, domain=domain)
        self.program.params.append(Param(name, v, init, weight_decay, trainable))
        return v

    def emit(self, opcode, *inputs, **attrs):
        return self.b.emit(opcode, *inputs, **attrs)

    def activation(self, h, act):
        if act is None:
            return h
        if act == "leaky_relu":
            return self.emit("leaky_relu", h, alpha=0.2)
        if act == "elu":
            return self.emit("elu", h, alpha=1.0)
        return self.emit(act, h)

    def finish(self, logits) -> Program:
        self.program.logits = logits
        self.program.loss = self.emit("cross_entropy", logits, self.y)
        return self.program

    def finish_link(self, z, rel, regularization=0.0) -> Program:
        """A link-prediction program: DistMult on node embeddings ``z``, no labels."""
        del self.program.inputs["labels"]
        self.program.task = "link"
        self.program.logits = z
        self.program.loss = self.emit("link_loss", z, rel, regularization=regularization)
        return self.program


def _widths(hidden, layers):
    return ["F"] + [hidden] * (layers - 1) + ["C"]


def gcn(hidden=16, layers=2, dropout=0.5, featureless=False, norm="gcn") -> Program:
    """Kipf & Welling: dropout -> linear -> aggregate(sum, gcn, self loops) -> bias -> act."""
    m = ModelBuilder("gcn", featureless)
    h = m.x
    widths = _widths(hidden, layers)
    if featureless:
        widths[0] = "N"
    for layer in range(layers):
        w = m.param(f"layer{layer}.W", (widths[layer], widths[layer + 1]))
        b = m.param(f"layer{layer}.b", (widths[layer + 1],), init="zeros")
        if dropout:
            h = m.emit("dropout", h, p=float(dropout))
        z = m.emit("linear", h, w)
        if norm == "gcn":
            a = m.emit("aggregate", z, reduce="sum", norm="gcn", self_loops=True)
        else:
            a = m.emit("aggregate", z, reduce="mean", self_loops=True)
        h = m.activation(m.emit("bias_add", a, b), "relu" if layer < layers - 1 else None)
    return m.finish(h)


def gcn_written_out(hidden=16, weighted=False) -> Program:
    """GCN with its normalisation written out, as the language lowers ``examples/gcn_weighted.mp``:
    s = rsqrt(d + 1) with d the in-degree (or the in-edges' weights summed), and per layer
    s * (Sum(e: e.src.z * s [* e.edge_weight]) + z * s) + b.  fold_node_scales makes each layer one
    aggregate; the interpreter runs the ops as written."""
    m = ModelBuilder("gcn_written_out")
    if weighted:
        weights = m.emit("graph_scalar", kind="edge_weight")
        degree = m.emit("scatter", weights, reduce="sum", end="dst")
    else:
        degree = m.emit("graph_scalar", kind="in_degree")
    scale = m.emit("rsqrt", m.emit("shift", degree, c=1.0))
    h = m.x
    widths = _widths(hidden, 2)
    for layer in range(2):
        w = m.param(f"layer{layer}.W", (widths[layer], widths[layer + 1]))
        b = m.param(f"layer{layer}.b", (widths[layer + 1],), init="zeros")
        z = m.emit("mul", m.emit("linear", h, w), scale)
        messages = m.emit("gather", z, end="src")
        if weighted:
            messages = m.emit("mul", messages, weights)
        total = m.emit("add", m.emit("scatter", messages, reduce="sum", end="dst"), z)
        h = m.activation(m.emit("bias_add", m.emit("mul", total, scale), b), "relu" if layer == 0 else None)
    return m.finish(h)


def gcn_message_passing(hidden=16) -> Program:
    """GCN as message passing writes it (PyG's gcn_norm): n = rsqrt(in_degree + 1), per-edge
    coefficients c = n_src * n_dst, and per layer Sum(e: e.src.z * e.c) + z * n * n + b.
    fold_edge_normalisation makes each layer one aggregate; the interpreter runs the ops as written."""
    m = ModelBuilder("gcn_message_passing")
    scale = m.emit("rsqrt", m.emit("shift", m.emit("graph_scalar", kind="in_degree"), c=1.0))
    coefficients = m.emit("mul", m.emit("gather", scale, end="src"), m.emit("gather", scale, end="dst"))
    h = m.x
    widths = _widths(hidden, 2)
    for layer in range(2):
        w = m.param(f"layer{layer}.W", (widths[layer], widths[layer + 1]))
        b = m.param(f"layer{layer}.b", (widths[layer + 1],), init="zeros")
        z = m.emit("linear", h, w)
        messages = m.emit("mul", m.emit("gather", z, end="src"), coefficients)
        own = m.emit("mul", m.emit("mul", z, scale), scale)
        total = m.emit("add", m.emit("scatter", messages, reduce="sum", end="dst"), own)
        h = m.activation(m.emit("bias_add", total, b), "relu" if layer == 0 else None)
    return m.finish(h)


def sage(reduce="mean", hidden=16, layers=2, dropout=0.0) -> Program:
    """GraphSAGE: linear(aggregate(h), Wn) + linear(h, Ws) + b, act."""
    m = ModelBuilder(f"sage_{reduce}")
    h = m.x
    widths = _widths(hidden, layers)
    for layer in range(layers):
        wn = m.param(f"layer{layer}.Wn", (widths[layer], widths[layer + 1]))
        ws = m.param(f"layer{layer}.Ws", (widths[layer], widths[layer + 1]))
        b = m.param(f"layer{layer}.b", (widths[layer + 1],), init="zeros")
        if dropout:
            h = m.emit("dropout", h, p=float(dropout))
        n = m.emit("aggregate", h, reduce=reduce)
        out = m.emit("add", m.emit("linear", n, wn), m.emit("linear", h, ws))
        h = m.activation(m.emit("bias_add", out, b), "relu" if layer < layers - 1 else None)
    return m.finish(h)


def tag(hidden=16, extra_reader=False) -> Program:
    """TAGConv with K = 2 hops, one layer: h0 W0 + h1 W1 + h2 W2, h_k the mean over in-neighbours of
    h_(k-1).  The first hop has two readers: its own product and the second hop.  ``extra_reader``:
    the first hop also feeds the output directly (a reader that is not a product)."""
    m = ModelBuilder("tag")
    ws = [m.param(f"W{k}", ("F", hidden)) for k in range(3)]
    h1 = m.emit("aggregate", m.x, reduce="mean")
    h2 = m.emit("aggregate", h1, reduce="mean")
    out = m.emit("add", m.emit("add", m.emit("linear", m.x, ws[0]), m.emit("linear", h1, ws[1])),
                 m.emit("linear", h2, ws[2]))
    if extra_reader:
        out = m.emit("add", out, m.emit("linear", m.emit("relu", h1), ws[1]))
    wo = m.param("Wo", (hidden, "C"))
    return m.finish(m.emit("linear", m.emit("relu", out), wo))


def gin(hidden=16, layers=2) -> Program:
    """GIN-0: MLP(h + sum of in-neighbours), MLP = linear -> bias -> relu -> linear -> bias."""
    m = ModelBuilder("gin")
    h = m.x
    widths = _widths(hidden, layers)
    for layer in range(layers):
        w1 = m.param(f"layer{layer}.W1", (widths[layer], widths[layer + 1]))
        b1 = m.param(f"layer{layer}.b1", (widths[layer + 1],), init="zeros")
        w2 = m.param(f"layer{layer}.W2", (widths[layer + 1], widths[layer + 1]))
        b2 = m.param(f"layer{layer}.b2", (widths[layer + 1],), init="zeros")
        s = m.emit("add", h, m.emit("aggregate", h, reduce="sum"))
        t = m.emit("relu", m.emit("bias_add", m.emit("linear", s, w1), b1))
        out = m.emit("bias_add", m.emit("linear", t, w2), b2)
        h = m.activation(out, "relu" if layer < layers - 1 else None)
    return m.finish(h)


def gat(hidden=8, layers=2) -> Program:
    """Single-head GAT over in-neighbours (no added self loops)."""
    m = ModelBuilder("gat")
    h = m.x
    widths = _widths(hidden, layers)
    for layer in range(layers):
        k, o = widths[layer], widths[layer + 1]
        w = m.param(f"layer{layer}.W", (k, o))
        a_src = m.param(f"layer{layer}.a_src", (o, 1))
        a_dst = m.param(f"layer{layer}.a_dst", (o, 1))
        b = m.param(f"layer{layer}.b", (o,), init="zeros")
        z = m.emit("linear", h, w)
        ss = m.emit("linear", z, a_src)
        sd = m.emit("linear", z, a_dst)
        s = m.emit("leaky_relu", m.emit("add", m.emit("gather", ss, end="src"),
                                         m.emit("gather", sd, end="dst")), alpha=0.2)
        al = m.emit("edge_softmax", s)
        msg = m.emit("mul", m.emit("gather", z, end="src"), al)
        out = m.emit("bias_add", m.emit("scatter", msg, reduce="sum"), b)
        h = m.activation(out, "elu" if layer < layers - 1 else None)
    return m.finish(h)


def gat_heads(hidden=4, heads=3, out_heads=2, attention_dropout=0.0) -> Program:
    """Two-layer multi-head GAT: hidden heads concatenated, output heads averaged."""
    m = ModelBuilder("gat_heads")
    h = m.x
    for layer, (k, o, nh) in enumerate([("F", hidden, heads), (hidden * heads, "C", out_heads)]):
        width = dim_mul(o, nh)
        w = m.param(f"layer{layer}.W", (k, width))
        z = m.emit("linear", h, w)
        ss = m.emit("dot", z, m.param(f"layer{layer}.a_src", (width,)), heads=nh)
        sd = m.emit("dot", z, m.param(f"layer{layer}.a_dst", (width,)), heads=nh)
        s = m.emit("leaky_relu", m.emit("add", m.emit("gather", ss, end="src"),
                                         m.emit("gather", sd, end="dst")), alpha=0.2)
        al = m.emit("edge_softmax", s)
        if attention_dropout:
            al = m.emit("dropout", al, p=float(attention_dropout))
        msg = m.emit("head_mul", m.emit("gather", z, end="src"), al, heads=nh)
        out = m.emit("scatter", msg, reduce="sum")
        if layer == 1:
            out = m.emit("head_mean", out, heads=nh)
        out = m.emit("bias_add", out, m.param(f"layer{layer}.b", (out.width,), init="zeros"))
        h = m.activation(out, "elu" if layer == 0 else None)
    return m.finish(h)


def normed(hidden=8) -> Program:
    """Batch norm and layer norm, each with its affine weights, around a sum aggregation."""
    m = ModelBuilder("normed")
    h = m.emit("linear", m.x, m.param("W1", ("F", hidden)))
    mean = m.param("bn.running_mean", (hidden,), init="zeros", trainable=False)
    var = m.param("bn.running_var", (hidden,), init="ones", trainable=False)
    h = m.emit("batch_standardize", h, mean, var, eps=1e-5, momentum=0.1)
    h = m.emit("bias_add", m.emit("mul", h, m.param("bn.gamma", (hidden,), init="ones")),
               m.param("bn.beta", (hidden,), init="zeros"))
    h = m.emit("relu", m.emit("aggregate", h, reduce="sum", norm="none", self_loops=True))
    h = m.emit("layer_standardize", m.emit("linear", h, m.param("W2", (hidden, hidden))), eps=1e-5)
    h = m.emit("mul", h, m.param("ln.gamma", (hidden,), init="ones"))
    return m.finish(m.emit("linear", m.emit("tanh", h), m.param("W3", (hidden, "C"))))


def _linear_batch_norm_relu(m, hidden):
    """x W1, batch norm, its affine weights and a relu: (the standardised rows, the relu's output)."""
    h = m.emit("linear", m.x, m.param("W1", ("F", hidden)))
    mean = m.param("bn.running_mean", (hidden,), init="zeros", trainable=False)
    var = m.param("bn.running_var", (hidden,), init="ones", trainable=False)
    y = m.emit("batch_standardize", h, mean, var, eps=1e-5, momentum=0.1)
    h = m.emit("relu", m.emit("bias_add", m.emit("mul", y, m.param("bn.gamma", (hidden,), init="ones")),
                              m.param("bn.beta", (hidden,), init="zeros")))
    return y, h


def normed_relu(hidden=8) -> Program:
    """Batch norm, its affine weights and a relu right after them (GIN's MLP): the relu's backward
    runs inside batch norm's, from the standardised rows it recomputes."""
    m = ModelBuilder("normed_relu")
    _, h = _linear_batch_norm_relu(m, hidden)
    h = m.emit("aggregate", h, reduce="sum", norm="none", self_loops=True)
    return m.finish(m.emit("linear", h, m.param("W2", (hidden, "C"))))


def normed_reread(hidden=8) -> Program:
    """Batch norm whose standardised rows are read again after its affine part (a residual of
    them): the fused forward must still write them."""
    m = ModelBuilder("normed_reread")
    y, h = _linear_batch_norm_relu(m, hidden)
    h = m.emit("add", m.emit("aggregate", h, reduce="sum", norm="none", self_loops=True), y)
    return m.finish(m.emit("linear", h, m.param("W2", (hidden, "C"))))


def rgcn(hidden=16, featureless=True, bases=None) -> Program:
    """R-GCN entity classification: Σ_r Σ_{u->v of type r} x_u W_r / c_{v,r} + x_v S + b; with
    ``bases`` = B, W_r = Σ_b A[r,b] V_b (basis decomposition)."""
    m = ModelBuilder("rgcn", featureless)
    h = m.x
    widths = ["N" if featureless else "F", hidden, "C"]
    for layer in range(2):
        k, o = widths[layer], widths[layer + 1]
        if bases is None:
            w = m.param(f"W{layer + 1}", ("etypes", k, o), domain="etype")
        else:
            w = m.emit("basis_combine", m.param(f"A{layer + 1}", ("etypes", bases), domain="etype"),
                       m.param(f"V{layer + 1}", (bases, k, o)))
        s = m.param(f"S{layer + 1}", (k, o))
        b = m.param(f"b{layer + 1}", (o,), init="zeros")
        msg = m.emit("typed_linear", m.emit("gather", h, end="src"), w)
        msg = m.emit("div", msg, m.emit("graph_scalar", kind="rel_degree"))
        agg = m.emit("scatter", msg, reduce="sum")
        out = m.emit("bias_add", m.emit("add", agg, m.emit("linear", h, s)), b)
        h = m.activation(out, "relu" if layer == 0 else None)
    return m.finish(h)


def rgat(hidden=8) -> Program:
    """RGAT/HGT-like: per-relation W, per-relation attention vectors (typed_param + dot),
    leaky_relu, edge softmax, weighted sum, concat with the node's own state, output linear."""
    m = ModelBuilder("rgat")
    h = m.x
    w = m.param("W", ("etypes", "F", hidden), domain="etype")
    wd = m.param("Wd", ("etypes", "F", hidden), domain="etype")
    a_src = m.param("a_src", ("etypes", hidden), domain="etype")
    a_dst = m.param("a_dst", ("etypes", hidden), domain="etype")
    z = m.emit("typed_linear", m.emit("gather", h, end="src"), w)
    zd = m.emit("typed_linear", m.emit("gather", h, end="dst"), wd)
    s = m.emit("add", m.emit("dot", z, m.emit("typed_param", a_src)),
               m.emit("dot", zd, m.emit("typed_param", a_dst)))
    al = m.emit("edge_softmax", m.emit("leaky_relu", s, alpha=0.2))
    agg = m.emit("scatter", m.emit("mul", z, al), reduce="sum")
    hid = m.emit("elu", agg, alpha=1.0)
    o_cat = m.param("O_cat", (f"{hidden}+F", "C"))
    b = m.param("b", ("C",), init="zeros")
    out = m.emit("linear", m.emit("concat", hid, h), o_cat)
    return m.finish(m.emit("bias_add", out, b))


def typed_attention(hidden=8) -> Program:
    """R-GAT-like with the input features read only through weights (x_src * W[etype] and x * S),
    so that they may stay sparse: messages weighted by a softmax of their dot with a per-type
    vector, summed, plus the node's own projection."""
    m = ModelBuilder("typed_attention")
    z = m.emit("typed_linear", m.emit("gather", m.x, end="src"), m.param("W", ("etypes", "F", hidden), domain="etype"))
    score = m.emit("dot", z, m.emit("typed_param", m.param("a", ("etypes", hidden), domain="etype")))
    agg = m.emit("scatter", m.emit("mul", z, m.emit("edge_softmax", m.emit("leaky_relu", score, alpha=0.2))),
                 reduce="sum")
    h = m.emit("add", m.emit("elu", agg, alpha=1.0), m.emit("linear", m.x, m.param("S", ("F", hidden))))
    return m.finish(m.emit("linear", h, m.param("O", (hidden, "C"))))


def hgt(hidden=8, blocks=1) -> Program:
    """HGT-like single head: per-ntype K/Q/V on nodes, per-etype attention and message
    transforms on edges, scaled dot attention, edge softmax, sum, per-ntype output.  blocks=B:
    the edge transforms are block diagonal, B blocks of hidden/B per edge type (HGTConv's heads)."""
    m = ModelBuilder("hgt")
    h = m.x
    kq = {n: m.param(n, ("ntypes", "F", hidden), domain="ntype") for n in ("Kw", "Qw", "Vw")}
    w_att = m.param("W_att", ("etypes", hidden, hidden // blocks), domain="etype")
    w_msg = m.param("W_msg", ("etypes", hidden, hidden // blocks), domain="etype")
    w_out = m.param("W_out", ("ntypes", hidden, "C"), domain="ntype")
    per_head = {"blocks": blocks} if blocks != 1 else {}
    k = m.emit("typed_linear", h, kq["Kw"])
    q = m.emit("typed_linear", h, kq["Qw"])
    v = m.emit("typed_linear", h, kq["Vw"])
    ke = m.emit("typed_linear", m.emit("gather", k, end="src"), w_att, **per_head)
    score = m.emit("scale", m.emit("dot", ke, m.emit("gather", q, end="dst")), c=hidden ** -0.5)
    al = m.emit("edge_softmax", score)
    msg = m.emit("typed_linear", m.emit("gather", v, end="src"), w_msg, **per_head)
    agg = m.emit("scatter", m.emit("mul", msg, al), reduce="sum")
    out = m.emit("typed_linear", m.emit("add", m.emit("tanh", agg), m.emit("sigmoid", q)), w_out)
    return m.finish(out)


ALL = {"gcn": gcn, "gcn_featureless": lambda: gcn(featureless=True), "sage_mean": lambda: sage("mean"), "sage_max": lambda: sage("max"),
       "gin": gin, "gat": gat, "rgcn": rgcn, "rgat": rgat, "hgt": hgt, "gcn_written_out": gcn_written_out,
       "gcn_message_passing": gcn_message_passing}
