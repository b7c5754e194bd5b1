"""The ``gnn.*`` directives: their ordering rules within one epoch and the expansion of
``gnn.forwardPass(l, KIND, AGG)`` into IR ops.  The IR never learns the model's name: a layer
kind is only a recipe of linear / aggregate / attention ops written out here.
"""
from __future__ import annotations

from ..ir import IRError, Optimizer, Param
from ..ir_core import dim_mul
from ..grammar import ast as A
from ..grammar.diagnostics import show, suggest
from .expressions import running_statistics, widths_conflict
from .sema import (ACTIVATIONS, AGGREGATORS, BUILTINS, DIRECTIVES, INITS, LAYER_KINDS, LINK_DECODERS, LOSSES,
                   OPTIMIZERS, LayerSpec, Poisoned, PropSym, SemanticError, WeightSym, check_choice, check_number,
                   describe, undeclared, PoisonSym, FEATURE_NORMALIZATIONS, NORMS)

TRAINING_DIRECTIVES = ("forwardPass", "loss", "linkLoss", "backPropagation", "optimizerStep")


def _flag(coord, key: str, v) -> bool:
    if not isinstance(v, bool):
        raise SemanticError(coord, f"{key} must be true or false, got {describe(v)}")
    return v

# What a layer's activation defaults to when the program does not say.
HIDDEN_DEFAULT = {"GCN": "relu", "SAGE": "relu", "GIN": "relu", "GAT": "elu"}
# What a layer's weights start from when the program does not say (`init=`).  SAGE as PyG's
# SAGEConv (torch Linear layers: uniform in +-1/sqrt(fan_in)): glorot made its first steps far
# larger on wide inputs (first loss 15.4 against PyG's 4.65 on the arxiv-shaped graph, test
# accuracy 0.76 against PyG's 0.92 after 13 epochs; 0.94 with `uniform`).  GCN and GAT as GCNConv
# and GATConv (glorot).  GIN keeps glorot although PyG's MLP starts uniform: over 20 seeds on
# citeseer `uniform` gave 51.8 +- 3.9 against glorot's 52.8 +- 3.8, no better (docs/accuracy.md).
INIT_DEFAULT = {"GCN": "glorot", "SAGE": "uniform", "GIN": "glorot", "GAT": "glorot"}


class TrainingState:
    """Which directives ran so far in the (one) lowered epoch; enforces their order."""

    def __init__(self):
        self.layers: list = []              # [LayerSpec]
        self.optimizer: Optimizer | None = None
        self.forwarded: list = []           # layer indices, in order
        self.h = None                       # output of the last forwardPass
        self.loss_called = False            # attempted (even if it failed): no cascades
        self.loss_done = False
        self.backprop_layers: list = []
        self.backprop_all = False
        self.step_called = False
        self.step_done = False
        self.broken = False                 # a directive failed: stop judging the order
        self.layer_failed = False           # the last gnn.layer failed: the next one's input width is unknown
        self.edge_weights = None            # the edge weights GCN layers read (one read for every layer)

    def _quiet_if_broken(self):
        if self.broken:
            raise Poisoned()

    # -- ordering checks -------------------------------------------------------------------
    def check_forward(self, coord, l: int) -> LayerSpec:
        self._quiet_if_broken()
        if not self.layers:
            raise SemanticError(coord, "gnn.forwardPass: no layers are declared; declare them "
                                       "with gnn.layer(in, out) before the training loop")
        if not 0 <= l < len(self.layers):
            raise SemanticError(coord, f"gnn.forwardPass({l}): only {len(self.layers)} layer(s) "
                                       f"are declared (0..{len(self.layers) - 1})")
        if self.loss_called:
            raise SemanticError(coord, f"gnn.forwardPass({l}) after gnn.loss in the same epoch")
        if l in self.forwarded:
            raise SemanticError(coord, f"gnn.forwardPass({l}): layer {l} already ran in this epoch")
        if l != len(self.forwarded):
            raise SemanticError(coord, f"gnn.forwardPass({l}) before gnn.forwardPass"
                                       f"({len(self.forwarded)}): layers run in order")
        return self.layers[l]

    def check_loss_directive_style(self, coord):
        self._quiet_if_broken()
        if not self.layers:
            raise SemanticError(coord, "gnn.loss(kind) takes the last layer's output, but no "
                                       "layers are declared; name the output property: "
                                       "gnn.loss(out, \"cross_entropy\")")
        if not self.forwarded:
            raise SemanticError(coord, "gnn.loss before any gnn.forwardPass")
        if len(self.forwarded) < len(self.layers):
            raise SemanticError(coord, f"gnn.loss after only {len(self.forwarded)} of "
                                       f"{len(self.layers)} layers ran gnn.forwardPass")

    def check_backprop(self, coord, l):
        self._quiet_if_broken()
        if l is not None:
            if not self.layers:
                raise SemanticError(coord, f"gnn.backPropagation({l}): no layers are declared; "
                                           "use gnn.backPropagation() for the whole program")
            if not 0 <= l < len(self.layers):
                raise SemanticError(coord, f"gnn.backPropagation({l}): only {len(self.layers)} "
                                           f"layer(s) are declared (0..{len(self.layers) - 1})")
            if l not in self.forwarded:
                raise SemanticError(coord, f"gnn.backPropagation({l}) before its gnn.forwardPass")
        if not self.loss_done:
            raise SemanticError(coord, "gnn.backPropagation before gnn.loss: there is no loss "
                                       "to differentiate")
        if self.backprop_all or (l is None and self.backprop_layers):
            raise SemanticError(coord, "gnn.backPropagation is called twice in one epoch")
        if l is not None:
            if l in self.backprop_layers:
                raise SemanticError(coord, f"gnn.backPropagation({l}) is called twice in one epoch")
            want = len(self.layers) - 1 - len(self.backprop_layers)
            if l != want:
                raise SemanticError(coord, f"gnn.backPropagation({l}) before gnn.backPropagation"
                                           f"({want}): layers are back-propagated from the last "
                                           "to the first")
            self.backprop_layers.append(l)
        else:
            self.backprop_all = True

    def check_step(self, coord):
        self._quiet_if_broken()
        if self.step_done:
            raise SemanticError(coord, "gnn.optimizerStep is called twice in one epoch")
        if self.optimizer is None:
            raise SemanticError(coord, "gnn.optimizerStep with no gnn.optimizer declared before "
                                       "the training loop")
        if not self.loss_done:
            raise SemanticError(coord, "gnn.optimizerStep with no gnn.loss in this epoch")
        if not self.backprop_all and not self.backprop_layers:
            raise SemanticError(coord, "gnn.optimizerStep before gnn.backPropagation: no "
                                       "gradients have been computed")
        if self.backprop_layers and len(self.backprop_layers) < len(self.layers):
            raise SemanticError(coord, f"gnn.optimizerStep after only {len(self.backprop_layers)} "
                                       f"of {len(self.layers)} layers ran gnn.backPropagation")


# -- forwardPass expansion ---------------------------------------------------------------

class LayerExpander:
    """Writes one layer's ops with ``builder``; params are named ``layer<l>.<role>``."""

    def __init__(self, program, builder, training=None):
        self.program = program
        self.b = builder
        self.training = training        # TrainingState: what the layers of one epoch share

    def param(self, spec: LayerSpec, role: str, shape: tuple, init: str, decay: bool = True):
        name = f"layer{spec.index}.{role}"
        value = self.program.new_value("param", shape, name=name)
        self.program.params.append(Param(name, value, init, spec.weight_decay if decay else False))
        return value

    def activation(self, h, name, loc):
        if name in (None, "none"):
            return h
        if name == "elu":
            return self.b.emit("elu", h, loc=loc, alpha=1.0)
        if name == "leaky_relu":
            return self.b.emit("leaky_relu", h, loc=loc, alpha=0.01)
        return self.b.emit(name, h, loc=loc)

    def normalise(self, spec, h, loc, role="norm"):
        """The layer's normalisation (``norm=``) with its affine weights gamma and beta."""
        if spec.norm == "none":
            return h
        emit, prefix = self.b.emit, f"layer{spec.index}.{role}"
        if spec.norm == "batch":
            mean, var = running_statistics(self.program, prefix, h.width)
            h = emit("batch_standardize", h, mean, var, loc=loc, eps=1e-5, momentum=0.1)
        else:
            h = emit("layer_standardize", h, loc=loc, eps=1e-5)
        h = emit("mul", h, self.param(spec, f"{role}.gamma", (h.width,), "ones", decay=False), loc=loc)
        return emit("bias_add", h, self.param(spec, f"{role}.beta", (h.width,), "zeros", decay=False), loc=loc)

    def bias(self, spec, h, loc, role="b"):
        # Batch norm subtracts each feature's mean, so a bias before it cancels: its gradient is
        # rounding noise, which Adam would turn into full-size steps.  Batch norm's shift replaces it.
        if not spec.bias or spec.norm == "batch":
            return h
        return self.b.emit("bias_add", h, self.param(spec, role, (h.width,), "zeros"), loc=loc)

    def attention(self, spec: LayerSpec, h, loc):
        """GAT (Velickovic et al.): per head, scores a_src·z_u + a_dst·z_v through leaky ReLU,
        softmax over each node's in-edges, the weighted sum of z_u; heads concatenated or averaged."""
        emit, heads = self.b.emit, spec.heads
        per_head = {"heads": heads} if heads > 1 else {}
        width = dim_mul(spec.out_width, heads)
        init = spec.init or INIT_DEFAULT["GAT"]
        z = emit("linear", h, self.param(spec, "W", (spec.in_width, width), init), loc=loc)
        ss = emit("dot", z, self.param(spec, "a_src", (width,), init), loc=loc, **per_head)
        sd = emit("dot", z, self.param(spec, "a_dst", (width,), init), loc=loc, **per_head)
        s = emit("add", emit("gather", ss, loc=loc, end="src"), emit("gather", sd, loc=loc, end="dst"), loc=loc)
        al = emit("edge_softmax", emit("leaky_relu", s, loc=loc, alpha=0.2), loc=loc)
        if spec.attention_dropout > 0:
            al = emit("dropout", al, loc=loc, p=float(spec.attention_dropout))
        src = emit("gather", z, loc=loc, end="src")
        msg = emit("head_mul", src, al, loc=loc, heads=heads) if heads > 1 else emit("mul", src, al, loc=loc)
        out = emit("scatter", msg, loc=loc, reduce="sum", end="dst")
        if heads > 1 and not spec.concat:
            out = emit("head_mean", out, loc=loc, heads=heads)
        return self.bias(spec, out, loc)

    def weighted_gcn(self, z, self_term: bool, loc):
        """PyG's gcn_norm given edge weights: deg(v) = the weights into v (+ 1 for the node itself,
        unless the graph holds the loops), and the edge u -> v carries w / sqrt(deg(u) deg(v))."""
        training = self.training
        w = training.edge_weights if training is not None else None
        if w is None:
            w = self.b.emit("graph_scalar", loc=loc, kind="edge_weight")
            if training is not None:
                training.edge_weights = w
        return self.b.emit("aggregate", z, w, loc=loc, reduce="sum", norm="gcn_weighted", self_loops=self_term)

    def expand(self, spec: LayerSpec, kind: str, agg: str, h, is_last: bool, loc):
        emit = self.b.emit
        if spec.dropout > 0:
            h = emit("dropout", h, loc=loc, p=float(spec.dropout))
        k, m = spec.in_width, spec.out_width
        init = spec.init or INIT_DEFAULT.get(kind, "glorot")
        if kind == "GCN":
            z = emit("linear", h, self.param(spec, "W", (k, m), init), loc=loc)
            # the self term, unless the graph already holds a loop at every node (gnn.addSelfLoops)
            self_term = not self.program.self_loops
            if spec.edge_weight:
                out = self.weighted_gcn(z, self_term, loc)
            elif agg == "sum":
                out = emit("aggregate", z, loc=loc, reduce="sum", norm="gcn", self_loops=self_term)
            else:
                out = emit("aggregate", z, loc=loc, reduce="mean", norm="none", self_loops=self_term)
            out = self.bias(spec, out, loc)
        elif kind == "SAGE":
            n = emit("aggregate", h, loc=loc, reduce=agg, norm="none", self_loops=False)
            out = emit("add", emit("linear", n, self.param(spec, "W_neigh", (k, m), init), loc=loc),
                       emit("linear", h, self.param(spec, "W_self", (k, m), init), loc=loc), loc=loc)
            out = self.bias(spec, out, loc)
        elif kind == "GIN":
            s = emit("add", h, emit("aggregate", h, loc=loc, reduce=agg, norm="none",
                                    self_loops=False), loc=loc)
            t = emit("linear", s, self.param(spec, "W1", (k, m), init), loc=loc)
            t = emit("relu", self.normalise(spec, self.bias(spec, t, loc, "b1"), loc, "norm1"), loc=loc)
            out = emit("linear", t, self.param(spec, "W2", (m, m), init), loc=loc)
            out = self.bias(spec, out, loc, "b2")
        elif kind == "GAT":
            out = self.attention(spec, h, loc)
        else:                                    # checked before expansion
            raise SemanticError(loc, f"unknown layer kind '{kind}'")
        out = self.normalise(spec, out, loc, "norm2" if kind == "GIN" else "norm")
        act = spec.activation
        if act is None:
            act = "none" if is_last else HIDDEN_DEFAULT[kind]
        return self.activation(out, act, loc)


class DirectiveLowering:
    """Mixed into ``Lowerer``: checks and lowers ``gnn.*`` directive statements."""

    # == directives =========================================================================
    def directive(self, e: A.Call):
        try:
            self._directive(e)
        except (SemanticError, IRError, Poisoned):
            self.train.broken = True     # later ordering complaints would only echo this one
            if e.func.name == "layer":
                self.train.layer_failed = True
            for k in e.kwargs:           # and so would uses of a property it was to assign
                sym = self.scope.lookup(k.value.name) if k.name == "output" and isinstance(k.value, A.Name) else None
                if isinstance(sym, PropSym):
                    sym.poisoned = True
            raise

    def _directive(self, e: A.Call):
        name = e.func.name
        if name not in DIRECTIVES:
            raise SemanticError(e.coord, f"unknown directive 'gnn.{name}'" + suggest(name, DIRECTIVES))
        if self.in_helper:
            raise SemanticError(e.coord, f"gnn.{name} is called in '{self.calling[-1].name}'; the gnn "
                                         "directives belong to the program")
        if name in TRAINING_DIRECTIVES:
            if not self.in_training:
                raise SemanticError(e.coord, f"gnn.{name} must be inside the training loop")
            if self.frame is not None:
                raise SemanticError(e.coord, f"gnn.{name} cannot be inside forall")
        elif self.in_training or self.loop_depth:
            raise SemanticError(e.coord, f"gnn.{name} is a declaration; put it before the "
                                         "training loop, outside loops")
        if self.features is None:
            raise Poisoned()              # the parameter list is already reported
        positional, keywords = DIRECTIVES[name]
        # attempted, even if its arguments fail below: "never calls gnn.loss" would be a cascade
        if name in ("loss", "linkLoss"):
            self.train.loss_called = True
        elif name == "optimizerStep":
            self.train.step_called = True
        kw = {}
        for k in e.kwargs:
            if k.name not in keywords:
                raise SemanticError(k.coord, f"gnn.{name} has no keyword '{k.name}'"
                                    + suggest(k.name, keywords))
            if k.name in kw:
                raise SemanticError(k.coord, f"keyword '{k.name}' is given twice")
            # a property keyword names a property: its symbol, not a value read through an element
            value = self._property_arg(e, k) if keywords[k.name] == "property" else self.expr(k.value)
            kw[k.name] = (value, k.value.coord)
        getattr(self, "d_" + name)(e, kw)

    def _property_arg(self, e, k: A.Keyword) -> PropSym:
        return self._node_property(k.value, f"gnn.{e.func.name}: '{k.name}'", f"{k.name} = h")

    def _node_property(self, arg, where: str, example: str) -> PropSym:
        """The node property ``arg`` names (a directive's argument), or a located error."""
        if not isinstance(arg, A.Name):
            raise SemanticError(arg.coord, f"{where} takes the name of a node property, e.g. {example}")
        sym = self.scope.lookup(arg.name)
        if sym is None:
            raise undeclared(arg.coord, arg.name, self.names_in_scope())
        if isinstance(sym, PoisonSym):
            raise Poisoned()
        if not isinstance(sym, PropSym) or sym.assoc != "node":
            raise SemanticError(arg.coord, f"{where} needs a node property, '{arg.name}' is not one")
        return sym

    def _arity(self, e, counts, usage):
        if len(e.args) not in counts:
            raise SemanticError(e.coord, f"gnn.{e.func.name} takes {usage}, got {len(e.args)} "
                                         "argument(s)")

    def _string_arg(self, e, i, what, choices):
        v = self.expr(e.args[i])
        if not isinstance(v, str):
            raise SemanticError(e.args[i].coord, f"{what} must be a string, got {describe(v)}")
        return check_choice(e.args[i].coord, what, v, choices)

    def _int_arg(self, e, i, what):
        v = self.expr(e.args[i])
        return check_number(e.args[i].coord, what, v, integer=True)

    def d_layer(self, e, kw):
        self._arity(e, (2,), "2 arguments (input width, output width)")
        k, m = self.width(e.args[0]), self.width(e.args[1])
        t = self.train
        idx = len(t.layers)
        prev = t.layers[-1].output_width if t.layers else (self.features.width if self.features else None)
        if prev is not None and not t.layer_failed and widths_conflict(prev, k):
            what = f"layer {idx - 1} output width" if t.layers else "the feature width"
            raise SemanticError(e.args[0].coord, f"layer {idx} input width {k} does not match "
                                                 f"{what} {prev}")
        spec = LayerSpec(idx, k, m, e.coord)
        for key, (v, coord) in kw.items():
            if key == "activation":
                if not isinstance(v, str):
                    raise SemanticError(coord, f"activation must be a string, got {describe(v)}")
                if v in BUILTINS and v not in ACTIVATIONS:     # gelu, softplus, ...: expressions only
                    raise SemanticError(coord, f"activation {show(v)} is not one of gnn.layer's "
                                               f"({', '.join(ACTIVATIONS)}); {v}() serves layers written "
                                               f"out in forall (docs/language.md, section 4.1 writes a layer so)")
                spec.activation = check_choice(coord, "activation", v, ACTIVATIONS)
            elif key == "dropout":
                spec.dropout = float(check_number(coord, "dropout", v, lo=0.0, hi=1.0, hi_open=True))
            elif key in ("bias", "concat", "edge_weight"):
                setattr(spec, key, _flag(coord, key, v))
            elif key == "weight_decay":
                if not isinstance(v, bool):
                    if not isinstance(v, (int, float)):
                        raise SemanticError(coord, f"weight_decay must be true, false or a number, got {describe(v)}")
                    v = float(check_number(coord, "weight_decay", v, lo=0.0))
                spec.weight_decay = v
            elif key == "init":
                if not isinstance(v, str):
                    raise SemanticError(coord, f"init must be a string, got {describe(v)}")
                spec.init = check_choice(coord, "initialiser", v, INITS)
            elif key == "heads":
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    shown = v if isinstance(v, (int, float)) and not isinstance(v, bool) else describe(v)
                    raise SemanticError(coord, f"heads must be a positive integer, got {shown}")
                spec.heads = v
            elif key == "norm":
                if not isinstance(v, str):
                    raise SemanticError(coord, f"norm must be a string, got {describe(v)}")
                spec.norm = check_choice(coord, "normalisation", v, NORMS)
            elif key == "attention_dropout":
                spec.attention_dropout = float(check_number(coord, "attention_dropout", v, lo=0.0, hi=1.0,
                                                            hi_open=True))
        t.layers.append(spec)
        t.layer_failed = False

    def d_weightDecay(self, e, kw):
        """``gnn.weightDecay(W, 5e-4)``: this weight's own decay, whatever the optimizer's."""
        self._arity(e, (2,), "2 arguments (a weight, its decay)")
        arg = e.args[0]
        sym = self.scope.lookup(arg.name) if isinstance(arg, A.Name) else None
        if isinstance(arg, A.Name) and sym is None:
            raise undeclared(arg.coord, arg.name, self.names_in_scope())
        if not isinstance(sym, WeightSym):
            raise SemanticError(arg.coord, "gnn.weightDecay takes the name of a declared weight first")
        param = self.program.param(arg.name)
        if param.weight_decay is not True:
            raise SemanticError(e.coord, f"the decay of weight '{arg.name}' is declared twice")
        param.weight_decay = float(check_number(e.args[1].coord, "weight decay", self.expr(e.args[1]), lo=0.0))

    def d_addSelfLoops(self, e, kw):
        """A graph option, applied to the data once at load time: every node gets an edge to
        itself (where it has none), so aggregations and edge softmax include the node."""
        self._arity(e, (0,), "no arguments")
        if self.program.self_loops:
            raise SemanticError(e.coord, "gnn.addSelfLoops is declared twice")
        self.program.self_loops = True

    def d_earlyStopping(self, e, kw):
        """Model selection on the validation set: train until the validation accuracy has not
        improved for ``patience`` epochs, then keep the weights of its best epoch."""
        self._arity(e, (0,), "no positional arguments (patience = N)")
        if self.program.early_stopping:
            raise SemanticError(e.coord, "gnn.earlyStopping is declared twice")
        patience = 100
        if "patience" in kw:
            value, coord = kw["patience"]
            patience = int(check_number(coord, "patience", value, integer=True, lo=1, hi=1_000_000))
        self.program.early_stopping = patience

    def d_optimizer(self, e, kw):
        self._arity(e, (1,), "1 argument (\"adam\", \"adamw\" or \"sgd\") and keywords")
        kind = self._string_arg(e, 0, "optimizer", OPTIMIZERS)
        if self.train.optimizer is not None:
            raise SemanticError(e.coord, "gnn.optimizer is declared twice")
        opt = Optimizer(kind=kind)
        limits = {"lr": dict(lo=0.0, lo_open=True), "weight_decay": dict(lo=0.0),
                  "beta1": dict(lo=0.0, hi=1.0, hi_open=True),
                  "beta2": dict(lo=0.0, hi=1.0, hi_open=True),
                  "eps": dict(lo=0.0, lo_open=True), "momentum": dict(lo=0.0, hi=1.0, hi_open=True)}
        for key, (v, coord) in kw.items():
            if key == "decay_biases":
                opt.decay_vectors = _flag(coord, key, v)
                continue
            if key == "momentum" and kind != "sgd":
                raise SemanticError(coord, f"momentum applies to sgd, not {kind}")
            if key in ("beta1", "beta2") and kind == "sgd":
                raise SemanticError(coord, f"{key} applies to adam and adamw, not sgd")
            setattr(opt, key, float(check_number(coord, key, v, **limits[key])))
        self.train.optimizer = opt
        self.program.optimizer = opt

    def d_normalizeFeatures(self, e, kw):
        """Input preprocessing, applied to the data once at load time (Kipf & Welling)."""
        self._arity(e, (1,), "1 argument (\"row\")")
        kind = self._string_arg(e, 0, "feature normalisation", FEATURE_NORMALIZATIONS)
        if self.program.feature_normalization is not None:
            raise SemanticError(e.coord, "gnn.normalizeFeatures is declared twice")
        self.program.feature_normalization = kind

    def d_forwardPass(self, e, kw):
        self._arity(e, (3,), "3 arguments (layer, kind, aggregator)")
        l = self._int_arg(e, 0, "the layer index")
        kind = self._string_arg(e, 1, "layer kind", LAYER_KINDS)
        agg_name = self._string_arg(e, 2, "aggregator", AGGREGATORS)
        if kind == "GCN" and agg_name == "Max":
            raise SemanticError(e.args[2].coord, "GCN aggregates with Sum (normalised) or Mean, "
                                                 "not Max")
        if kind == "GAT" and agg_name != "Sum":
            raise SemanticError(e.args[2].coord, "GAT sums attention-weighted messages; use \"Sum\"")
        t = self.train
        spec = t.check_forward(e.coord, l)
        if kind != "GAT":
            for key, unset in (("heads", 1), ("concat", True), ("attention_dropout", 0.0)):
                if getattr(spec, key) != unset:
                    raise SemanticError(e.args[1].coord, f"layer {l} runs {kind}, but '{key}' (declared at "
                                                         f"line {spec.coord.line}) applies to GAT layers only")
        if spec.edge_weight and (kind, agg_name) != ("GCN", "Sum"):
            raise SemanticError(e.args[1].coord, f"layer {l} runs {kind} with {agg_name}, but 'edge_weight' "
                                                 f"(declared at line {spec.coord.line}) applies to GCN layers "
                                                 f"with Sum only (PyG's GCNConv given edge_weight)")
        h = t.h if t.forwarded else self.features
        if "input" in kw:
            h = self._layer_input(l, spec, *kw["input"])
        output = kw.get("output")
        if output is not None and widths_conflict(output[0].width, spec.output_width):
            raise SemanticError(output[1], f"layer {l} outputs {spec.output_width} features, but property "
                                           f"'{output[0].name}' is declared with width {output[0].width}")
        if output is not None and output[0].width != spec.output_width:
            # settled once the dataset's sizes are bound
            self.program.width_claims.append((spec.output_width, output[0].width,
                                              f"property '{output[0].name}' (layer {l}'s output)", output[1]))
        t.forwarded.append(l)
        expander = LayerExpander(self.program, self.b, t)
        t.h = expander.expand(spec, kind, AGGREGATORS[agg_name], h, l == len(t.layers) - 1, e.coord)
        if output is not None:
            sym = output[0]
            if sym.value is self.features or sym.value is self.labels:
                raise SemanticError(output[1], f"'{sym.name}' is a program input; it cannot be assigned")
            sym.value, sym.poisoned = t.h, False

    def _layer_input(self, l: int, spec, sym: PropSym, coord):
        """The property a layer reads instead of the previous layer's output (``input = h``)."""
        if sym.poisoned:
            raise Poisoned()
        if sym.value is None:
            raise SemanticError(coord, f"property '{sym.name}' is read before it is assigned")
        if sym.dtype != "f32":
            raise SemanticError(coord, f"'{sym.name}' holds labels, not features")
        if widths_conflict(sym.width, spec.in_width):
            raise SemanticError(coord, f"layer {l} takes {spec.in_width} features, but property "
                                       f"'{sym.name}' has width {sym.width}")
        return sym.value

    def d_loss(self, e, kw):
        t = self.train
        t.loss_called = True
        self._arity(e, (1, 2), "1 argument (kind) after forwardPass, or 2 (output property, kind)")
        if t.loss_done:
            raise SemanticError(e.coord, "gnn.loss is called twice in one epoch")
        kind_at = len(e.args) - 1
        self._string_arg(e, kind_at, "loss", LOSSES)
        if self.labels is None:
            raise SemanticError(e.coord, "gnn.loss needs labels: the program has no 'propNode<int[C]> y' "
                                         "parameter (link prediction uses gnn.linkLoss)")
        if len(e.args) == 1:
            t.check_loss_directive_style(e.coord)
            logits, where = t.h, e.coord
        else:
            arg = e.args[0]
            logits, where = self._node_property_value(arg, "gnn.loss"), arg.coord
        classes = self.labels_classes
        if classes is not None and widths_conflict(logits.width, classes):
            raise SemanticError(where, f"the loss needs one logit per class ({classes}), but the "
                                       f"output has width {logits.width}")
        # The class count goes with the loss so that a width only the dataset reveals (C) is
        # still checked, and located here, when the sizes are bound.
        extra = {"classes": classes} if classes is not None else {}
        loss = self.b.emit("cross_entropy", logits, self.labels, loc=e.coord, name="loss", **extra)
        self.program.loss, self.program.logits = loss, logits
        t.loss_done = True

    def d_linkLoss(self, e, kw):
        """gnn.linkLoss(z, R, "distmult", regularization = r): link prediction over the run's
        triples (positives and per-epoch negatives, set by the runtime)."""
        t = self.train
        t.loss_called = True
        self._arity(e, (3,), "3 arguments (node embeddings, relation weight, decoder)")
        if t.loss_done:
            raise SemanticError(e.coord, "a loss is already computed in this epoch")
        if self.labels is not None:
            raise SemanticError(e.coord, "a link-prediction program takes no labels: drop the "
                                         "'propNode<int[C]> y' parameter")
        if self.program.early_stopping:
            raise SemanticError(e.coord, "gnn.earlyStopping selects by validation accuracy, which a "
                                         "link-prediction program does not have")
        z = self._node_property_value(e.args[0], "gnn.linkLoss")
        arg = e.args[1]
        sym = self.scope.lookup(arg.name) if isinstance(arg, A.Name) else None
        if isinstance(sym, PoisonSym):
            raise Poisoned()
        rel = sym.value if isinstance(sym, WeightSym) else None
        if rel is None or rel.domain != "etype" or len(rel.shape) != 2:
            raise SemanticError(arg.coord, "gnn.linkLoss: the relations must be a per-edge-type weight "
                                           "weight<float[g.etypes][H]> (row r scores relation r)")
        if widths_conflict(z.width, rel.shape[1]):
            raise SemanticError(arg.coord, f"gnn.linkLoss: the embeddings have width {z.width}, the "
                                           f"relation rows {rel.shape[1]}")
        self._string_arg(e, 2, "decoder", LINK_DECODERS)
        reg = 0.0
        if "regularization" in kw:
            value, coord = kw["regularization"]
            reg = float(check_number(coord, "regularization", value, lo=0.0))
        if "negatives" in kw:
            value, coord = kw["negatives"]
            self.program.negatives = int(check_number(coord, "negatives", value, integer=True, lo=1, hi=1000))
        loss = self.b.emit("link_loss", z, rel, loc=e.coord, name="loss", regularization=reg)
        self.program.loss, self.program.logits, self.program.task = loss, z, "link"
        t.loss_done = True

    def _node_property_value(self, arg, where: str):
        """The current value of the node property ``arg`` names: the model output a loss takes."""
        sym = self._node_property(arg, where, f"{where}(out, ...)")
        if sym.poisoned:
            raise Poisoned()
        if sym.value is None:
            raise SemanticError(arg.coord, f"property '{arg.name}' is read before it is assigned")
        if sym.value is self.labels or sym.value is self.features:
            raise SemanticError(arg.coord, f"'{arg.name}' is a program input, not the model output")
        return sym.value

    def d_backPropagation(self, e, kw):
        self._arity(e, (0, 1), "no argument, or the layer index")
        l = self._int_arg(e, 0, "the layer index") if e.args else None
        self.train.check_backprop(e.coord, l)

    def d_optimizerStep(self, e, kw):
        self.train.step_called = True
        self._arity(e, (0,), "no arguments")
        self.train.check_step(e.coord)
        self.train.step_done = True
