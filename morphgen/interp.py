"""A numpy interpreter of the IR: the executable definition of every opcode and the test oracle.

It runs the forward and the generated backward of a :class:`morphgen.ir.Program` on a
:class:`morphgen.graph.Graph` in float64 (or float32).  Every backend must agree with it.

Featureless programs (``Program.featureless``, features = the identity ``I_N``) are run
without ever materialising ``N x N``: the identity and the values derived from it by
``gather`` and ``dropout`` are kept as :class:`OneHotRows` (row ``r`` is
``scale[r] * e_{index[r]}``), ``linear`` of such a value is a row lookup and its weight
gradient a row scatter.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import scipy.sparse as sp
import scipy.special

from .graph import Graph
from .ir import IRError, Op, Program
from .ir_ops import blocks_of


@dataclass
class OneHotRows:
    """A lazily represented matrix whose row ``r`` is ``scale[r] * e_{index[r]}`` (width ``n``)."""
    index: np.ndarray
    scale: np.ndarray
    n: int

    @property
    def shape(self):
        return (self.index.shape[0], self.n)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(z):
    """splitmix64's finaliser on uint64 (arrays or scalars), wrapping like C."""
    z = np.asarray(z, np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def dropout_keep_mask(seed: int, epoch: int, site: int, p: float, n: int) -> np.ndarray:
    """Which of n elements dropout keeps: bit for bit the stream of kernels/dropout.h."""
    u = lambda v: np.uint64(int(v) & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        base = _mix64(_mix64(_mix64(u(seed) + _GOLDEN) + u(epoch) * _GOLDEN) + u(site) * _GOLDEN)
        i = np.arange(1, n + 1, dtype=np.uint64)
        hashes = _mix64(base + i * _GOLDEN) >> np.uint64(32)
    threshold = np.uint64(int(float(np.float32(p)) * 4294967296.0))
    return hashes >= threshold


class Interpreter:
    """Runs one program on one graph.

    ``features``: dense ``[N, F]`` array, scipy sparse matrix, or ``None`` for the identity
    (featureless).  ``labels``: int ``[N]`` with ``-1`` for unlabelled nodes.  ``train_mask``:
    bool ``[N]`` (the loss averages over masked, labelled nodes).  ``seed`` and ``epoch`` key the
    dropout masks exactly as in the generated code: the mask of a dropout op depends only on
    (seed, epoch, the op's result id), so forward and backward (and repeated runs) see the same
    mask, and a backend's epoch ``k`` can be compared with ``epoch = k`` here.
    """

    def __init__(self, program: Program, graph: Graph, features=None, labels=None,
                 train_mask=None, dtype=np.float64, seed: int = 0, triples=None):
        self.program = program
        self.graph = graph
        self.dtype = np.dtype(dtype)
        self.seed = seed
        self.epoch = 0          # the backends' epoch counter: it keys the dropout masks too
        # New values of untrainable params (batch norm's running statistics) from the last
        # training forward, by param name: the oracle keeps no state, the caller applies them.
        self.state_updates: dict = {}
        self._param_names = {p.value.id: p.name for p in program.params}
        n = graph.num_nodes
        if features is None:
            if not program.featureless and "features" in program.inputs:
                raise IRError("features: None given but the program is not featureless")
            self.features = OneHotRows(np.arange(n), np.ones(n, self.dtype), n)
        elif sp.issparse(features):
            self.features = sp.csr_matrix(features, dtype=self.dtype)
        else:
            self.features = np.asarray(features, dtype=self.dtype)
        if self.features.shape[0] != n:
            raise IRError(f"features: {self.features.shape[0]} rows, graph has {n} nodes")
        self.labels = None if labels is None else np.asarray(labels, np.int64).reshape(n)
        mask = np.ones(n, bool) if train_mask is None else np.asarray(train_mask, bool).reshape(n)
        self.train_mask = mask if self.labels is None else mask & (self.labels >= 0)
        self._src, self._dst = graph.src, graph.dst
        self._in_deg = graph.in_degree.astype(self.dtype)
        self._out_deg = graph.out_degree.astype(self.dtype)
        self._etype = graph.etype if graph.etype is not None else np.zeros(graph.num_edges, np.int64)
        self._ntype = graph.ntype if graph.ntype is not None else np.zeros(n, np.int64)
        # link prediction: the scored triples (head, relation, tail, target 0/1), as set per epoch
        self.triples = np.zeros((0, 4), np.int64) if triples is None else np.asarray(triples, np.int64).reshape(-1, 4)

    # -- public API ---------------------------------------------------------------------
    def run(self, params: dict, training: bool = True, seed: Optional[int] = None):
        """Forward, loss and generated backward: ``(loss, grads by param name, values by id)``."""
        if not self.program.backward and self.program.params:
            raise IRError("program has no backward; call morphgen.autodiff.differentiate first")
        values = self.forward(params, training, seed)
        self._execute(self.program.backward, values, training, seed)
        grads = {name: values[g.id] for name, g in self.program.grads.items()}
        loss = float(values[self.program.loss.id]) if self.program.loss is not None else None
        return loss, grads, values

    def forward(self, params: dict, training: bool = True, seed: Optional[int] = None) -> dict:
        """Values (by id) of the forward ops; the loss is skipped when there are no labels.

        The invariant ops are recomputed on every call: the oracle keeps no state between runs."""
        values = self._bind_inputs(params)
        self._execute(self.program.invariant, values, training, seed)
        self._execute(self.program.forward, values, training, seed)
        return values

    def loss(self, params: dict, training: bool = True, seed: Optional[int] = None) -> float:
        return float(self.forward(params, training, seed)[self.program.loss.id])

    def predict(self, params: dict):
        """Logits at evaluation (dropout off)."""
        return self.forward(params, training=False)[self.program.logits.id]

    # -- execution ----------------------------------------------------------------------
    def _bind_inputs(self, params: dict) -> dict:
        values = {}
        for role, v in self.program.inputs.items():
            if role == "features":
                values[v.id] = self.features
            elif role == "labels":
                values[v.id] = self.labels
        for p in self.program.params:
            if p.name not in params:
                raise IRError(f"params: missing value for '{p.name}'")
            arr = np.asarray(params[p.name], dtype=self.dtype)
            want = p.value.shape
            if arr.ndim != len(want) or any(isinstance(d, int) and d != s for d, s in zip(want, arr.shape)):
                raise IRError(f"params['{p.name}']: shape {arr.shape} does not match "
                              f"{p.value.describe()}")
            values[p.value.id] = arr
        return values

    def _execute(self, ops, values, training, seed):
        self._training, self._seed = training, self.seed if seed is None else seed
        for op in ops:
            if op.opcode == "cross_entropy" and self.labels is None:
                continue
            fn = getattr(self, "_op_" + op.opcode, None)
            if fn is None:
                raise IRError(f"interpreter: no implementation of opcode '{op.opcode}'", op.loc)
            out = fn(op, *[values[v.id] for v in op.inputs])
            if isinstance(out, np.ndarray) and out.dtype != self.dtype and op.output.dtype == "f32":
                out = out.astype(self.dtype)
            values[op.output.id] = out

    # -- helpers ------------------------------------------------------------------------
    def _types(self, assoc: str):
        return self._etype if assoc == "edge" else self._ntype

    def _ends(self, end: str):
        return self._src if end == "src" else self._dst

    @staticmethod
    def _dense(x, op: Op):
        if isinstance(x, OneHotRows):
            raise IRError(f"{op.opcode} of the featureless identity would materialise an N x N "
                          f"matrix; apply a linear/typed_linear to it first", op.loc)
        return x.toarray() if sp.issparse(x) else x

    def _segment_sum(self, rows, index, n):
        out = np.zeros((n,) + rows.shape[1:], self.dtype)
        np.add.at(out, index, rows)
        return out

    def _coefficients(self, attrs, w=None, scale=None):
        """Per-edge coefficients ``c_e`` and per-node self-loop coefficients of an aggregate
        (``w``: its edge weights, which norm=gcn_weighted sums into the degrees; ``scale``: the
        node scale of norm=node_scale)."""
        loops = bool(attrs.get("self_loops", False))
        n = self.graph.num_nodes
        if attrs.get("norm") == "node_scale":             # the program's own s_src s_dst
            s = np.asarray(scale, self.dtype).reshape(-1)
            return s[self._src] * s[self._dst], (s * s if loops else None)
        if attrs.get("norm", "none") == "gcn_weighted":   # the in-edges' weights summed
            counts = np.bincount(self._dst, weights=np.asarray(w, np.float64).reshape(-1), minlength=n)
        else:
            counts = self._in_deg
        deg = counts.astype(self.dtype) + (1.0 if loops else 0.0)
        if attrs.get("norm", "none") in ("gcn", "gcn_weighted"):
            # PyG gcn_norm: d = in-degree (+1), both ends use the in-degree, 1/sqrt(0) -> 0
            dis = np.zeros(n, self.dtype)
            dis[deg > 0] = 1.0 / np.sqrt(deg[deg > 0])
            return dis[self._src] * dis[self._dst], (dis * dis if loops else None)
        if attrs["reduce"] == "mean":
            inv = np.zeros(n, self.dtype)
            inv[deg > 0] = 1.0 / deg[deg > 0]
            return inv[self._dst], (inv if loops else None)
        return np.ones(self.graph.num_edges, self.dtype), (np.ones(n, self.dtype) if loops else None)

    def _max_argmax(self, rows, ends, n, self_rows=None):
        """Max over segments (+ optional self candidate) and the winning candidate per element.

        Returns ``(y, arg)``: ``arg[v, f]`` is the first edge (by edge id) achieving the max,
        ``-1`` for the self candidate (which wins ties), ``-2`` for an empty segment (y = 0).
        """
        width = rows.shape[1:]
        best = np.full((n,) + width, -np.inf, self.dtype)
        if self_rows is not None:
            best = np.array(self_rows, dtype=self.dtype, copy=True)
        np.maximum.at(best, ends, rows)
        empty = np.isneginf(best)
        y = np.where(empty, 0.0, best)
        e_count = rows.shape[0]
        arg = np.full((n,) + width, e_count, np.int64)
        eids = np.broadcast_to(np.arange(e_count).reshape((-1,) + (1,) * len(width)), rows.shape)
        hit = rows == best[ends]
        np.minimum.at(arg, ends, np.where(hit, eids, e_count))
        arg[arg == e_count] = -2
        if self_rows is not None:
            arg[self_rows == best] = -1
        arg[empty] = -2
        return y, arg

    def _route_max(self, g, arg, ends_from, n_out):
        """Send ``g[v, f]`` to the winner ``arg[v, f]``; returns per-edge rows and self rows."""
        width = g.shape[1:]
        edge_grad = np.zeros((ends_from.shape[0],) + width, self.dtype)
        v_idx, *f_idx = np.nonzero(arg >= 0)
        winners = arg[(v_idx, *f_idx)]
        edge_grad[(winners, *f_idx)] = g[(v_idx, *f_idx)]
        self_grad = np.where(arg == -1, g, 0.0)
        return edge_grad, self_grad

    # -- forward opcodes ----------------------------------------------------------------
    def _op_linear(self, op, x, w):
        if isinstance(x, OneHotRows):      # featureless: a row lookup, never I_N @ W
            return x.scale[:, None] * w[x.index]
        return np.asarray(x @ w)

    def _op_typed_linear(self, op, x, w):
        types = self._types(op.inputs[0].assoc)
        if isinstance(x, OneHotRows):
            _unblocked(op, "featureless rows")
            return x.scale[:, None] * w[types, x.index]
        return _typed_product(self._dense(x, op), w[types], blocks_of(op))

    def _op_typed_linear_bases(self, op, x, a, v):
        """Row r through W_t = Σ_b A[t,b] V[b], t = type(r), without forming any W_t."""
        coef = a[self._types(op.inputs[0].assoc)]                      # [R, B]
        if isinstance(x, OneHotRows):
            return np.einsum("rb,brm->rm", x.scale[:, None] * coef, v[:, x.index, :])
        return np.einsum("rk,rb,bkm->rm", self._dense(x, op), coef, v)

    def _op_edge_typed_linear(self, op, x, w):
        rows = self._dense(x, op)[self._ends(op.attrs["end"])]
        return _typed_product(rows, w[self._etype], blocks_of(op))

    def _op_typed_param(self, op, w):
        return w[self._types(op.output.assoc)]

    def _op_gather(self, op, x):
        idx = self._ends(op.attrs["end"])
        if isinstance(x, OneHotRows):
            return OneHotRows(x.index[idx], x.scale[idx], x.n)
        return self._dense(x, op)[idx]

    def _op_scatter(self, op, m):
        m = self._dense(m, op)
        end = op.attrs.get("end", "dst")
        idx, n = self._ends(end), self.graph.num_nodes
        reduce = op.attrs["reduce"]
        if reduce == "max":
            return self._max_argmax(m, idx, n)[0]
        total = self._segment_sum(m, idx, n)
        if reduce == "mean":
            deg = self._in_deg if end == "dst" else self._out_deg
            total /= np.maximum(deg, 1.0).reshape((-1,) + (1,) * (m.ndim - 1))
        return total

    def _aggregate_matrix(self, attrs, w, scale=None):
        c, self_c = self._coefficients(attrs, w, scale)
        if w is not None:
            c = c * w.reshape(-1)
        n = self.graph.num_nodes
        a = sp.csr_matrix((c, (self._dst, self._src)), shape=(n, n))
        if self_c is not None:
            a = a + sp.diags(self_c)
        return a.T.tocsr() if attrs.get("direction", "in") == "out" else a

    def _op_aggregate(self, op, x, *rest):
        x = self._dense(x, op)
        scaled = op.attrs.get("norm") == "node_scale"
        w = rest[0] if len(rest) == (2 if scaled else 1) else None
        scale = rest[-1] if scaled else None
        if op.attrs["reduce"] == "max":
            loops = op.attrs.get("self_loops", False)
            return self._max_argmax(x[self._src], self._dst, self.graph.num_nodes,
                                    x if loops else None)[0]
        return np.asarray(self._aggregate_matrix(op.attrs, w, scale) @ x)

    def _op_graph_scalar(self, op):
        kind = op.attrs["kind"]
        if kind == "in_degree":
            return self._in_deg[:, None].copy()
        if kind == "out_degree":
            return self._out_deg[:, None].copy()
        if kind == "rel_degree":
            return self.graph.rel_degree.astype(self.dtype)[:, None]
        if kind == "edge_weight":
            if self.graph.edge_weight is None:
                raise IRError("the program reads e.edge_weight, but the graph has no edge weights", op.loc)
            return self.graph.edge_weight.astype(self.dtype)[:, None]
        attrs = {"reduce": "mean" if kind == "mean_norm" else "sum",
                 "norm": "gcn" if kind == "gcn_norm" else "none",
                 "self_loops": op.attrs.get("self_loops", False)}
        return self._coefficients(attrs)[0][:, None]

    def _binary_operands(self, op, a, b):
        return self._dense(a, op), self._dense(b, op)

    def _op_add(self, op, a, b):
        a, b = self._binary_operands(op, a, b)
        return a + b

    def _op_sub(self, op, a, b):
        a, b = self._binary_operands(op, a, b)
        return a - b

    def _op_mul(self, op, a, b):
        a, b = self._binary_operands(op, a, b)
        return a * b

    def _op_div(self, op, a, b):
        a, b = self._binary_operands(op, a, b)
        return a / b

    def _op_scale(self, op, x):
        return self._dense(x, op) * op.attrs["c"]

    def _op_neg(self, op, x):
        return -self._dense(x, op)

    def _op_bias_add(self, op, x, b):
        return self._dense(x, op) + b

    def _op_relu(self, op, x):
        return np.maximum(self._dense(x, op), 0.0)

    def _op_leaky_relu(self, op, x):
        x = self._dense(x, op)
        return np.where(x > 0, x, op.attrs.get("alpha", 0.01) * x)

    def _op_elu(self, op, x):
        x = self._dense(x, op)
        return np.where(x > 0, x, op.attrs.get("alpha", 1.0) * np.expm1(np.minimum(x, 0.0)))

    def _op_exp(self, op, x):
        return np.exp(self._dense(x, op))

    def _op_sigmoid(self, op, x):
        x = self._dense(x, op)
        return 0.5 * (1.0 + np.tanh(0.5 * x))     # overflow-free logistic

    def _op_tanh(self, op, x):
        return np.tanh(self._dense(x, op))

    # -- elementwise math (kernels/math.h): rsqrt(0) = 0, gelu in its exact erf form ----------
    def _op_sqrt(self, op, x):
        return np.sqrt(self._dense(x, op))

    def _op_rsqrt(self, op, x):
        x = self._dense(x, op)
        with np.errstate(divide="ignore"):
            return np.where(x == 0, 0.0, 1.0 / np.sqrt(x))

    def _op_log(self, op, x):
        return np.log(self._dense(x, op))

    def _op_abs(self, op, x):
        return np.abs(self._dense(x, op))

    def _op_pow(self, op, x):
        return np.power(self._dense(x, op), op.attrs["c"])

    def _op_gelu(self, op, x):
        x = self._dense(x, op)
        return 0.5 * x * (1.0 + scipy.special.erf(x / np.sqrt(2.0)))

    def _op_softplus(self, op, x):
        return np.logaddexp(0.0, self._dense(x, op))

    def _op_shift(self, op, x):
        return self._dense(x, op) + op.attrs["c"]

    def _op_softmax(self, op, x):
        x = self._dense(x, op)
        ex = np.exp(x - x.max(axis=1, keepdims=True))
        return ex / ex.sum(axis=1, keepdims=True)

    def _op_log_softmax(self, op, x):
        x = self._dense(x, op)
        shifted = x - x.max(axis=1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))

    def _op_dot(self, op, a, b):
        a, b = self._binary_operands(op, a, b)
        heads = op.attrs.get("heads", 1)
        prod = a * b
        return prod.reshape(prod.shape[0], heads, -1).sum(axis=-1)

    def _op_head_mul(self, op, x, s):
        x, s = self._dense(x, op), self._dense(s, op)
        heads = op.attrs["heads"]
        per_head = np.broadcast_to(x, (s.shape[0], x.shape[-1])).reshape(s.shape[0], heads, -1)
        return (per_head * s[:, :, None]).reshape(s.shape[0], -1)

    def _op_basis_combine(self, op, a, v):
        return np.einsum("tb,bkm->tkm", a, v)

    def _op_basis_coef_grad(self, op, g, v):
        return np.einsum("tkm,bkm->tb", g, v)

    def _op_basis_grad(self, op, a, g):
        return np.einsum("tb,tkm->bkm", a, g)

    def _op_layer_standardize(self, op, x):
        x = self._dense(x, op)
        centred = x - x.mean(axis=1, keepdims=True)
        return centred / np.sqrt((centred ** 2).mean(axis=1, keepdims=True) + op.attrs["eps"])

    def _op_batch_standardize(self, op, x, mean, var):
        x = self._dense(x, op)
        eps = op.attrs["eps"]
        if not self._training:
            return (x - mean) / np.sqrt(var + eps)
        mu = x.mean(axis=0)
        sq = ((x - mu) ** 2).sum(axis=0)
        n, m = x.shape[0], op.attrs["momentum"]
        names = [self._param_names[v.id] for v in op.inputs[1:]]
        # torch's BatchNorm: the running variance takes the unbiased estimate
        self.state_updates[names[0]] = (1 - m) * mean + m * mu
        self.state_updates[names[1]] = (1 - m) * var + m * sq / max(n - 1, 1)
        return (x - mu) / np.sqrt(sq / n + eps)

    def _op_layer_standardize_grad(self, op, g, x, y):
        x = self._dense(x, op)
        sigma = np.sqrt(x.var(axis=1, keepdims=True) + op.attrs["eps"])
        return (g - g.mean(axis=1, keepdims=True) - y * (g * y).mean(axis=1, keepdims=True)) / sigma

    def _op_batch_standardize_grad(self, op, g, x, y):
        x = self._dense(x, op)
        sigma = np.sqrt(x.var(axis=0) + op.attrs["eps"])
        return (g - g.mean(axis=0) - y * (g * y).mean(axis=0)) / sigma

    def _op_head_mean(self, op, x):
        x = self._dense(x, op)
        return x.reshape(x.shape[0], op.attrs["heads"], -1).mean(axis=1)

    def _op_edge_softmax(self, op, s):
        s = self._dense(s, op)
        n = self.graph.num_nodes
        best = np.full((n,) + s.shape[1:], -np.inf, self.dtype)
        np.maximum.at(best, self._dst, s)
        ex = np.exp(s - best[self._dst])
        return ex / self._segment_sum(ex, self._dst, n)[self._dst]

    def _op_concat(self, op, *parts):
        return np.concatenate([self._dense(p, op) for p in parts], axis=1)

    def _dropout_mask(self, site: int, shape, p: float, assoc: str):
        """Keep-mask of dropout ``site``: the backends' counter-based stream (``dropout_keep``
        of kernels/dropout.h) keyed by (seed, epoch, site), element i of the row-major array.

        Rows of an edge tensor are numbered in the canonical edge order (by destination, stable
        in the input order; morphgen/layout.py), the order in which every backend stores them."""
        keep = dropout_keep_mask(self._seed, self.epoch, site, p, int(np.prod(shape))).reshape(shape)
        if assoc != "edge":
            return keep
        by_input_order = np.empty_like(keep)
        by_input_order[self.graph.by_dst[1]] = keep
        return by_input_order

    def _op_dropout(self, op, x):
        p = op.attrs["p"]
        if not self._training or p == 0.0:
            return x
        if isinstance(x, OneHotRows):      # only the one stored element per row can be dropped
            keep = self._dropout_mask(op.output.id, x.index.shape, p, op.output.assoc)
            return OneHotRows(x.index, x.scale * keep / (1.0 - p), x.n)
        x = self._dense(x, op)
        return x * self._dropout_mask(op.output.id, x.shape, p, op.output.assoc) / (1.0 - p)

    def _op_cross_entropy(self, op, logits, labels):
        logits = self._dense(logits, op)
        mask = self.train_mask
        count = int(mask.sum())
        if count == 0:
            return np.asarray(0.0, self.dtype)
        z = logits[mask]
        z = z - z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return np.asarray(-logp[np.arange(count), self.labels[mask]].mean(), self.dtype)

    def _op_param_slice(self, op, w):
        return w[op.attrs["start"]:op.attrs["stop"]]      # a view, as in the backends

    def _op_matvec(self, op, w, a):
        return np.einsum("...km,...m->...k", w, a)

    # -- backward opcodes ---------------------------------------------------------------
    def _op_matmul_nt(self, op, g, w):
        return self._dense(g, op) @ w.T

    def _op_matmul_tn(self, op, x, g):
        if isinstance(x, OneHotRows):      # featureless weight gradient: a row scatter
            return self._segment_sum(x.scale[:, None] * g, x.index, x.n)
        return np.asarray(x.T @ g)

    def _op_typed_matmul_nt(self, op, g, w):
        return _typed_product_nt(g, w[self._types(op.inputs[0].assoc)], blocks_of(op))

    def _op_typed_matmul_tn(self, op, x, g):
        types = self._types(op.inputs[1].assoc)
        t = op.attrs["types"]
        if isinstance(x, OneHotRows):
            _unblocked(op, "featureless rows")
            out = np.zeros((t, x.n, g.shape[1]), self.dtype)
            np.add.at(out, (types, x.index), x.scale[:, None] * g)
            return out
        return _per_type_outer_sums(self._dense(x, op), g, types, t, blocks_of(op), self.dtype)

    def _op_typed_linear_bases_coef_grad(self, op, x, g, v):
        types = self._types(op.inputs[1].assoc)
        if isinstance(x, OneHotRows):
            per_row = x.scale[:, None] * np.einsum("brm,rm->rb", v[:, x.index, :], g)
        else:
            per_row = np.einsum("rk,bkm,rm->rb", self._dense(x, op), v, g)
        return self._segment_sum(per_row, types, op.attrs["types"])

    def _op_typed_linear_bases_grad(self, op, x, a, g):
        coef = a[self._types(op.inputs[2].assoc)]                      # [R, B]
        if isinstance(x, OneHotRows):
            out = np.zeros((x.n, a.shape[1], g.shape[1]), self.dtype)  # [N, B, M]: rows first for add.at
            np.add.at(out, x.index, (x.scale[:, None] * coef)[:, :, None] * g[:, None, :])
            return out.transpose(1, 0, 2).copy()
        return np.einsum("rb,rk,rm->bkm", coef, self._dense(x, op), g)

    def _op_edge_typed_linear_input_grad(self, op, g, w):
        per_edge = _typed_product_nt(g, w[self._etype], blocks_of(op))
        return self._segment_sum(per_edge, self._ends(op.attrs["end"]), self.graph.num_nodes)

    def _op_edge_typed_linear_weight_grad(self, op, x, g):
        rows = self._dense(x, op)[self._ends(op.attrs["end"])]
        return _per_type_outer_sums(rows, g, self._etype, op.attrs["types"], blocks_of(op), self.dtype)

    def _op_typed_row_sum(self, op, g):
        return self._segment_sum(g, self._types(op.inputs[0].assoc), op.attrs["types"])

    def _op_row_sum(self, op, g):
        return g.sum(axis=0)

    def _op_feature_sum(self, op, g):
        return g.sum(axis=1, keepdims=True)

    def _op_head_repeat(self, op, g):
        return np.tile(g, (1, op.attrs["heads"])) * op.attrs.get("c", 1.0)

    def _op_act_grad(self, op, g, y):
        act = op.attrs["act"]
        if act == "relu":
            return np.where(y > 0, g, 0.0)
        if act == "leaky_relu":
            return np.where(y > 0, g, op.attrs["alpha"] * g)
        if act == "elu":
            return np.where(y > 0, g, g * (y + op.attrs["alpha"]))
        if act == "exp":
            return g * y
        if act == "sigmoid":
            return g * y * (1.0 - y)
        return g * (1.0 - y * y)            # tanh

    def _op_math_grad(self, op, g, x):
        x, fn, c = self._dense(x, op), op.attrs["fn"], op.attrs.get("c", 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            derivative = {
                "sqrt": lambda: 0.5 / np.sqrt(x),
                "rsqrt": lambda: np.where(x == 0, 0.0, -0.5 * x ** -1.5),
                "log": lambda: 1.0 / x,
                "abs": lambda: np.sign(x),
                "pow": lambda: c * np.power(x, c - 1.0),
                "gelu": lambda: (0.5 * (1.0 + scipy.special.erf(x / np.sqrt(2.0)))
                                 + x * np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)),
                "softplus": lambda: 0.5 * (1.0 + np.tanh(0.5 * x)),
                "shift": lambda: np.ones_like(x),
            }[fn]()
        return g * derivative

    def _op_softmax_grad(self, op, g, y):
        if op.attrs["log"]:
            return g - np.exp(y) * g.sum(axis=1, keepdims=True)
        return y * (g - (g * y).sum(axis=1, keepdims=True))

    def _op_edge_softmax_grad(self, op, g, y):
        gy = g * y
        return y * (g - self._segment_sum(gy, self._dst, self.graph.num_nodes)[self._dst])

    def _op_aggregate_max_grad(self, op, g, x, y):
        loops = op.attrs.get("self_loops", False)
        n = self.graph.num_nodes
        _, arg = self._max_argmax(x[self._src], self._dst, n, x if loops else None)
        edge_grad, self_grad = self._route_max(g, arg, self._src, n)
        return self._segment_sum(edge_grad, self._src, n) + self_grad

    def _op_scatter_max_grad(self, op, g, m, y):
        idx = self._ends(op.attrs.get("end", "dst"))
        _, arg = self._max_argmax(m, idx, self.graph.num_nodes)
        return self._route_max(g, arg, idx, self.graph.num_nodes)[0]

    def _op_dropout_grad(self, op, g):
        p = op.attrs["p"]
        if not self._training or p == 0.0:
            return g
        return g * self._dropout_mask(op.attrs["site"], g.shape, p, op.output.assoc) / (1.0 - p)

    def _link_terms(self, z, rel):
        h, r, t, y = self.triples.T
        zh, rr, zt = z[h], rel[r], z[t]
        return h, r, t, y.astype(self.dtype), zh, rr, zt, (zh * rr * zt).sum(axis=1)

    def _op_link_loss(self, op, z, rel):
        z, reg = self._dense(z, op), op.attrs.get("regularization", 0.0)
        *_, y, _, _, _, s = self._link_terms(z, rel)
        bce = (np.maximum(s, 0) - s * y + np.log1p(np.exp(-np.abs(s)))).mean() if s.size else 0.0
        return np.asarray(bce + reg * ((z ** 2).mean() + (rel ** 2).mean()), self.dtype)

    def _link_score_grad(self, y, s):
        return (1.0 / (1.0 + np.exp(-s)) - y) / max(s.size, 1)

    def _op_link_loss_grad(self, op, z, rel):
        z, reg = self._dense(z, op), op.attrs.get("regularization", 0.0)
        h, _, t, y, zh, rr, zt, s = self._link_terms(z, rel)
        d = self._link_score_grad(y, s)[:, None]
        grad = 2.0 * reg * z / z.size
        np.add.at(grad, h, d * rr * zt)
        np.add.at(grad, t, d * rr * zh)
        return grad

    def _op_link_loss_rel_grad(self, op, z, rel):
        z, reg = self._dense(z, op), op.attrs.get("regularization", 0.0)
        _, r, _, y, zh, _, zt, s = self._link_terms(z, rel)
        grad = 2.0 * reg * rel / rel.size
        np.add.at(grad, r, self._link_score_grad(y, s)[:, None] * zh * zt)
        return grad

    def _op_cross_entropy_grad(self, op, logits, labels):
        logits = self._dense(logits, op)
        grad = np.zeros_like(logits)
        mask = self.train_mask
        count = int(mask.sum())
        if count == 0:
            return grad
        z = logits[mask] - logits[mask].max(axis=1, keepdims=True)
        soft = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        soft[np.arange(count), self.labels[mask]] -= 1.0
        grad[mask] = soft / count
        return grad

    def _op_slice(self, op, g):
        return g[:, op.attrs["start"]:op.attrs["stop"]]

    def _op_row_concat(self, op, *parts):
        return np.concatenate(parts, axis=0)

    def _op_outer(self, op, g, a):
        return np.einsum("...k,...m->...km", g, a)

    def _op_matvec_t(self, op, w, g):
        return np.einsum("...km,...k->...m", w, g)


# -- typed products, plain or block diagonal (attribute ``blocks``, ir_ops.blocks_of) --------------
def _unblocked(op, what: str) -> None:
    if blocks_of(op) != 1:
        raise IRError(f"{op.opcode}: a block-diagonal weight cannot multiply {what}")


def _typed_product(x, w_rows, blocks: int):
    """Row r of x [R, B*D] through its own weight w_rows[r] [B*D, M] of B diagonal blocks: [R, B*M]."""
    r, k, m = w_rows.shape
    if r == 0:
        return np.zeros((0, blocks * m), w_rows.dtype)
    d = k // blocks
    return np.einsum("rbd,rbdm->rbm", x.reshape(r, blocks, d), w_rows.reshape(r, blocks, d, m)).reshape(r, blocks * m)


def _typed_product_nt(g, w_rows, blocks: int):
    """Row r of g [R, B*M] through the transpose of w_rows[r] [B*D, M]: [R, B*D]."""
    r, k, m = w_rows.shape
    if r == 0:
        return np.zeros((0, k), w_rows.dtype)
    d = k // blocks
    return np.einsum("rbm,rbdm->rbd", g.reshape(r, blocks, m), w_rows.reshape(r, blocks, d, m)).reshape(r, k)


def _per_type_outer_sums(x, g, types, count: int, blocks: int, dtype):
    """out[t] = sum over the rows r of type t of x[r]^T g[r], block by block: [count, B*D, M]."""
    k, m = x.shape[1], g.shape[1] // blocks
    d = k // blocks
    out = np.zeros((count, k, m), dtype)
    for t in range(count):
        sel = types == t
        xs, gs = x[sel].reshape(-1, blocks, d), g[sel].reshape(-1, blocks, m)
        out[t] = np.einsum("nbd,nbm->bdm", xs, gs).reshape(k, m)
    return out


# -- parameters and reference optimizers ---------------------------------------------------
def _fan_in(p) -> int:
    """The inputs each output of a weight sums: K of a [K, M] matrix (also per type or basis,
    [T, K, M]); a vector's own length (a [T, K] typed vector: K)."""
    shape = p.value.shape
    if p.value.domain is not None:
        shape = shape[1:]
    return shape[-2] // p.blocks if len(shape) >= 2 else shape[-1]


def init_params(program: Program, seed: int = 0, dtype=np.float64) -> dict:
    """Initial weights by each Param's ``init`` (glorot uniform, zeros, ones, normal, uniform)."""
    rng = np.random.default_rng(seed)
    out = {}
    for p in program.params:
        shape = p.value.shape
        if not all(isinstance(d, int) for d in shape):
            raise IRError(f"param '{p.name}': shape {shape} has unbound sizes; call Program.bind")
        if p.init == "zeros":
            arr = np.zeros(shape)
        elif p.init == "ones":
            arr = np.ones(shape)
        elif p.init == "normal":
            arr = rng.normal(0.0, 1.0, shape)
        elif p.init == "uniform":             # torch's Linear: +-1/sqrt(fan_in)
            bound = 1.0 / np.sqrt(_fan_in(p))
            arr = rng.uniform(-bound, bound, shape)
        elif p.init == "glorot":
            fan_in, fan_out = (shape[-2] // p.blocks, shape[-1]) if len(shape) >= 2 else (1, shape[0])
            bound = np.sqrt(6.0 / (fan_in + fan_out))
            arr = rng.uniform(-bound, bound, shape)
        else:
            raise IRError(f"param '{p.name}': unknown init '{p.init}'")
        out[p.name] = arr.astype(dtype)
    return out


def adam_step(p, g, state: dict, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0):
    """torch.optim.Adam, in place: L2 weight decay is added to the gradient."""
    if weight_decay:
        g = g + weight_decay * p
    return _adam_update(p, g, state, lr, beta1, beta2, eps)


def adamw_step(p, g, state: dict, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01):
    """torch.optim.AdamW, in place: decoupled decay ``p *= 1 - lr*wd`` before the Adam update."""
    p *= 1.0 - lr * weight_decay
    return _adam_update(p, g, state, lr, beta1, beta2, eps)


def _adam_update(p, g, state, lr, beta1, beta2, eps):
    t = state.get("step", 0) + 1
    m = state.get("m", np.zeros_like(p)) * beta1 + (1.0 - beta1) * g
    v = state.get("v", np.zeros_like(p)) * beta2 + (1.0 - beta2) * g * g
    state.update(step=t, m=m, v=v)
    m_hat = m / (1.0 - beta1 ** t)
    v_hat = v / (1.0 - beta2 ** t)
    p -= lr * m_hat / (np.sqrt(v_hat) + eps)
    return p


def sgd_step(p, g, state: dict, lr=0.01, momentum=0.0, weight_decay=0.0):
    """torch.optim.SGD (dampening 0, no Nesterov), in place."""
    if weight_decay:
        g = g + weight_decay * p
    if momentum:
        buf = g.copy() if "buf" not in state else momentum * state["buf"] + g
        state["buf"] = buf
        g = buf
    p -= lr * g
    return p


def optimizer_step(program: Program, params: dict, grads: dict, state: dict) -> None:
    """Apply ``program.optimizer`` to every parameter that has a gradient (in place)."""
    opt = program.optimizer
    for p in program.params:
        if p.name not in grads:
            continue
        wd = p.decay(opt)
        st = state.setdefault(p.name, {})
        if opt.kind == "adam":
            adam_step(params[p.name], grads[p.name], st, opt.lr, opt.beta1, opt.beta2, opt.eps, wd)
        elif opt.kind == "adamw":
            adamw_step(params[p.name], grads[p.name], st, opt.lr, opt.beta1, opt.beta2, opt.eps, wd)
        elif opt.kind == "sgd":
            sgd_step(params[p.name], grads[p.name], st, opt.lr, opt.momentum, wd)
        else:
            raise IRError(f"optimizer: unknown kind '{opt.kind}'")
