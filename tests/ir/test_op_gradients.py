"""Finite-difference checks of every opcode's forward/backward pair (float64).

Each case feeds a parameter-dependent value ``h`` (node [K]) through one op under test,
then a fixed head (scatter to nodes if needed, linear to C classes, cross entropy).  The
graph is directed and asymmetric, with isolated and zero in-degree nodes.
"""
import numpy as np
import pytest

from morphgen.autodiff import differentiate
from morphgen.ir_ops import opcodes

from .helpers import finite_difference_check, perturbed_params, random_data, random_graph
from .models import ModelBuilder

WIDTHS = (1, 3, 7, 31, 33)
F, C, ETYPES, NTYPES = 4, 3, 3, 2


def _positive(m, v):
    """A value in (1/e, e) everywhere (for divisors)."""
    return m.emit("exp", m.emit("tanh", v))


def _edge_weight(m, h, k):
    wv = m.param("Wv", (k, 1))
    return m.emit("sigmoid", m.emit("linear", m.emit("gather", h, end="src"), wv))


def _agg(**attrs):
    def build(m, h, k):
        return m.emit("aggregate", h, **attrs)
    return build


def _agg_weighted(**attrs):
    def build(m, h, k):
        return m.emit("aggregate", h, _edge_weight(m, h, k), **attrs)
    return build


def _agg_scaled(weighted=False, **attrs):
    """norm=node_scale with a scale that needs no gradient, zero on nodes without in-edges
    (rsqrt(0) = 0), and constant edge weights (weights needing a gradient are refused)."""
    def build(m, h, k):
        scale = m.emit("rsqrt", m.emit("graph_scalar", kind="in_degree"))
        weights = [m.emit("graph_scalar", kind="gcn_norm", self_loops=False)] if weighted else []
        return m.emit("aggregate", h, *weights, scale, reduce="sum", norm="node_scale", **attrs)
    return build


def _scatter(reduce, end):
    def build(m, h, k):
        msg = m.emit("tanh", m.emit("gather", h, end="dst" if end == "src" else "src"))
        return m.emit("scatter", msg, reduce=reduce, end=end)
    return build


def _unary(name, **attrs):
    return lambda m, h, k: m.emit(name, h, **attrs)


def _binary(name, shape_b):
    def build(m, h, k):
        if shape_b == "rows":
            b = m.emit("linear", m.x, m.param("Wb", (F, k)))
        elif shape_b == "width1":
            b = m.emit("linear", m.x, m.param("Wb", (F, 1)))
        else:
            b = m.param("pb", (k,))
        if name == "div":
            b = _positive(m, b) if shape_b != "param" else b
        return m.emit(name, h, b)
    return build


def _on_positive(name, **attrs):
    """A math function whose domain is the positive numbers, fed a value in (1/e, e)."""
    return lambda m, h, k: m.emit(name, _positive(m, h), **attrs)


def _wide(name, **attrs):
    """A function fed a value in (-3, 3), where its curvature lies."""
    return lambda m, h, k: m.emit(name, m.emit("scale", h, c=3.0), **attrs)


def _typed_linear_edge(m, h, k):
    w = m.param("Wt", ("etypes", k, 5), domain="etype")
    return m.emit("typed_linear", m.emit("gather", h, end="src"), w)


def _typed_linear_node(m, h, k):
    w = m.param("Wt", ("ntypes", k, 5), domain="ntype")
    return m.emit("typed_linear", h, w)


def _basis_combine(domain):
    def build(m, h, k):
        types = "etypes" if domain == "etype" else "ntypes"
        w = m.emit("basis_combine", m.param("A", (types, 2), domain=domain), m.param("V", (2, k, 5)))
        rows = m.emit("gather", h, end="src") if domain == "etype" else h
        return m.emit("typed_linear", rows, w)
    return build


def _typed_linear_bases(domain):
    def build(m, h, k):
        types = "etypes" if domain == "etype" else "ntypes"
        rows = m.emit("gather", h, end="src") if domain == "etype" else h
        return m.emit("typed_linear_bases", rows, m.param("A", (types, 2), domain=domain), m.param("V", (2, k, 5)))
    return build


def _edge_typed_linear(end):
    def build(m, h, k):
        w = m.param("W", ("etypes", k, 5), domain="etype")
        return m.emit("edge_typed_linear", h, w, end=end, layout="compact")
    return build


def _blocked(opcode, domain, **attrs):
    """A typed product of 3 diagonal 2 x 4 blocks per type (``blocks``: HGT's per-head relation
    matrices), its input projected to the blocks' 6 columns first."""
    def build(m, h, k):
        types = "etypes" if domain == "etype" else "ntypes"
        w = m.param("Wb", (types, 6, 4), domain=domain)
        rows = m.emit("linear", h, m.param("P", (k, 6)))
        if opcode == "typed_linear" and domain == "etype":
            rows = m.emit("gather", rows, end="src")
        return m.emit(opcode, rows, w, blocks=3, **attrs)
    return build


def _layer_norm(m, h, k):
    return m.emit("layer_standardize", m.emit("scale", h, c=3.0), eps=1e-5)


def _batch_norm(m, h, k):
    mean = m.param("running_mean", (k,), init="zeros", trainable=False)
    var = m.param("running_var", (k,), init="ones", trainable=False)
    return m.emit("batch_standardize", m.emit("scale", h, c=3.0), mean, var, eps=1e-5, momentum=0.1)


def _typed_param(domain):
    def build(m, h, k):
        a = m.param("a", ("etypes" if domain == "etype" else "ntypes", k), domain=domain)
        rows = m.emit("gather", h, end="src") if domain == "etype" else h
        return m.emit("mul", rows, m.emit("typed_param", a))
    return build


def _dot_rows(m, h, k):
    other = m.emit("linear", m.x, m.param("Wb", (F, k)))
    return m.emit("dot", m.emit("gather", h, end="src"), m.emit("gather", other, end="dst"))


def _dot_param(m, h, k):
    return m.emit("dot", h, m.param("a", (k,)))


HEADS, HEAD_DIM = 3, 4


def _per_head(m, h, k, name="Wz"):
    """A node value of HEADS heads of HEAD_DIM features each."""
    return m.emit("linear", h, m.param(name, (k, HEADS * HEAD_DIM)))


def _dot_heads_rows(m, h, k):
    z, other = _per_head(m, h, k), m.emit("linear", m.x, m.param("Wb", (F, HEADS * HEAD_DIM)))
    return m.emit("dot", m.emit("gather", z, end="src"), m.emit("gather", other, end="dst"), heads=HEADS)


def _dot_heads_param(m, h, k):
    return m.emit("dot", _per_head(m, h, k), m.param("a", (HEADS * HEAD_DIM,)), heads=HEADS)


def _head_mul_rows(m, h, k):
    s = m.emit("linear", h, m.param("Ws", (k, HEADS)))
    return m.emit("head_mul", _per_head(m, h, k), s, heads=HEADS)


def _head_mul_param(m, h, k):
    s = m.emit("linear", h, m.param("Ws", (k, HEADS)))
    return m.emit("head_mul", m.param("v", (HEADS * HEAD_DIM,)), s, heads=HEADS)


def _head_mean(m, h, k):
    return m.emit("head_mean", _per_head(m, h, k), heads=HEADS)


def _multi_head_attention(m, h, k):
    """GAT's attention over HEADS heads: per-head scores, edge softmax per head, weighted sum."""
    z = _per_head(m, h, k)
    ss = m.emit("dot", z, m.param("a_src", (HEADS * HEAD_DIM,)), heads=HEADS)
    sd = m.emit("dot", z, m.param("a_dst", (HEADS * HEAD_DIM,)), heads=HEADS)
    s = m.emit("add", m.emit("gather", ss, end="src"), m.emit("gather", sd, end="dst"))
    al = m.emit("edge_softmax", m.emit("leaky_relu", s, alpha=0.2))
    return m.emit("head_mul", m.emit("gather", z, end="src"), al, heads=HEADS)


def _edge_softmax(m, h, k):
    score = m.emit("gather", h, end="src")
    al = m.emit("edge_softmax", score)
    return m.emit("mul", al, m.emit("gather", h, end="dst"))


def _concat(m, h, k):
    other = m.emit("linear", m.x, m.param("Wb", (F, 2)))
    return m.emit("concat", h, other, m.x)


def _dropout(m, h, k):
    return m.emit("dropout", h, p=0.4)


def _graph_scalar(kind, **attrs):
    def build(m, h, k):
        s = m.emit("graph_scalar", kind=kind, **attrs)
        if s.assoc == "edge":
            return m.emit("mul", m.emit("gather", h, end="src"), s)
        return m.emit("mul", h, s)
    return build


def _param_slice(m, h, k):
    w = m.param("Wfull", (k + 2, 4))
    top = m.emit("param_slice", w, start=0, stop=k, group=0, part=0)
    bottom = m.emit("param_slice", w, start=k, stop=k + 2, group=0, part=1)
    other = m.emit("linear", m.x, m.param("Wb", (F, 2)))
    return m.emit("add", m.emit("linear", h, top), m.emit("linear", other, bottom))


def _matvec(m, h, k):
    w = m.param("Wm", (k, 5))
    a = m.param("am", (5,))
    return m.emit("dot", h, m.emit("matvec", w, a))


def _typed_matvec(m, h, k):
    w = m.param("Wm", ("etypes", k, 5), domain="etype")
    a = m.param("am", ("etypes", 5), domain="etype")
    return m.emit("dot", m.emit("gather", h, end="src"), m.emit("typed_param", m.emit("matvec", w, a)))


def _weight_product(m, h, k):
    w = m.param("Wp", (k, 5))
    a = m.param("Ap", (5, 2))
    return m.emit("linear", h, m.emit("linear", w, a))


CASES = {
    "linear": lambda m, h, k: m.emit("linear", h, m.param("W", (k, 5))),
    "typed_linear_edge": _typed_linear_edge,
    "typed_linear_node": _typed_linear_node,
    "layer_norm": _layer_norm,
    "batch_norm": _batch_norm,
    "basis_combine_edge": _basis_combine("etype"),
    "basis_combine_node": _basis_combine("ntype"),
    "typed_linear_bases_edge": _typed_linear_bases("etype"),
    "typed_linear_bases_node": _typed_linear_bases("ntype"),
    "edge_typed_linear_src": _edge_typed_linear("src"),
    "typed_linear_edge_blocks": _blocked("typed_linear", "etype"),
    "typed_linear_node_blocks": _blocked("typed_linear", "ntype"),
    "edge_typed_linear_src_blocks": _blocked("edge_typed_linear", "etype", end="src", layout="compact"),
    "edge_typed_linear_dst_blocks": _blocked("edge_typed_linear", "etype", end="dst", layout="edge"),
    "edge_typed_linear_dst": _edge_typed_linear("dst"),
    "typed_param_edge": _typed_param("etype"),
    "typed_param_node": _typed_param("ntype"),
    "gather_src": lambda m, h, k: m.emit("gather", h, end="src"),
    "gather_dst": lambda m, h, k: m.emit("gather", h, end="dst"),
    **{f"scatter_{r}_{e}": _scatter(r, e) for r in ("sum", "mean", "max") for e in ("dst", "src")},
    "aggregate_sum": _agg(reduce="sum"),
    "aggregate_sum_loops": _agg(reduce="sum", self_loops=True),
    "aggregate_mean": _agg(reduce="mean"),
    "aggregate_mean_loops": _agg(reduce="mean", self_loops=True),
    "aggregate_max": _agg(reduce="max"),
    "aggregate_max_loops": _agg(reduce="max", self_loops=True),
    "aggregate_gcn": _agg(reduce="sum", norm="gcn"),
    "aggregate_gcn_loops": _agg(reduce="sum", norm="gcn", self_loops=True),
    "aggregate_out_mean": _agg(reduce="mean", direction="out", self_loops=True),
    "aggregate_out_gcn": _agg(reduce="sum", norm="gcn", direction="out"),
    "aggregate_weighted_sum": _agg_weighted(reduce="sum"),
    "aggregate_weighted_mean": _agg_weighted(reduce="mean", self_loops=True),
    "aggregate_weighted_gcn": _agg_weighted(reduce="sum", norm="gcn", self_loops=True),
    "aggregate_weighted_out": _agg_weighted(reduce="sum", norm="gcn", direction="out"),
    "aggregate_node_scale": _agg_scaled(),
    "aggregate_node_scale_loops": _agg_scaled(self_loops=True),
    "aggregate_node_scale_weighted": _agg_scaled(weighted=True, self_loops=True),
    "aggregate_node_scale_out": _agg_scaled(weighted=True, direction="out"),
    **{f"{op}_{b}": _binary(op, b) for op in ("add", "sub", "mul", "div")
       for b in ("rows", "width1", "param")},
    "scale": _unary("scale", c=-1.7),
    "neg": _unary("neg"),
    "bias_add": lambda m, h, k: m.emit("bias_add", h, m.param("b", (k,))),
    "relu": _unary("relu"),
    "leaky_relu": _unary("leaky_relu", alpha=0.2),
    "elu": _unary("elu", alpha=1.0),
    "exp": _unary("exp"),
    "sigmoid": _unary("sigmoid"),
    "tanh": _unary("tanh"),
    "sqrt": _on_positive("sqrt"),
    "rsqrt": _on_positive("rsqrt"),
    "log": _on_positive("log"),
    "pow_fractional": _on_positive("pow", c=1.5),
    "pow_negative": _on_positive("pow", c=-0.5),
    "pow_square": _wide("pow", c=2.0),
    "abs": _wide("abs"),
    "gelu": _wide("gelu"),
    "softplus": _wide("softplus"),
    "shift": _unary("shift", c=0.7),
    "softmax": _wide("softmax"),
    "log_softmax": _wide("log_softmax"),
    "dot_rows": _dot_rows,
    "dot_param": _dot_param,
    "dot_heads_rows": _dot_heads_rows,
    "dot_heads_param": _dot_heads_param,
    "head_mul_rows": _head_mul_rows,
    "head_mul_param": _head_mul_param,
    "head_mean": _head_mean,
    "multi_head_attention": _multi_head_attention,
    "edge_softmax": _edge_softmax,
    "concat": _concat,
    "dropout": _dropout,
    "graph_scalar_in_degree": _graph_scalar("in_degree"),
    "graph_scalar_out_degree": _graph_scalar("out_degree"),
    "graph_scalar_rel_degree": _graph_scalar("rel_degree"),
    "graph_scalar_gcn_norm": _graph_scalar("gcn_norm", self_loops=True),
    "graph_scalar_mean_norm": _graph_scalar("mean_norm", self_loops=False),
    "param_slice": _param_slice,
    "matvec": _matvec,
    "matvec_typed": _typed_matvec,
    "linear_of_weights": _weight_product,
}


def build_case(name, k):
    m = ModelBuilder(f"case_{name}_{k}")
    h = m.emit("tanh", m.emit("linear", m.x, m.param("W0", ("F", k))))
    out = CASES[name](m, h, k)
    if out.assoc == "edge":
        out = m.emit("scatter", out, reduce="sum")
    logits = m.emit("linear", out, m.param("Wout", (out.width, "C")))
    prog = m.finish(logits)
    prog.bind({s: {"F": F, "C": C, "etypes": ETYPES, "ntypes": NTYPES}[s] for s in prog.symbols()})
    return prog


@pytest.fixture(scope="module")
def data():
    g = random_graph(10, 26, seed=4, etypes=ETYPES, ntypes=NTYPES)
    return (g,) + random_data(g, F, C)


@pytest.mark.parametrize("k", WIDTHS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name, k, data):
    g, x, labels, mask = data
    prog = build_case(name, k)
    differentiate(prog)
    finite_difference_check(prog, g, x, labels, mask, perturbed_params(prog), max_entries=12)


def link_case(regularization):
    """Node embeddings through a typed layer, scored by DistMult against a per-type weight."""
    m = ModelBuilder(f"case_link_{regularization}")
    z = m.emit("tanh", m.emit("linear", m.x, m.param("W0", ("F", 4))))
    rel = m.param("R", ("etypes", 4), domain="etype")
    prog = m.finish_link(z, rel, regularization)
    prog.bind({"F": F, "etypes": ETYPES})
    return prog


def triples_for(g, count=15, seed=3):
    """Positive and corrupted triples, some nodes twice (a head and a tail of the same triple)."""
    rng = np.random.default_rng(seed)
    h, t = rng.integers(0, g.num_nodes, count), rng.integers(0, g.num_nodes, count)
    t[:2] = h[:2]
    return np.stack([h, rng.integers(0, ETYPES, count), t, rng.integers(0, 2, count)], axis=1)


@pytest.mark.parametrize("regularization", [0.0, 0.3])
def test_link_loss_gradient_matches_finite_differences(regularization, data):
    g, x, labels, mask = data
    prog = link_case(regularization)
    differentiate(prog)
    finite_difference_check(prog, g, x, None, None, perturbed_params(prog), max_entries=12,
                            triples=triples_for(g))


def test_link_loss_matches_a_direct_formula(data):
    g, x, _, _ = data
    prog = link_case(0.1)
    differentiate(prog)
    params = perturbed_params(prog)
    triples = triples_for(g)
    from morphgen.interp import Interpreter
    loss, _, values = Interpreter(prog, g, x, triples=triples).run(params)
    z = values[prog.logits.id]
    h, r, t, y = triples.T
    s = np.einsum("ik,ik,ik->i", z[h], params["R"][r], z[t])
    p = 1 / (1 + np.exp(-s))
    bce = -(y * np.log(p) + (1 - y) * np.log(1 - p)).mean()
    assert loss == pytest.approx(bce + 0.1 * ((z ** 2).mean() + (params["R"] ** 2).mean()), rel=1e-12)


@pytest.mark.parametrize("domain", ["etype", "ntype"])
def test_featureless_typed_linear_bases_gradient_matches_finite_differences(domain, data):
    """The lookup form (rows of the identity, never stored) of typed_linear_bases, with a type
    that no row has and rows read by several lookups."""
    g = data[0]
    _, labels, mask = random_data(g, None, C)
    m = ModelBuilder(f"case_bases_lookup_{domain}", featureless=True)
    rows = m.emit("gather", m.x, end="src") if domain == "etype" else m.x
    types = "etypes" if domain == "etype" else "ntypes"
    h = m.emit("typed_linear_bases", rows, m.param("A", (types, 3), domain=domain), m.param("V", (3, "N", 4)))
    if domain == "etype":
        h = m.emit("scatter", m.emit("tanh", h), reduce="sum", end="dst")
    prog = m.finish(m.emit("linear", m.emit("tanh", h), m.param("Wc", (4, "C"))))
    prog.bind({"N": g.num_nodes, "C": C, "etypes": ETYPES + 1, "ntypes": NTYPES})
    differentiate(prog)
    finite_difference_check(prog, g, None, labels, mask, perturbed_params(prog), max_entries=20)


def test_every_registered_opcode_is_exercised():
    seen = set()
    for prog in [build_case(name, 3) for name in CASES] + [link_case(0.1)]:
        differentiate(prog)
        seen |= {op.opcode for op in prog.forward + prog.backward}
    missing = set(opcodes()) - seen
    assert not missing, f"opcodes without a gradient check: {sorted(missing)}"


def test_no_nan_with_zero_in_degree(data):
    """Mean/max/gcn over nodes without in-edges give finite zeros (no NaN/Inf)."""
    g, x, labels, mask = data
    from morphgen.interp import Interpreter
    for name in ("aggregate_mean", "aggregate_max", "aggregate_gcn", "scatter_mean_dst",
                 "scatter_max_dst", "edge_softmax"):
        prog = build_case(name, 3)
        differentiate(prog)
        _, grads, values = Interpreter(prog, g, x, labels, mask).run(perturbed_params(prog))
        for v in values.values():
            if isinstance(v, np.ndarray) and v.dtype.kind == "f":
                assert np.all(np.isfinite(v)), name
        agg_op = next(op for op in prog.forward if op.opcode in ("aggregate", "scatter"))
        out = values[agg_op.output.id]
        assert np.all(out[g.in_degree == 0] == 0.0), name


def test_math_functions_match_numpy_definitions(data):
    """Forward values of the math ops against their textbook definitions (rsqrt(0) = 0)."""
    import math
    from morphgen.interp import Interpreter
    g, x, labels, mask = data
    m = ModelBuilder("math_values")
    v = m.emit("linear", m.x, m.param("W0", ("F", 3)))
    ops = {name: m.emit(name, v, **attrs) for name, attrs in
           (("abs", {}), ("gelu", {}), ("softplus", {}), ("shift", {"c": -0.25}), ("softmax", {}),
            ("log_softmax", {}))}
    deg = m.emit("rsqrt", m.emit("graph_scalar", kind="in_degree"))
    logits = m.emit("linear", m.emit("add", v, deg), m.param("Wout", (3, "C")))
    prog = m.finish(logits)
    prog.bind({"F": F, "C": C})
    params = perturbed_params(prog)
    values = Interpreter(prog, g, x, labels, mask).forward(params, training=False)
    h = values[v.id]
    np.testing.assert_allclose(values[ops["abs"].id], np.abs(h))
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(values[ops["gelu"].id], h * 0.5 * (1 + erf(h / math.sqrt(2))))
    np.testing.assert_allclose(values[ops["softplus"].id], np.log1p(np.exp(h)))
    np.testing.assert_allclose(values[ops["shift"].id], h - 0.25)
    soft = np.exp(h) / np.exp(h).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(values[ops["softmax"].id], soft)
    np.testing.assert_allclose(values[ops["log_softmax"].id], np.log(soft))
    degree = g.in_degree.astype(float)
    want = np.where(degree > 0, 1 / np.sqrt(np.maximum(degree, 1)), 0.0)
    np.testing.assert_allclose(values[deg.id].reshape(-1), want)
    assert np.any(degree == 0), "the graph must have a node without in-edges"


def test_block_diagonal_products_match_block_diagonal_matrices():
    """The interpreter's blocked typed products against the explicit block-diagonal matrices:
    3 blocks of 2 x 4 per row's weight [6, 4], so each row multiplies a 6 x 12 matrix."""
    from scipy.linalg import block_diag
    from morphgen.interp import _per_type_outer_sums, _typed_product, _typed_product_nt
    rng = np.random.default_rng(0)
    x, g, w = rng.standard_normal((5, 6)), rng.standard_normal((5, 12)), rng.standard_normal((5, 6, 4))
    full = [block_diag(*np.split(w[r], 3)) for r in range(5)]               # [6, 12] each
    np.testing.assert_allclose(_typed_product(x, w, 3), [x[r] @ full[r] for r in range(5)])
    np.testing.assert_allclose(_typed_product_nt(g, w, 3), [g[r] @ full[r].T for r in range(5)])
    types = np.array([0, 1, 0, 2, 0])
    sums = _per_type_outer_sums(x, g, types, 4, 3, np.float64)
    for t in range(4):
        outer = sum((np.outer(x[r], g[r]) for r in np.flatnonzero(types == t)), np.zeros((6, 12)))
        want = np.concatenate([outer[2 * b:2 * b + 2, 4 * b:4 * b + 4] for b in range(3)])   # the blocks' gradients
        np.testing.assert_allclose(sums[t], want)
