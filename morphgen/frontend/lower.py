"""Lowering: walk the AST once, statically unrolling loops, and emit SSA IR.

Semantic checks happen on the way (see ``sema.py``): each statement is checked and lowered as
a unit; an error is reported with its location and the walk continues with the next
statement.  Only data-independent control flow is allowed: loop bounds and ``if`` conditions
must be compile-time constants.  The training loop (the top-level ``for`` that calls the
``gnn.*`` training directives) is lowered ONCE: its body is one epoch and its trip count
becomes ``Program.epochs``.
"""
from __future__ import annotations

from ..ir import IRError, Param, Program
from ..ir_ops import Builder
from ..grammar import ast as A
from .calls import CallLowering
from .directives import TRAINING_DIRECTIVES, DirectiveLowering, TrainingState
from .expressions import (ExpressionLowering, is_directive, is_rows, source_text,
                          widths_conflict)
from .sema import (BUILTINS, INITS, ConstSym, ElemSym, GraphSym, LocalSym, PoisonSym, Poisoned, PropSym,
                   Scope, SemanticError, SizeSym, WeightSym, check_choice, declared_name_problem,
                   describe, identifier_problem, undeclared, unassigned)
from .values import ElemRef, Iteration, TypeCount

STATEMENT_BUDGET = 100_000      # statements executed while unrolling, over the whole program
LOOP_LIMIT = 10_000             # iterations of one statically unrolled loop
EPOCH_LIMIT = 10_000_000        # trip count of the training loop

# C's jumps, which the language has no use for: a program is straight-line code per epoch.
UNSUPPORTED_JUMPS = {
    "return": "a function ends at its closing brace; a helper's results are the properties it assigns",
    "break": "loops run their compile-time trip count in full",
    "continue": "loops run their compile-time trip count in full",
}


class _Abort(Exception):
    """Stop lowering altogether (the unrolling budget is exhausted)."""


class Lowerer(ExpressionLowering, DirectiveLowering, CallLowering):
    def __init__(self, sink):
        self.sink = sink
        self.program: Program | None = None
        self.b: Builder | None = None
        self.scope = Scope()
        self.frame = None                 # None (function level) | "node" | "edge"
        self.loop_depth = 0
        self.in_training = False
        self.budget = STATEMENT_BUDGET
        self.train = TrainingState()
        self.features = None
        self.labels = None
        self.labels_classes = None        # the IR symbol bound to the number of classes
        self._gathers: dict = {}
        self._scalars: dict = {}
        self._training: dict = {}         # node -> whether it calls a training directive
        self.current = None               # the coordinate of the statement being lowered
        self.batch_norms = 0              # batch_norm calls so far: names their running statistics
        self.stores: list = []            # (coord, property, value) of every property assignment

    # == entry ==============================================================================
    def lower_module(self, module: A.Module):
        if not module.functions:
            return None
        fn = self.collect_functions(module)     # the function no other one calls
        if fn is None:
            return None
        self.program = Program(name=fn.name)
        self.b = Builder(self.program)
        if identifier_problem(fn.name):     # reported by collect_functions
            self.program.name = "program"
        try:
            self._params(fn)
            self._body(fn)
        except _Abort:
            pass
        if self.sink:
            return None
        self.warn_unused_stores()
        return self.program

    def warn_unused_stores(self):
        """A property assignment whose value neither the loss nor the output depends on is
        dropped with the rest of the dead forward ops: say so, once per statement (a helper
        called twice assigns twice; the statement counts as used if either value is)."""
        needed = self.program.needed_value_ids()
        used = {}                         # statement -> whether any of its stores is needed
        for coord, _, value in self.stores:
            key = (coord.line, coord.col)
            used[key] = used.get(key, False) or value.id in needed
        for coord, name, _ in self.stores:
            if not used.pop((coord.line, coord.col), True):       # each statement said once
                self.sink.warning(coord, f"'{name}' is assigned here, but neither the loss nor the output "
                                         f"depends on it: the statement is dropped")

    def _params(self, fn: A.Function):
        graph = None
        for p in fn.params:
            try:
                graph = self._param(p, graph)
            except SemanticError as e:
                self.sink.error(e.coord, e.message)
                # One error per mistake: uses of the parameter stay silent, and a Graph
                # parameter with a bad name still counts as the graph.
                self.scope.names.setdefault(p.name, PoisonSym(p.name, p.coord))
                if p.type.kind == "Graph" and graph is None:
                    graph = p.name
            except Poisoned:
                pass
        if graph is None:
            self.sink.error(fn.coord, f"function '{fn.name}' needs a 'Graph' parameter")
        if self.features is None:
            self.sink.error(fn.coord, f"function '{fn.name}' needs a features parameter "
                                      "'propNode<float[F]> x'")

    def _param(self, p: A.Param, graph):
        t = p.type
        if t.kind == "Graph":
            if graph is not None:
                raise SemanticError(p.coord, "only one Graph parameter is supported")
            self.scope.declare(GraphSym(p.name, p.coord))
            return p.name
        if t.kind != "propNode":
            raise SemanticError(t.coord, f"parameters of type '{t.kind}' are not supported; "
                                         "the parameters are Graph g, propNode<float[F]> x "
                                         "(features) and propNode<int[C]> y (labels)")
        if t.elem == "float":
            if self.features is not None:
                raise SemanticError(p.coord, "a second float node parameter; only one features "
                                             "input is supported")
            if len(t.dims) != 1:
                raise SemanticError(t.coord, "the features parameter needs one width: "
                                             "propNode<float[F]>")
            width = self._param_dim(t.dims[0], "F")
            value = self.program.new_value("node", (width,), "f32", name="features")
            self.features = value
            self.program.inputs["features"] = value
            self.scope.declare(PropSym(p.name, p.coord, assoc="node", width=width, value=value))
            return graph
        if t.elem == "int":
            if self.labels is not None:
                raise SemanticError(p.coord, "a second int node parameter; only one labels "
                                             "input is supported")
            if len(t.dims) > 1:
                raise SemanticError(t.coord, "the labels parameter takes at most one size: "
                                             "propNode<int[C]>")
            if t.dims:
                self.labels_classes = self._param_dim(t.dims[0], "C")
            value = self.program.new_value("node", (1,), "i64", name="labels")
            self.labels = value
            self.program.inputs["labels"] = value
            self.scope.declare(PropSym(p.name, p.coord, assoc="node", width=1, dtype="i64",
                                       value=value))
            return graph
        raise SemanticError(t.coord, f"node parameters must hold float features or int labels, "
                                     f"not '{t.elem}'")

    def _param_dim(self, dim, ir_name):
        """A parameter's size: a new size symbol (bound from the data) or a literal width."""
        if isinstance(dim, A.Name):
            try:
                self.scope.declare(SizeSym(dim.name, dim.coord, ir_name=ir_name))
            except SemanticError as e:
                self.sink.error(e.coord, e.message)
                self.scope.names.setdefault(dim.name, PoisonSym(dim.name, dim.coord))
            return ir_name
        return self.width(dim)

    def _body(self, fn: A.Function):
        stmts = fn.body.stmts
        loop_at = next((i for i, s in enumerate(stmts)
                        if isinstance(s, A.For) and self.calls_training(s)), None)
        if loop_at is None:
            for s in stmts:
                self.stmt(s)
            self.sink.error(fn.coord, "no training loop: write the epoch body inside "
                                      "'for (int epoch = 0; epoch < N; epoch++) { ... }' with "
                                      "gnn.loss, gnn.backPropagation and gnn.optimizerStep")
            return
        for s in stmts[:loop_at]:
            self.stmt(s)
        self.epoch_loop(stmts[loop_at])
        for s in stmts[loop_at + 1:]:
            self.sink.error(s.coord, "statements after the training loop are not supported")
            break

    # == statements =========================================================================
    def stmt(self, s):
        self.current = s.coord
        self.budget -= 1
        if self.budget < 0:
            self.sink.error(s.coord, f"the program unrolls to more than {STATEMENT_BUDGET} "
                                     "statements")
            raise _Abort()
        try:
            getattr(self, "s_" + type(s).__name__)(s)
        except SemanticError as e:
            self.sink.error(e.coord, e.message)
            self.poison_assigned(s)
        except IRError as e:
            self.sink.error(e.loc if isinstance(e.loc, A.Coord) else s.coord, e.message)
            self.poison_assigned(s)
        except Poisoned:
            self.poison_assigned(s)

    def _poison_property_args(self, e: A.Call) -> None:
        for arg in e.args:
            sym = self.scope.lookup(arg.name) if isinstance(arg, A.Name) else None
            if isinstance(sym, PropSym):
                sym.poisoned = True

    def poison_assigned(self, s):
        """After a failed statement, the properties it would have assigned stay silent, and
        so do complaints about the order of the directives it contained."""
        if isinstance(s, (A.Assign, A.Decl, A.ExprStmt)):
            return                     # these poison their own target precisely
        if self.calls_training(s):
            self.train.broken = True
        for n in A.walk(s):
            if isinstance(n, A.Assign) and isinstance(n.target, A.Attr):
                sym = self.scope.lookup(n.target.name)
                if isinstance(sym, PropSym):
                    sym.poisoned = True

    def block(self, stmts, scope=None):
        saved = self.scope
        self.scope = scope or Scope(saved)
        try:
            for s in stmts:
                self.stmt(s)
        finally:
            self.scope = saved

    def s_Block(self, s):
        self.block(s.stmts)

    def s_ExprStmt(self, s):
        e = s.expr
        if isinstance(e, A.Call) and is_directive(e):
            self.directive(e)
            return
        if self.is_function_call(e):
            self.call_function(e)
            return
        if isinstance(e, A.Call):
            try:
                self.expr(e)
            except SemanticError:
                if isinstance(e.func, A.Name) and e.func.name not in BUILTINS:
                    self._poison_property_args(e)      # a misspelt helper: its outputs stay silent
                raise
            raise SemanticError(s.coord, f"the result of {source_text(e)} is unused")
        if isinstance(e, A.Name) and e.name in UNSUPPORTED_JUMPS:
            raise SemanticError(s.coord, f"'{e.name}' is not supported: {UNSUPPORTED_JUMPS[e.name]}")
        raise SemanticError(s.coord, "this statement has no effect")

    def s_Decl(self, s):
        for d in s.declarators:
            try:
                self.declare(s.type, d)
                continue
            except SemanticError as e:
                self.sink.error(e.coord, e.message)
            except IRError as e:
                self.sink.error(e.loc if isinstance(e.loc, A.Coord) else d.coord, e.message)
            except Poisoned:
                pass
            if d.name not in self.scope.names:
                self.scope.names[d.name] = PoisonSym(d.name, d.coord)

    def declare(self, t: A.TypeSpec, d: A.Declarator):
        if t.kind == "Graph":
            raise SemanticError(t.coord, "a Graph can only be a function parameter")
        if t.kind in ("int", "float", "bool"):
            return self.declare_scalar(t, d)
        if self.frame is not None:
            raise SemanticError(t.coord, f"{t.kind} declarations are not allowed inside forall")
        if t.kind in ("propNode", "propEdge"):
            return self.declare_property(t, d)
        return self.declare_weight(t, d)

    def declare_scalar(self, t, d):
        if d.init is None:       # no value until assigned: reading it first is an error, not a 0
            self.scope.declare(ConstSym(d.name, d.coord, type=t.kind, value=None))
            return
        value = self.expr(d.init)
        if is_rows(value):
            if self.frame is None:
                raise SemanticError(d.init.coord, "a per-row value needs a forall")
            self.scope.declare(LocalSym(d.name, d.coord, value=value))
            return
        value = self.coerce(d.init.coord, t.kind, value, d.name)
        self.scope.declare(ConstSym(d.name, d.coord, type=t.kind, value=value))

    def coerce(self, coord, kind, value, name):
        if kind == "bool":
            if not isinstance(value, bool):
                raise SemanticError(coord, f"'{name}' is a bool; cannot assign {describe(value)}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SemanticError(coord, f"'{name}' is {'an int' if kind == 'int' else 'a float'}; "
                                       f"cannot assign {describe(value)}")
        if kind == "int":
            if not isinstance(value, int):
                raise SemanticError(coord, f"'{name}' is an int; cannot assign the number {value!r}")
            return value
        return float(value)

    def declare_property(self, t, d):
        if d.init is not None:
            raise SemanticError(d.init.coord, "a property declaration takes no initial value; "
                                              "assign it inside forall")
        if t.elem != "float":
            raise SemanticError(t.coord, f"properties hold float values, not '{t.elem}'")
        if len(t.dims) > 1:
            raise SemanticError(t.dims[1].coord, "a property has at most one width")
        width = self.width(t.dims[0]) if t.dims else 1
        assoc = "node" if t.kind == "propNode" else "edge"
        self.scope.declare(PropSym(d.name, d.coord, assoc=assoc, width=width))

    def declare_weight(self, t, d):
        if self.in_helper:
            raise SemanticError(d.coord, f"weight '{d.name}' is declared in '{self.calling[-1].name}'; "
                                         "declare weights in the program and pass "
                                         "them as arguments")
        if self.loop_depth or self.scope.parent is not None:
            raise SemanticError(d.coord, f"weight '{d.name}' must be declared at the top of the "
                                         "function, outside loops and blocks")
        if t.elem != "float":
            raise SemanticError(t.coord, f"weights hold float values, not '{t.elem}'")
        problem = declared_name_problem(d.name)
        if problem:
            raise SemanticError(d.coord, problem)
        domain, dims = None, list(t.dims)
        if not dims:
            raise SemanticError(t.coord, f"weight '{d.name}' needs a shape, e.g. weight<float[16][C]>")
        first = self.expr(dims[0])
        if isinstance(first, TypeCount):
            domain = first.domain
            dims = dims[1:]
        shape = tuple(self.width(x) for x in dims)
        if domain is None and len(shape) not in (1, 2, 3):
            raise SemanticError(t.coord, f"weight '{d.name}' must be a vector [M], a matrix [K][M] "
                                         f"or bases [B][K][M], got {len(shape)} dimensions")
        if domain is not None and len(shape) not in (1, 2, 3):
            raise SemanticError(t.coord, f"typed weight '{d.name}' must be [g.{domain}s][K], "
                                         f"[g.{domain}s][K][M] or [g.{domain}s][B][D][M], got {len(shape)} "
                                         "dimensions after the type dimension")
        blocks = 1
        if domain is not None and len(shape) == 3:    # B diagonal blocks of D x M per type
            blocks, block_rows, block_cols = shape
            for size, dim in zip(shape, dims):
                if not isinstance(size, int):
                    raise SemanticError(dim.coord, f"a block-diagonal weight's sizes must be numbers, "
                                                   f"not '{source_text(dim)}'")
            shape = (blocks * block_rows, block_cols)
        if domain is not None:
            shape = (domain + "s",) + shape
        init = "glorot" if len(shape) >= 2 else "zeros"
        if d.init is not None:
            if not isinstance(d.init, A.Name):
                raise SemanticError(d.init.coord, f"weight initialiser must be one of "
                                                  f"{', '.join(INITS)}")
            try:
                init = check_choice(d.init.coord, "initialiser", d.init.name, INITS)
            except SemanticError as err:      # report, keep the weight so its uses stay quiet
                self.sink.error(err.coord, err.message)
        value = self.program.new_value("param", shape, "f32", name=d.name, domain=domain)
        self.scope.declare(WeightSym(d.name, d.coord, value=value))
        self.program.params.append(Param(d.name, value, init, blocks=blocks))

    def s_Assign(self, s):
        target = s.target
        if isinstance(target, A.Name):
            return self.assign_name(s)
        if not isinstance(target, A.Attr):
            raise SemanticError(s.coord, "only variables and properties (v.h) can be assigned")
        obj = self.expr(target.obj)
        if not isinstance(obj, ElemRef) or obj.end != "self":
            raise SemanticError(target.coord, f"only a property of the current element can be "
                                              f"assigned (v.{target.name}), not of {describe(obj)}")
        sym = self.scope.lookup(target.name)
        if isinstance(sym, PoisonSym):
            raise Poisoned()
        if not isinstance(sym, PropSym) and target.name in self.builtin_properties(obj):
            raise SemanticError(target.coord, f"'{target.name}' is a builtin property of every {obj.kind}; "
                                              f"it cannot be assigned (declare a property of your own)")
        if not isinstance(sym, PropSym):
            raise self.no_property(target.coord, obj, target.name)
        if sym.assoc != obj.kind:
            raise self.wrong_property_kind(target.coord, obj, sym)
        if sym.value is not None and sym.value in (self.features, self.labels):
            raise SemanticError(target.coord, f"'{sym.name}' is a program input; it cannot be assigned")
        if s.op != "=":
            raise SemanticError(s.coord, f"properties are assigned with '=', not '{s.op}'")
        try:
            value = self.rows(self.expr(s.value), s.value)
            if value.assoc != sym.assoc:
                raise SemanticError(s.value.coord, f"property '{sym.name}' holds {sym.assoc} values, "
                                                   f"got {describe(value)}")
            if widths_conflict(sym.width, value.width):
                raise SemanticError(s.value.coord, f"property '{sym.name}' is declared with width "
                                                   f"{sym.width}, but the value has width {value.width}")
            if sym.width != value.width:         # equal or not once the dataset's sizes are bound
                self.program.width_claims.append((value.width, sym.width, f"property '{sym.name}'", s.value.coord))
        except BaseException:
            sym.poisoned = True
            raise
        if not value.name:
            value.name = sym.name
        sym.value, sym.poisoned = value, False
        self.stores.append((s.coord, sym.name, value))

    def assign_name(self, s):
        name = s.target.name
        sym = self.scope.lookup(name)
        if sym is None:
            raise undeclared(s.target.coord, name, self.names_in_scope())
        if isinstance(sym, PoisonSym):
            raise Poisoned()
        if isinstance(sym, ConstSym):
            if sym.dynamic:
                raise SemanticError(s.target.coord, f"the epoch counter '{name}' cannot be assigned")
            if s.op != "=" and sym.value is None:
                raise unassigned(s.target.coord, name)
            if s.op in ("++", "--"):
                new = self.binop(s.coord, s.op[0], sym.value, 1)
            elif s.op == "=":
                new = self.expr(s.value)
            else:
                new = self.binop(s.coord, s.op[0], sym.value, self.expr(s.value))
            if is_rows(new):
                raise SemanticError(s.coord, f"'{name}' is a compile-time {sym.type}; it cannot "
                                             "hold a per-row value")
            sym.value = self.coerce(s.coord, sym.type, new, name)
            return
        if isinstance(sym, LocalSym):
            if s.op != "=":
                raise SemanticError(s.coord, f"per-row temporaries are assigned with '=', not '{s.op}'")
            sym.value = self.rows(self.expr(s.value), s.value)
            return
        if isinstance(sym, PropSym):
            raise SemanticError(s.target.coord, f"'{name}' is a property; assign it per element "
                                                f"inside forall (v.{name} = ...)")
        if isinstance(sym, WeightSym):
            raise SemanticError(s.target.coord, f"'{name}' is a weight; weights are trained, "
                                                "not assigned")
        raise SemanticError(s.target.coord, f"'{name}' cannot be assigned")

    def condition(self, e) -> bool:
        v = self.expr(e)
        if is_rows(v):
            raise SemanticError(e.coord, "conditions must be compile-time constants; "
                                         "data-dependent control flow is not supported")
        if isinstance(v, bool):
            return v
        if isinstance(v, (int, float)):
            return v != 0
        raise SemanticError(e.coord, f"a condition must be a boolean, got {describe(v)}")

    def s_If(self, s):
        if self.condition(s.cond):
            self.block(s.then.stmts)
        elif s.orelse is not None:
            self.block(s.orelse.stmts)

    def s_While(self, s):
        self.loop_depth += 1
        try:
            for _ in range(LOOP_LIMIT):
                if not self.condition(s.cond):
                    return
                self.unrolled_body(s.body)
            if self.condition(s.cond):       # a loop of exactly LOOP_LIMIT iterations is fine
                raise SemanticError(s.coord, f"loop does not finish within {LOOP_LIMIT} iterations")
        finally:
            self.loop_depth -= 1

    def unrolled_body(self, body):
        """One unrolled iteration; an error in it stops the loop (the next iterations would
        repeat it, and the loop's effects are incomplete anyway)."""
        before = len(self.sink.items)
        self.block(body.stmts)
        if len(self.sink.items) > before:
            raise Poisoned()

    def s_For(self, s):
        if self.calls_training(s) and not self.in_training:
            raise SemanticError(s.coord, "the training loop must be a top-level statement of "
                                         "the function")
        saved = self.scope
        self.scope = Scope(saved)
        self.loop_depth += 1
        try:
            self.loop_init(s.init)
            for _ in range(LOOP_LIMIT):
                if not self.condition(s.cond):
                    return
                self.unrolled_body(s.body)
                self.s_Assign(s.step) if isinstance(s.step, A.Assign) else self.bad_step(s.step)
            if self.condition(s.cond):       # a loop of exactly LOOP_LIMIT iterations is fine
                raise SemanticError(s.coord, f"loop does not finish within {LOOP_LIMIT} iterations")
        finally:
            self.loop_depth -= 1
            self.scope = saved

    def loop_init(self, init):
        if isinstance(init, A.Decl):
            for d in init.declarators:
                self.declare(init.type, d)
        elif isinstance(init, A.Assign):
            self.s_Assign(init)
        else:
            raise SemanticError(init.coord, "a for loop starts with a declaration or an assignment")

    def bad_step(self, step):
        raise SemanticError(step.coord, "a for loop step must be an assignment such as i++")

    def epoch_loop(self, s: A.For):
        """The training loop: count its trips, lower its body once as one epoch."""
        scope = Scope(self.scope)
        saved = self.scope
        self.scope = scope
        try:
            init = s.init
            if not (isinstance(init, A.Decl) and len(init.declarators) == 1
                    and init.type.kind == "int"):
                raise SemanticError(init.coord, "the training loop must declare its counter: "
                                                "for (int epoch = 0; epoch < N; epoch++)")
            self.loop_init(init)
            counter = scope.names[init.declarators[0].name]
            if counter.value is None:       # for (int epoch; ...): nothing to count from
                raise SemanticError(init.coord, "the training loop's counter needs a start value: "
                                                "for (int epoch = 0; epoch < N; epoch++)")
            epochs = self.count_epochs(s, counter)
            if epochs == 0:
                raise SemanticError(s.cond.coord, "the training loop runs zero epochs")
            self.program.epochs = epochs
            counter.dynamic = True
        except SemanticError as e:
            self.sink.error(e.coord, e.message)
            self.scope = saved
            return
        except Poisoned:
            self.scope = saved
            return
        self.in_training = True
        self.loop_depth += 1
        try:
            self.block(s.body.stmts)
        finally:
            self.in_training = False
            self.loop_depth -= 1
            self.scope = saved
        t = self.train
        if not t.loss_called:
            self.sink.error(s.coord, "the training loop never calls gnn.loss")
        elif not t.step_called:
            self.sink.error(s.coord, "the training loop never calls gnn.optimizerStep")

    def count_epochs(self, s: A.For, counter: ConstSym) -> int:
        """Trip count of the training loop: closed form for 'i OP bound; i += step' loops,
        otherwise by stepping the counter (without running the body)."""
        closed = self._closed_form_trips(s, counter)
        if closed is not None:
            return closed
        epochs = 0
        while self.condition(s.cond):
            epochs += 1
            if epochs > LOOP_LIMIT:
                raise SemanticError(s.coord, "cannot count the epochs of this training loop; "
                                             "write it as for (int epoch = 0; epoch < N; epoch++)")
            if not isinstance(s.step, A.Assign):
                self.bad_step(s.step)
            self.s_Assign(s.step)
        return epochs

    def _closed_form_trips(self, s: A.For, counter: ConstSym):
        cond, step = s.cond, s.step
        if not (isinstance(cond, A.BinOp) and cond.op in ("<", "<=", ">", ">=")
                and isinstance(cond.left, A.Name) and cond.left.name == counter.name
                and isinstance(step, A.Assign) and isinstance(step.target, A.Name)
                and step.target.name == counter.name):
            return None
        bound = self.expr(cond.right)
        if isinstance(bound, bool) or not isinstance(bound, int):
            return None
        if step.op in ("++", "--"):
            d = 1 if step.op == "++" else -1
        elif step.op in ("+=", "-="):
            d = self.expr(step.value)
            if isinstance(d, bool) or not isinstance(d, int):
                return None
            d = d if step.op == "+=" else -d
        else:
            return None
        start = counter.value
        span = {"<": bound - start, "<=": bound - start + 1,
                ">": start - bound, ">=": start - bound + 1}[cond.op]
        if span <= 0:
            return 0
        towards = d if cond.op in ("<", "<=") else -d
        if towards <= 0:
            raise SemanticError(s.coord, "the training loop never ends: its step moves the "
                                         "counter away from the bound")
        trips = -(-span // towards)
        if trips > EPOCH_LIMIT:
            raise SemanticError(s.coord, f"the training loop runs {trips} epochs; the limit is "
                                         f"{EPOCH_LIMIT}")
        return trips

    def s_Forall(self, s):
        if self.frame is not None:
            raise SemanticError(s.coord, "forall cannot be nested inside another forall")
        dom = self.expr(s.domain)
        if not isinstance(dom, Iteration) or dom.what not in ("nodes", "edges"):
            raise SemanticError(s.domain.coord, f"forall iterates over g.nodes() or g.edges(), "
                                                f"not {describe(dom)}")
        kind = "node" if dom.what == "nodes" else "edge"
        scope = Scope(self.scope)
        scope.declare(ElemSym(s.var, s.var_coord, kind=kind, end="self"))
        self.frame = kind
        self.loop_depth += 1
        try:
            self.block(s.body.stmts, scope)
        finally:
            self.frame = None
            self.loop_depth -= 1

    def calls_training(self, node) -> bool:
        """Whether ``node`` contains a training directive.  Remembered per node: an unrolled
        loop asks again on every iteration, and each answer walks the whole subtree."""
        if node not in self._training:
            self._training[node] = any(
                isinstance(n, A.Call) and is_directive(n) and n.func.name in TRAINING_DIRECTIVES
                for n in A.walk(node))
        return self._training[node]
