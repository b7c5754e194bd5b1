"""Random well-typed .mp programs, in the manner of Csmith: every program the generator writes
must pass `morphgen check`, train, and mean the same thing on every backend as in the numpy
interpreter.

A program is built from a seed alone (`generate(seed)` is deterministic).  Two styles:

* explicit: one training loop whose body assigns fresh node and edge properties through
  random expressions (projections, typed projections, element-wise arithmetic with
  broadcasting, activations, dropout, biases, reductions over in- and out-edges and
  neighbours, concatenation, dot products, degrees, edge softmax, per-head values: scale_heads,
  mean_heads, dot with heads; batch and layer norm; typed weights declared or combined from
  bases), then a loss on a C-wide node property;
* directives: a random stack of `gnn.layer` / `gnn.forwardPass` layers (GCN, SAGE, GIN, GAT with
  every aggregator each accepts, GAT with several heads concatenated or averaged and attention
  dropout), with random widths, activations, dropout, biases and norms, sometimes
  gnn.addSelfLoops.

Every expression is typed while it is generated (node or edge rows, a width), so the text is
correct by construction.  Values stay numerically tame: `exp` only of a tanh, division only by
constants, no maximum over values that are equal on every in-edge (a tie would make the
argmax, and so the gradient, depend on the order of edges).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

WIDTHS = (1, 2, 3, 5, 8)
ACTIVATIONS = ("relu", "sigmoid", "tanh", "elu", "leaky_relu", "exp", "math", "math")
DROPOUTS = (0.1, 0.3, 0.5)
LAYER_KINDS = {"GCN": ("Sum", "Mean"), "SAGE": ("Sum", "Mean", "Max"), "GIN": ("Sum", "Mean", "Max"),
               "GAT": ("Sum",)}


@dataclass
class FuzzProgram:
    seed: int
    source: str
    style: str                  # explicit | directives
    typed: bool                 # reads e.etype / v.ntype: needs a typed graph
    features_only_through_weights: bool = True   # trainable on a featureless (identity) input
    weighted: bool = False      # reads e.edge_weight: needs a graph with edge weights

    @property
    def name(self) -> str:
        return f"fuzz{self.seed}"


@dataclass
class _Scope:
    """What the generator may read at this point of the epoch body."""
    node: dict = field(default_factory=dict)     # node property -> width
    edge: dict = field(default_factory=dict)     # edge property -> width


class _Writer:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.seed = seed
        self.weights: list = []                   # declarations
        self.props: list = []
        self.typed = False
        self.x_direct = False                    # x read other than as `x * W`
        # Edge weights come from a stream of their own: a program that reads none is the one the
        # same seed gave before they existed, and one that reads them differs only there.
        self.edge_weights = random.Random(f"edge-weight-{seed}")
        self.weighted = False
        # Normalisations written out (fold_node_scales, fold_edge_normalisation) are chosen by
        # streams of their own too.
        self.node_scales = random.Random(f"node-scale-{seed}")
        self.message_passing = random.Random(f"message-passing-{seed}")
        # Messages computed from the rows of the edges' ends (sink_gathers), a stream of their own.
        self.edge_messages = random.Random(f"edge-message-{seed}")
        self.counter = 0

    # -- names and declarations ------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def weight(self, *dims, init=None) -> str:
        name = self.fresh("W" if len(dims) > 1 else "b")
        shape = "".join(f"[{d}]" for d in dims)
        init = init or ("glorot" if len(dims) > 1 else self.rng.choice(("zeros", "glorot", "ones")))
        self.weights.append(f"weight<float{shape}> {name} = {init};")
        return name

    def prop(self, kind: str, width) -> str:
        name = self.fresh("h" if kind == "Node" else "a")
        shape = "" if width == 1 else f"[{width}]"
        self.props.append(f"prop{kind}<float{shape}> {name};")
        return name

    def pick(self, options, weights=None):
        return self.rng.choices(list(options), weights=weights)[0]

    # -- node rows -------------------------------------------------------------------------------
    def node_read(self, scope: _Scope, width, inside_edge: bool):
        """A node property of this width as a node (or, inside a reduction, the destination's) row."""
        names = [n for n, w in scope.node.items() if w == width]
        if not names:
            return None
        name = self.rng.choice(names)
        if name == "x":
            self.x_direct = True
        return f"e.dst.{name}" if inside_edge else f"v.{name}"

    def projection(self, scope: _Scope, width, end: str):
        """`row * W`: a node property of any width projected to `width` (end: v, src, dst)."""
        # Later statements mostly read what earlier ones defined, so little of the program is dead.
        items = sorted(scope.node.items())
        name, k = self.rng.choices(items, weights=[1 if n == "x" else 4 for n, _ in items])[0]
        typed = end in ("src", "dst") and self.rng.random() < 0.3
        row = f"v.{name}" if end == "v" else f"e.{end}.{name}"
        if typed:
            self.typed = True
            # the input features may not meet a block-diagonal weight at an edge end (an error)
            return f"({row} * {self.typed_weight('g.etypes', k, width, blockable=name != 'x')}[e.etype])"
        if end == "v" and self.rng.random() < 0.15:
            self.typed = True
            return f"({row} * {self.typed_weight('g.ntypes', k, width)}[v.ntype])"
        return f"({row} * {self.weight(k, width)})"

    def typed_weight(self, types: str, k, width, blockable: bool = False) -> str:
        """A per-type [K][M] weight: declared as such, combined from bases (A * V), or (edge
        types, ``blockable``) B diagonal blocks of [K/B][M/B] (HGT's relation matrices)."""
        blocks = [b for b in range(2, 9) if isinstance(k, int) and isinstance(width, int)
                  and k % b == 0 and width % b == 0]
        if blockable and blocks and self.rng.random() < 0.5:
            b = self.rng.choice(blocks)
            return self.weight(types, b, k // b, width // b)
        if self.rng.random() < 0.3:
            bases = self.rng.choice((1, 2, 3))
            return f"({self.weight(types, bases)} * {self.weight(bases, k, width)})"
        return self.weight(types, k, width)

    def per_head(self, width, make, make_scores) -> str:
        """A value of ``width`` = heads x dim built per head: scale_heads, mean_heads or a
        per-head dot; ``make(w)`` writes a value of width w, ``make_scores(w)`` one to dot with."""
        divisors = [h for h in (2, 3, 4) if isinstance(width, int) and width % h == 0]
        form = self.rng.choice(("scale", "mean", "dot"))
        if form == "scale" and divisors:
            heads = self.rng.choice(divisors)
            return f"scale_heads({make(width)}, {make(heads)})"
        if form == "dot" and isinstance(width, int) and 2 <= width <= 4:
            dim = self.rng.choice((1, 2, 3))
            other = self.weight(width * dim) if self.rng.random() < 0.5 else make_scores(width * dim)
            return f"dot({make(width * dim)}, {other}, heads = {width})"
        if isinstance(width, int):
            heads = self.rng.choice((2, 3))
            return f"mean_heads({make(width * heads)}, heads = {heads})"
        return make(width)

    def node_expr(self, scope: _Scope, width, depth: int) -> str:
        if depth <= 0:
            leaf = self.node_read(scope, width, False) if self.rng.random() < 0.3 else None
            return leaf or self.projection(scope, width, "v")
        choice = self.pick(("proj", "act", "binary", "bias", "scale", "reduce", "neighbors", "concat",
                            "dot", "degree", "dropout", "neg", "heads", "norm"),
                           (3, 3, 3, 2, 1, 4, 2, 1, 1, 1, 2, 1, 1, 1))
        d = depth - 1
        if choice == "norm":
            # A large eps: a row (layer norm) or feature (batch norm) of nearly equal values would
            # divide float32 rounding by a tiny deviation, which no tolerance on gradients absorbs.
            norm = self.pick(("batch_norm", "layer_norm"))
            return f"{norm}({self.node_expr(scope, width, d)}, eps = 0.1)"
        if choice == "heads":
            return self.per_head(width, lambda w: self.node_expr(scope, w, d), lambda w: self.node_expr(scope, w, d))
        if choice == "proj":
            return self.projection(scope, width, "v")
        if choice == "act":
            return self.activation(self.node_expr(scope, width, d))
        if choice == "binary":
            return self.binary(lambda w: self.node_expr(scope, w, d), width)
        if choice == "bias":
            return f"({self.node_expr(scope, width, d)} + {self.weight(width)})"
        if choice == "scale":
            return self.scaled(self.node_expr(scope, width, d))
        if choice == "neg":
            return f"(-{self.node_expr(scope, width, d)})"
        if choice == "dropout":
            return f"dropout({self.node_expr(scope, width, d)}, {self.rng.choice(DROPOUTS)})"
        if choice == "reduce":
            return self.reduction(scope, width, d)
        if choice == "neighbors":
            names = [n for n, w in scope.node.items() if w == width and n != "x"]
            if names and self.rng.random() < 0.5:
                reduce = self.pick(("Sum", "Mean", "Max"), (2, 2, 1))
                return f"{reduce}(u in g.neighbors(v): u.{self.rng.choice(names)})"
            # Aggregate-then-project: of the input features this is what the passes reorder and
            # hoist out of the epoch (SGC, GCN's first layer written by hand).
            name, k = self.rng.choice(sorted(scope.node.items()))
            if name == "x":
                self.x_direct = True
            reduce = self.pick(("Sum", "Mean"))
            return f"({reduce}(u in g.neighbors(v): u.{name}) * {self.weight(k, width)})"
        if choice == "concat" and width != 1 and not isinstance(width, str):
            left = self.rng.randint(1, width - 1)
            return f"concat({self.node_expr(scope, left, d)}, {self.node_expr(scope, width - left, d)})"
        if choice == "dot" and width == 1:
            k = self.rng.choice(WIDTHS[1:])
            other = self.weight(k) if self.rng.random() < 0.5 else self.node_expr(scope, k, d)
            return f"dot({self.node_expr(scope, k, d)}, {other})"
        if choice == "degree" and width == 1:
            degree = f"v.{self.pick(('in_degree', 'out_degree'))}"
            return f"rsqrt({degree})" if self.rng.random() < 0.5 else degree
        return self.projection(scope, width, "v")

    # -- edge rows -------------------------------------------------------------------------------
    def edge_expr(self, scope: _Scope, width, depth: int, in_reduction: bool) -> str:
        """An edge row; `in_reduction`: inside Sum/Mean/Max over v's edges (edge_softmax not allowed)."""
        if depth <= 0:
            return self.edge_leaf(scope, width)
        choice = self.pick(("leaf", "act", "binary", "scale", "dropout", "typed_row", "softmax", "rel_degree",
                            "dot", "neg", "heads"), (4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1))
        d = depth - 1
        if choice == "heads":
            return self.per_head(width, lambda w: self.edge_expr(scope, w, d, in_reduction),
                                 lambda w: self.edge_leaf(scope, w))
        if choice == "act":
            return self.activation(self.edge_expr(scope, width, d, in_reduction))
        if choice == "binary":
            return self.binary(lambda w: self.edge_expr(scope, w, d, in_reduction), width)
        if choice == "scale":
            inner = self.edge_expr(scope, width, d, in_reduction)
            scaled = self.scaled(inner)
            if self.edge_weights.random() < 0.4:       # weighted instead (a width-1 row broadcasts)
                self.weighted = True
                return f"({inner} * e.edge_weight)"
            return scaled
        if choice == "neg":
            return f"(-{self.edge_expr(scope, width, d, in_reduction)})"
        if choice == "dropout":
            return f"dropout({self.edge_expr(scope, width, d, in_reduction)}, {self.rng.choice(DROPOUTS)})"
        if choice == "typed_row":
            self.typed = True
            return f"{self.weight('g.etypes', width)}[e.etype]"
        if choice == "softmax" and not in_reduction:
            return f"edge_softmax({self.edge_expr(scope, width, d, in_reduction)})"
        if choice == "rel_degree" and width == 1:
            if self.edge_weights.random() < 0.4:
                self.weighted = True
                return "e.edge_weight"
            self.typed = True
            return "e.rel_degree"
        if choice == "dot" and width == 1:
            k = self.rng.choice(WIDTHS[1:])
            return f"dot({self.edge_expr(scope, k, d, in_reduction)}, {self.edge_leaf(scope, k)})"
        return self.edge_leaf(scope, width)

    def edge_leaf(self, scope: _Scope, width) -> str:
        names = [n for n, w in scope.edge.items() if w == width]
        r = self.rng.random()
        if names and r < 0.5:
            return f"e.{self.rng.choice(names)}"
        if r < 0.7:
            src = [n for n, w in scope.node.items() if w == width]
            if src:
                name = self.rng.choice(src)
                if name == "x":
                    self.x_direct = True
                return f"e.src.{name}"
        return self.projection(scope, width, self.pick(("src", "dst"), (3, 1)))

    def reduction(self, scope: _Scope, width, depth: int) -> str:
        reduce = self.pick(("Sum", "Mean", "Max"), (3, 2, 1))
        direction = self.pick(("incoming", "outgoing"), (3, 1))
        body = self.edge_expr(scope, width, depth, in_reduction=True)
        if self.edge_weights.random() < 0.15:           # each message weighed by its edge
            self.weighted = True
            body = f"({body} * e.edge_weight)"
        if reduce == "Max" and "e.src." not in body:
            # A maximum over a value that is the same on every edge of the reduction would tie
            # (the body is written for in-edges: e.src is the far end, before the swap below).
            reduce = "Sum"
        if direction == "outgoing":
            # Inside an outgoing reduction the node itself is e.src: the body's ends swap roles.
            body = body.replace("e.src.", "e.SRC.").replace("e.dst.", "e.src.").replace("e.SRC.", "e.dst.")
        return f"{reduce}(e in v.{direction}_edges(): {body})"

    # -- shared pieces -----------------------------------------------------------------------
    def activation(self, inner: str) -> str:
        act = self.rng.choice(ACTIVATIONS)
        if act == "math":
            # Each function on a domain where it is smooth and tame.
            return self.rng.choice((
                f"sqrt(softplus({inner}) + 0.5)", f"rsqrt(softplus({inner}) + 0.25)",
                f"log(softplus({inner}) + 1.0)", f"abs({inner})", f"pow(tanh({inner}), 2)",
                f"pow(sigmoid({inner}) + 0.5, 1.5)", f"gelu({inner})", f"softplus({inner})",
                f"(1.0 - {inner})", f"({inner} + 0.5)", f"softmax({inner})", f"log_softmax({inner})"))
        if act == "exp":
            return f"exp(tanh({inner}))"
        if act == "leaky_relu":
            return f"leaky_relu({inner}, {self.rng.choice((0.01, 0.2))})"
        if act == "elu" and self.rng.random() < 0.5:
            return f"elu({inner}, 0.5)"
        return f"{act}({inner})"

    def scaled(self, inner: str) -> str:
        if self.rng.random() < 0.5:
            return f"({inner} * {self.rng.choice((0.5, 2.0, 0.25, 1.5))})"
        return f"({inner} / {self.rng.choice((2, 4, 3))})"

    def degree_scale(self, r: random.Random, weighted_share: float) -> str:
        """A node scale GCN would use, rsqrt(d + c), d the in-degree, the out-degree or the
        in-edges' weights summed; now and then a learned one, which needs a gradient."""
        if r.random() < weighted_share:
            self.weighted = True
            degree = "Sum(e in v.incoming_edges(): e.edge_weight)"
        else:
            degree = f"v.{r.choice(('in_degree', 'in_degree', 'out_degree'))}"
        scale = f"rsqrt({degree} + {r.choice((1, 1, 2))})"
        if r.random() < 0.15:                       # learned: needs a gradient, never folded
            scale = f"sigmoid(v.x * {self.weight('F', 1)})"
            self.x_direct = True
        return scale

    def normalised_sum(self, scope: _Scope) -> list:
        """Statements of a sum between two row scales by one node value, as GCN written out:
        s = rsqrt(d + c) (d the in-degree, or the in-edges' weights summed), z = h * s, then
        (Sum of z over in-neighbours [weighed by the edges] [+ z]) * s; now and then a scale that
        differs at the two ends or one that depends on a weight, which must not fold."""
        r = self.node_scales
        width = r.choice(WIDTHS)
        s, z, out = self.prop("Node", 1), self.prop("Node", width), self.prop("Node", width)
        scale = self.degree_scale(r, weighted_share=0.4)
        outer = f"v.{s}" if r.random() < 0.85 else "rsqrt(v.out_degree + 1)"
        message = f"(e.src.{z} * e.edge_weight)" if r.random() < 0.3 else f"e.src.{z}"
        if "edge_weight" in message:
            self.weighted = True
        total = f"Sum(e in v.incoming_edges(): {message})"
        if r.random() < 0.7:
            total = f"({total} + v.{z})" if r.random() < 0.5 else f"(v.{z} + {total})"
        rows = self.node_expr(scope, width, self.rng.randint(1, 2))
        lines = [f"forall (v in g.nodes()) {{ v.{s} = {scale}; }}",
                 f"forall (v in g.nodes()) {{ v.{z} = {rows} * v.{s}; }}",
                 f"forall (v in g.nodes()) {{ v.{out} = {total} * {outer}; }}"]
        scope.node.update({s: 1, z: width, out: width})
        return lines

    def message_passing_sum(self, scope: _Scope) -> list:
        """Statements of GCN's normalisation as message passing writes it: s = rsqrt(d + c),
        per-edge coefficients e.src.s * e.dst.s, then Sum(e: e.src.z * e.c) [+ v.z * v.s * v.s];
        now and then coefficients of one end only or a learned scale, which must not fold."""
        r = self.message_passing
        width = r.choice(WIDTHS)
        s, c = self.prop("Node", 1), self.prop("Edge", 1)
        z, out = self.prop("Node", width), self.prop("Node", width)
        scale = self.degree_scale(r, weighted_share=0.3)
        ends = r.choice(((f"e.src.{s}", f"e.dst.{s}"), (f"e.dst.{s}", f"e.src.{s}"), (f"e.src.{s}", f"e.src.{s}")))
        message = f"e.src.{z} * e.{c}" if r.random() < 0.5 else f"e.{c} * e.src.{z}"
        total = f"Sum(e in v.incoming_edges(): {message})"
        if r.random() < 0.7:
            total += f" + v.{z} * v.{s} * v.{s}" if r.random() < 0.8 else f" + v.{z} * v.{s}"
        rows = self.node_expr(scope, width, self.rng.randint(1, 2))
        lines = [f"forall (v in g.nodes()) {{ v.{s} = {scale}; }}",
                 f"forall (e in g.edges()) {{ e.{c} = {ends[0]} * {ends[1]}; }}",
                 f"forall (v in g.nodes()) {{ v.{z} = {rows}; }}",
                 f"forall (v in g.nodes()) {{ v.{out} = {total}; }}"]
        scope.node.update({s: 1, z: width, out: width})
        scope.edge[c] = 1
        return lines

    def edge_message_sum(self, scope: _Scope) -> list:
        """Statements whose messages are computed from the rows of the edges' ends: a source row
        scaled by a node value inside the sum (GCNII's (Sum(u: u.z * u.s) + v.z * v.s) * v.s), or
        EdgeConv's reduce(act((e.src.a -/+ e.dst.b) * W [+ e.dst.a * W2] [+ b])) with a and b the
        same rows or two (whose product distributes only when it narrows them)."""
        r = self.edge_messages
        if r.random() < 0.4:
            width = r.choice(WIDTHS)
            s, z, out = self.prop("Node", 1), self.prop("Node", width), self.prop("Node", width)
            scale = self.degree_scale(r, weighted_share=0.2)
            total = f"Sum(u in g.neighbors(v): u.{z} * u.{s})"
            if r.random() < 0.7:
                total = f"({total} + v.{z} * v.{s})"
            lines = [f"forall (v in g.nodes()) {{ v.{s} = {scale}; }}",
                     f"forall (v in g.nodes()) {{ v.{z} = {self.node_expr(scope, width, self.rng.randint(1, 2))}; }}",
                     f"forall (v in g.nodes()) {{ v.{out} = {total} * v.{s}; }}"]
            scope.node.update({s: 1, z: width, out: width})
            return lines
        k, m = r.choice(WIDTHS), r.choice(WIDTHS)
        a = self.prop("Node", k)
        lines = [f"forall (v in g.nodes()) {{ v.{a} = {self.node_expr(scope, k, self.rng.randint(1, 2))}; }}"]
        b = a
        if r.random() < 0.5:
            b = self.prop("Node", k)
            lines.append(f"forall (v in g.nodes()) {{ v.{b} = {self.node_expr(scope, k, self.rng.randint(1, 2))}; }}")
        message = f"(e.src.{a} {r.choice('-+')} e.dst.{b}) * {self.weight(k, m)}"
        if r.random() < 0.6:
            message += f" + e.dst.{a} * {self.weight(k, m)}"
        if r.random() < 0.5:
            message += f" + {self.weight(m, init='glorot')}"
        message = r.choice(("relu({})", "tanh({})", "leaky_relu({}, 0.2)", "({})")).format(message)
        out = self.prop("Node", m)
        lines.append(f"forall (v in g.nodes()) {{ v.{out} = {r.choice(('Sum', 'Mean', 'Max'))}"
                     f"(e in v.incoming_edges(): {message}); }}")
        scope.node.update({a: k, b: k, out: m})
        return lines

    def binary(self, make, width) -> str:
        op = self.pick(("+", "-", "*"))
        if width != 1 and self.rng.random() < 0.2:      # a width-1 operand broadcasts over the row
            left, right = make(width), make(1)
            if self.rng.random() < 0.5:
                left, right = right, left
            return f"({left} {op} {right})"
        return f"({make(width)} {op} {make(width)})"


def _explicit(w: _Writer) -> str:
    scope = _Scope(node={"x": "F"})
    body = []
    for _ in range(w.rng.randint(1, 4)):
        if w.node_scales.random() < 0.12:
            body += w.normalised_sum(scope)
            continue
        if w.message_passing.random() < 0.1:
            body += w.message_passing_sum(scope)
            continue
        if w.edge_messages.random() < 0.1:
            body += w.edge_message_sum(scope)
            continue
        width = w.rng.choice(WIDTHS)
        if w.rng.random() < 0.35:
            name = w.prop("Edge", width)
            body.append(f"forall (e in g.edges()) {{ e.{name} = {w.edge_expr(scope, width, w.rng.randint(1, 3), False)}; }}")
            scope.edge[name] = width
        else:
            same = [n for n, k in scope.node.items() if k == width and n != "x"]
            # Sometimes a property is assigned again from its own value (v.h = f(v.h)).
            name = w.rng.choice(same) if same and w.rng.random() < 0.3 else w.prop("Node", width)
            body.append(f"forall (v in g.nodes()) {{ v.{name} = {w.node_expr(scope, width, w.rng.randint(1, 3))}; }}")
            scope.node[name] = width
    out = w.prop("Node", "C")
    body.append(f"forall (v in g.nodes()) {{ v.{out} = {w.node_expr(scope, 'C', w.rng.randint(1, 2))}; }}")
    body.append(f'gnn.loss({out}, "cross_entropy");')
    body += ["gnn.backPropagation();", "gnn.optimizerStep();"]
    return "\n".join("        " + line for line in body)


def _directives(w: _Writer) -> tuple:
    layers = w.rng.randint(1, 3)
    outs = [w.rng.choice(WIDTHS[1:]) for _ in range(layers - 1)] + ["C"]
    decls, passes, width = [], [], "F"
    if w.rng.random() < 0.2:
        decls.append("gnn.addSelfLoops();")
    for layer in range(layers):
        kind = w.rng.choice(sorted(LAYER_KINDS))
        agg = w.rng.choice(LAYER_KINDS[kind])
        options, out_width = [], outs[layer]
        if w.rng.random() < 0.5:
            options.append(f"dropout = {w.rng.choice(DROPOUTS)}")
        if w.rng.random() < 0.4:
            options.append(f'activation = "{w.rng.choice(("relu", "elu", "leaky_relu", "tanh", "sigmoid"))}"')
        if w.rng.random() < 0.2:
            options.append("bias = false")
        if w.rng.random() < 0.25 and out_width != 2:
            # (gnn.layer's norms use eps = 1e-5: over two features layer norm is +-1 and its
            # gradient all rounding; see above)
            options.append(f'norm = "{w.rng.choice(("batch", "layer"))}"')
        if kind == "GCN" and agg == "Sum" and w.edge_weights.random() < 0.4:
            options.append("edge_weight = true")      # (from the weights' own stream, as above)
            w.weighted = True
        if kind == "GAT" and w.rng.random() < 0.5:
            heads = w.rng.choice((2, 3))
            concat = out_width != "C" and w.rng.random() < 0.6    # the last layer's heads average to C
            options.append(f"heads = {heads}, concat = {'true' if concat else 'false'}")
            if w.rng.random() < 0.5:
                options.append(f"attention_dropout = {w.rng.choice(DROPOUTS)}")
            next_width = out_width * heads if concat else out_width
        else:
            next_width = out_width
        extra = "".join(", " + o for o in options)
        decls.append(f"gnn.layer({width}, {out_width}{extra});")
        passes.append(f'gnn.forwardPass({layer}, "{kind}", "{agg}");')
        width = next_width
    body = passes + ['gnn.loss("cross_entropy");', "gnn.backPropagation();", "gnn.optimizerStep();"]
    # A first layer that drops its input, or reads it outside a product (SAGE's and GIN's
    # aggregation of the raw input), needs real features: an identity input cannot provide them.
    first = next(d for d in decls if d.startswith("gnn.layer"))
    direct = "dropout =" in first or any(k in passes[0] for k in ('"SAGE"', '"GIN"'))
    return decls, "\n".join("        " + line for line in body), direct


OPTIMIZERS = ('gnn.optimizer("sgd", lr = 0.1);',
              'gnn.optimizer("sgd", lr = 0.1, momentum = 0.9, weight_decay = 5e-4);',
              'gnn.optimizer("adam", lr = 0.01);',
              'gnn.optimizer("adam", lr = 0.01, weight_decay = 5e-4);',
              'gnn.optimizer("adamw", lr = 0.01, weight_decay = 0.01, decay_biases = false);')


def _optimizer(seed: int) -> str:
    """The update rule, drawn from its own stream so that a program's body stays the same whatever
    rule it gets.  The interpreter comparison replaces it (tests/fuzz/differential.py compares
    gradients); the MPI campaign trains with it, which is how Adam's per-row steps of tables
    shared between ranks meet generated programs."""
    return random.Random(f"optimizer-{seed}").choice(OPTIMIZERS)


def generate(seed: int) -> FuzzProgram:
    w = _Writer(seed)
    style = "directives" if w.rng.random() < 0.25 else "explicit"
    if style == "explicit":
        body, head, direct = _explicit(w), w.weights + w.props, w.x_direct
    else:
        decls, body, direct = _directives(w)
        head = decls
    lines = [f"// generated by tests/fuzz/generator.py, seed {seed}",
             "function fuzz(Graph g, propNode<float[F]> x, propNode<int[C]> y) {"]
    lines += ["    " + d for d in head]
    lines += ["    " + _optimizer(seed),
              "    for (int epoch = 0; epoch < 3; epoch++) {", body, "    }", "}", ""]
    return FuzzProgram(seed, "\n".join(lines), style, w.typed, not direct, w.weighted)
