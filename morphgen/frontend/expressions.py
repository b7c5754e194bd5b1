"""Lowering of .mp expressions to IR values (the expression half of ``lower.Lowerer``).

An expression evaluates to a Python constant (compile-time arithmetic), an IR ``Value``
(a node/edge tensor or a weight), or one of the markers in ``values.py`` (an element variable,
a typed slice ``W[e.etype]``, an iteration set, a size symbol).  Operators pick the IR op from
what their operands are: ``x * W`` is ``linear``, ``x * W[e.etype]`` is ``typed_linear``, two
values give elementwise ``mul`` and so on.
"""
from __future__ import annotations

import operator

from ..ir import Param, Value
from ..grammar import ast as A
from ..grammar.diagnostics import suggest
from ..ir_core import dim_div
from .sema import (ACTIVATIONS, AGGREGATORS, BUILTIN_KEYWORDS, BUILTINS, EDGE_BUILTIN_ATTRS, GRAPH_ATTRS, GRAPH_METHODS,
                   NODE_BUILTIN_ATTRS, NODE_METHODS, REQUIRED_KEYWORDS, ConstSym, ElemSym, GraphSym, LocalSym,
                   SUGGESTION_LIMIT, PoisonSym, Poisoned, PropSym, Scope, SemanticError, SizeSym,
                   WeightSym, check_number, describe, undeclared, unassigned)
from .values import ElemRef, GraphRef, Iteration, SizeRef, TypeCount, TypeIndex, TypedSlice

_FOLD = {"+": operator.add, "-": operator.sub, "*": operator.mul, "<": operator.lt,
         ">": operator.gt, "<=": operator.le, ">=": operator.ge, "==": operator.eq,
         "!=": operator.ne}


def is_rows(v) -> bool:
    return isinstance(v, Value) and v.assoc in ("node", "edge")


def is_const(v) -> bool:
    return isinstance(v, (int, float, bool)) and not isinstance(v, Value)


def widths_conflict(a, b) -> bool:
    """Two widths that cannot be equal: different integers or different size symbols."""
    return a != b and type(a) is type(b)


def source_text(node) -> str:
    """A short source-like rendering of an expression for messages."""
    if isinstance(node, A.Name):
        return node.name
    if isinstance(node, A.Attr):
        return f"{source_text(node.obj)}.{node.name}"
    if isinstance(node, A.Index):
        return f"{source_text(node.obj)}[{source_text(node.index)}]"
    if isinstance(node, A.Call):
        return f"{source_text(node.func)}(...)"
    if isinstance(node, A.Num):
        return repr(node.value)
    if isinstance(node, A.Reduce):
        return f"{node.kind}(...)"
    if isinstance(node, A.BinOp):
        return f"({source_text(node.left)} {node.op} {source_text(node.right)})"
    return "expression"


def running_statistics(program, prefix: str, width):
    """Batch norm's running mean and variance: untrainable params ``PREFIX.running_mean`` /
    ``PREFIX.running_var`` (zeros and ones, as torch), updated by the training forward."""
    out = []
    for role, init in (("running_mean", "zeros"), ("running_var", "ones")):
        value = program.new_value("param", (width,), name=f"{prefix}.{role}")
        program.params.append(Param(f"{prefix}.{role}", value, init, weight_decay=False, trainable=False))
        out.append(value)
    return tuple(out)


def _is_bases(v) -> bool:
    """An untyped [B][K][M] weight: bases, usable only in a basis combination ``A * V``."""
    return isinstance(v, Value) and v.assoc == "param" and v.domain is None and len(v.shape) == 3


def is_bias(v) -> bool:
    return isinstance(v, Value) and v.assoc == "param" and len(v.shape) == 1 and v.domain is None


def is_directive(e: A.Call) -> bool:
    f = e.func
    return isinstance(f, A.Attr) and isinstance(f.obj, A.Name) and f.obj.name == "gnn"


class ExpressionLowering:
    """Mixed into ``Lowerer``; uses its ``scope``, ``frame`` (None/node/edge) and builder ``b``."""

    # == expressions ========================================================================
    def expr(self, e):
        return getattr(self, "e_" + type(e).__name__)(e)

    def e_Num(self, e):
        return e.value

    def e_Bool(self, e):
        return e.value

    def e_Str(self, e):
        return e.value

    def e_Keyword(self, e):
        raise SemanticError(e.coord, "keyword arguments are only accepted by gnn directives")

    def e_Name(self, e):
        sym = self.scope.lookup(e.name)
        if sym is None and e.name in BUILTINS:
            raise SemanticError(e.coord, f"'{e.name}' is a function: call it ({e.name}(...)); a layer's "
                                         f"activation is named by a string (activation = \"{e.name}\")"
                                if e.name in ACTIVATIONS else f"'{e.name}' is a function: call it ({e.name}(...))")
        if sym is None:
            raise undeclared(e.coord, e.name, self.names_in_scope(BUILTINS))
        if isinstance(sym, PoisonSym):
            raise Poisoned()
        if isinstance(sym, ConstSym):
            if sym.dynamic:
                raise SemanticError(e.coord, f"the epoch counter '{e.name}' is not a compile-time "
                                             "value: the training loop body describes every epoch")
            if sym.value is None:
                raise unassigned(e.coord, e.name)
            return sym.value
        if isinstance(sym, SizeSym):
            return SizeRef(sym.name, sym.ir_name)
        if isinstance(sym, GraphSym):
            return GraphRef(sym.name)
        if isinstance(sym, WeightSym):
            return sym.value
        if isinstance(sym, LocalSym):
            return sym.value
        if isinstance(sym, ElemSym):
            return ElemRef(sym.name, sym.kind, sym.end)
        if isinstance(sym, PropSym):
            raise SemanticError(e.coord, f"'{e.name}' is a property; read it through an element "
                                         f"(v.{e.name})")
        raise SemanticError(e.coord, f"'{e.name}' cannot be used here")

    def e_Attr(self, e):
        obj = self.expr(e.obj)
        if isinstance(obj, GraphRef):
            if e.name in GRAPH_ATTRS:
                return TypeCount(GRAPH_ATTRS[e.name])
            raise SemanticError(e.coord, f"the graph has no attribute '{e.name}'"
                                + suggest(e.name, GRAPH_ATTRS))
        if not isinstance(obj, ElemRef):
            raise SemanticError(e.coord, f"cannot read attribute '{e.name}' of {describe(obj)}")
        text = f"{source_text(e.obj)}.{e.name}"
        if obj.kind == "edge":
            if e.name in ("src", "dst"):
                return ElemRef(f"{obj.name}.{e.name}", "node", e.name)
            if e.name == "etype":
                return TypeIndex("etype", text, True)
            if e.name in EDGE_BUILTIN_ATTRS:
                return self.graph_scalar(EDGE_BUILTIN_ATTRS[e.name], e.coord)
        else:
            if e.name == "ntype":
                return TypeIndex("ntype", text, obj.end == "self")
            if e.name in NODE_BUILTIN_ATTRS:
                return self.at_end(self.graph_scalar(NODE_BUILTIN_ATTRS[e.name], e.coord), obj, e.coord)
        sym = self.scope.lookup(e.name)
        if isinstance(sym, PoisonSym):
            raise Poisoned()
        if not isinstance(sym, PropSym):
            raise self.no_property(e.coord, obj, e.name)
        if sym.assoc != obj.kind:
            raise self.wrong_property_kind(e.coord, obj, sym)
        if sym.poisoned:
            raise Poisoned()
        if sym.value is None:
            raise SemanticError(e.coord, f"property '{sym.name}' is read before it is assigned")
        if sym.dtype == "i64":
            # Reading the labels into the model would leak the answer it is trained to predict.
            raise SemanticError(e.coord, f"'{sym.name}' holds the labels: only gnn.loss reads them, "
                                         f"a model that reads them sees the answer")
        return self.at_end(sym.value, obj, e.coord)

    def names_in_scope(self, extra=()) -> set:
        """The names to draw a 'did you mean' from: every name in scope, and ``extra``
        (none once SUGGESTION_LIMIT errors are reported)."""
        if len(self.sink.items) >= SUGGESTION_LIMIT:
            return set()
        return self.scope.visible() | set(extra)

    def no_property(self, coord, obj: ElemRef, name):
        props = [n for n in self.names_in_scope()
                 if isinstance(self.scope.lookup(n), PropSym)
                 and self.scope.lookup(n).assoc == obj.kind]
        return SemanticError(coord, f"{obj.kind} '{obj.name}' has no property '{name}'"
                             + suggest(name, props + self.builtin_properties(obj)))

    @staticmethod
    def builtin_properties(obj: ElemRef) -> list:
        """What every node or edge has without a declaration."""
        return ["src", "dst", "etype", *EDGE_BUILTIN_ATTRS] if obj.kind == "edge" else ["ntype", *NODE_BUILTIN_ATTRS]

    def wrong_property_kind(self, coord, obj: ElemRef, sym: PropSym):
        if sym.assoc == "node":
            return SemanticError(coord, f"'{sym.name}' is a node property, but '{obj.name}' is an "
                                        f"edge; use {obj.name}.src.{sym.name} or "
                                        f"{obj.name}.dst.{sym.name}")
        return SemanticError(coord, f"'{sym.name}' is an edge property, but '{obj.name}' is a node")

    def at_end(self, value: Value, obj: ElemRef, coord):
        """A node value seen from the current rows (gathered when the rows are edges)."""
        if obj.end == "self":
            return value
        key = (value.id, obj.end)
        if key not in self._gathers:
            self._gathers[key] = self.b.emit("gather", value, loc=coord, end=obj.end)
        return self._gathers[key]

    def graph_scalar(self, kind, coord):
        if kind not in self._scalars:
            self._scalars[kind] = self.b.emit("graph_scalar", loc=coord, kind=kind)
        return self._scalars[kind]

    def e_Index(self, e):
        obj = self.expr(e.obj)
        if not (isinstance(obj, Value) and obj.assoc == "param"):
            raise SemanticError(e.coord, f"only typed weights can be indexed, not {describe(obj)}")
        idx = self.expr(e.index)
        if not isinstance(idx, TypeIndex):
            raise SemanticError(e.index.coord, f"a typed weight is sliced by e.etype or v.ntype, "
                                               f"not {describe(idx)}")
        if obj.domain is None:
            raise SemanticError(e.coord, f"weight '{obj.name}' has no type dimension; it cannot "
                                         f"be sliced by {idx.text}")
        if obj.domain != idx.domain:
            have = "an edge-type dimension (g.etypes)" if obj.domain == "etype" else \
                "a node-type dimension (g.ntypes)"
            kind = "node type" if idx.domain == "ntype" else "edge type"
            raise SemanticError(e.index.coord, f"weight '{obj.name}' has {have} but is sliced by "
                                               f"{kind} '{idx.text}'")
        if not idx.rows_are_current or (idx.domain == "etype") != (self.frame == "edge"):
            raise SemanticError(e.index.coord, f"'{idx.text}' can only slice a weight where "
                                               f"its element is the current row")
        return TypedSlice(obj, obj.domain)

    def rows(self, v, node) -> Value:
        """``v`` as a per-row value (a 2-D typed slice becomes its per-row vector)."""
        if isinstance(v, TypedSlice):
            if len(v.weight.shape) == 2:
                return self.b.emit("typed_param", v.weight, loc=node.coord)
            raise SemanticError(node.coord, f"'{source_text(node)}' is a per-type matrix; multiply a "
                                            f"value by it ({'x'} * {source_text(node)})")
        if is_rows(v):
            return v
        raise SemanticError(node.coord, f"expected a node or edge value, got {describe(v)}")

    def e_UnaryOp(self, e):
        v = self.expr(e.operand)
        if e.op == "-":
            if is_const(v) and not isinstance(v, bool):
                return -v
            return self.b.emit("neg", self.rows(v, e.operand), loc=e.coord)
        if isinstance(v, bool):
            return not v
        raise SemanticError(e.coord, f"'!' needs a boolean, got {describe(v)}")

    def e_BinOp(self, e):
        if e.op in ("&&", "||"):
            left = self.condition(e.left)
            if (e.op == "&&" and not left) or (e.op == "||" and left):
                return left
            return self.condition(e.right)
        left, right = self.expr(e.left), self.expr(e.right)
        return self.binop(e.coord, e.op, left, right, e)

    def binop(self, coord, op, left, right, node=None):
        if is_const(left) and is_const(right):
            return self.fold(coord, op, left, right)
        for v in (left, right):
            if isinstance(v, (SizeRef, TypeCount)):
                raise SemanticError(coord, f"{v.phrase} is only known when the data is loaded; "
                                           "it cannot be used in arithmetic")
        if op in ("<", ">", "<=", ">=", "==", "!=", "%"):
            raise SemanticError(coord, f"'{op}' applies to compile-time numbers, not to "
                                       f"{describe(left if not is_const(left) else right)}; "
                                       "data-dependent control flow is not supported")
        lnode = node.left if node is not None else None
        rnode = node.right if node is not None else None
        if op == "*":
            return self.multiply(coord, left, right, lnode, rnode)
        if op == "/":
            if is_const(right):
                if isinstance(right, bool) or right == 0:
                    raise SemanticError(coord, "division by zero" if right == 0 else
                                        "cannot divide by a boolean")
                return self.b.emit("scale", self.rows(left, lnode), loc=coord, c=1.0 / float(right))
            if is_const(left):
                raise SemanticError(coord, "dividing a constant by a tensor is not supported")
            return self.elementwise(coord, "div", left, right, lnode, rnode)
        # + and -
        if is_const(left) or is_const(right):
            return self.shift(coord, op, left, right, lnode, rnode)
        if op == "+":
            if is_bias(right) and not is_bias(left):
                return self.bias_add(coord, self.rows(left, lnode), right)
            if is_bias(left) and not is_bias(right):
                return self.bias_add(coord, self.rows(right, rnode), left)
        return self.elementwise(coord, "add" if op == "+" else "sub", left, right, lnode, rnode)

    def shift(self, coord, op, left, right, lnode, rnode):
        """A tensor plus or minus a constant: `x + c`, `c + x`, `x - c`, `c - x`."""
        c = check_number(coord, f"the constant added in '{op}'", right if is_const(right) else left)
        if is_const(right):
            x = self.rows(left, lnode)
            return self.b.emit("shift", x, loc=coord, c=float(c) if op == "+" else -float(c))
        x = self.rows(right, rnode)
        if op == "-":
            x = self.b.emit("neg", x, loc=coord)
        return self.b.emit("shift", x, loc=coord, c=float(c))

    def fold(self, coord, op, a, b):
        if op in ("/", "%"):
            if isinstance(a, bool) or isinstance(b, bool):
                raise SemanticError(coord, f"'{op}' needs numbers, not booleans")
            if b == 0:
                raise SemanticError(coord, "division by zero")
            if isinstance(a, int) and isinstance(b, int):
                q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)   # C truncation
                return q if op == "/" else a - b * q
            if op == "%":
                raise SemanticError(coord, "'%' needs integers")
            return a / b
        if op in ("+", "-", "*") and (isinstance(a, bool) or isinstance(b, bool)):
            raise SemanticError(coord, f"'{op}' needs numbers, not booleans")
        result = _FOLD[op](a, b)
        if isinstance(result, int) and not isinstance(result, bool) and not -2 ** 63 <= result < 2 ** 63:
            raise SemanticError(coord, "integer overflow in a compile-time expression")
        return result

    def bias_add(self, coord, x: Value, b: Value):
        if widths_conflict(x.width, b.width):
            raise SemanticError(coord, f"shape mismatch: bias '{b.name}' has width {b.width}, "
                                       f"the value has width {x.width}")
        return self.b.emit("bias_add", x, b, loc=coord)

    def multiply(self, coord, left, right, lnode, rnode):
        if is_const(left) and is_rows(right):
            left, right, lnode, rnode = right, left, rnode, lnode
        if is_const(right):
            if isinstance(right, bool):
                raise SemanticError(coord, "cannot multiply by a boolean")
            return self.b.emit("scale", self.rows(left, lnode), loc=coord, c=float(right))
        if _is_bases(right) or _is_bases(left):
            return self.basis_combination(coord, left, right)
        if (isinstance(left, TypedSlice) and len(left.weight.shape) == 3) or \
                (isinstance(left, Value) and left.assoc == "param" and len(left.shape) == 2):
            raise SemanticError(coord, "write the value on the left and the weight on the "
                                       "right: x * W")
        x = self.rows(left, lnode)
        lhs = source_text(lnode) if lnode is not None else "x"
        if isinstance(right, Value) and right.assoc == "param" and right.domain is not None:
            raise SemanticError(coord, f"weight '{right.name}' has a type dimension; slice "
                                       f"it: {right.name}[{'e.etype' if right.domain == 'etype' else 'v.ntype'}]")
        if isinstance(right, Value) and right.assoc == "param" and len(right.shape) == 2:
            if right.domain is not None:
                raise SemanticError(coord, f"weight '{right.name}' has a type dimension; slice "
                                           f"it: {right.name}[e.etype] or {right.name}[v.ntype]")
            if widths_conflict(x.width, right.shape[0]):
                raise SemanticError(coord, f"shape mismatch in {lhs} * {right.name}: the value has "
                                           f"width {x.width}, weight '{right.name}' has "
                                           f"{right.shape[0]} rows")
            return self.b.emit("linear", x, right, loc=coord)
        if isinstance(right, TypedSlice) and len(right.weight.shape) == 3:
            w = right.weight
            want = "edge" if right.domain == "etype" else "node"
            if x.assoc != want:
                raise SemanticError(coord, f"weight '{w.name}' is sliced by "
                                           f"{'edge' if want == 'edge' else 'node'} type, so its "
                                           f"input must be a{'n' if want == 'edge' else ''} {want} value, got {describe(x)}")
            blocks = next((p.blocks for p in self.program.params if p.value is w), 1)
            if widths_conflict(x.width, w.shape[1]):
                per_block = f" ({blocks} diagonal blocks of {w.shape[1] // blocks})" if blocks > 1 else ""
                raise SemanticError(coord, f"shape mismatch in {lhs} * {w.name}[...]: the value has "
                                           f"width {x.width}, weight '{w.name}' has {w.shape[1]} "
                                           f"rows per type{per_block}")
            return self.b.emit("typed_linear", x, w, loc=coord, **({"blocks": blocks} if blocks > 1 else {}))
        return self.elementwise(coord, "mul", x, right, lnode, rnode)

    def basis_combination(self, coord, a, v):
        """``A * V``: typed coefficients [g.etypes][B] times bases [B][K][M] give the typed weight
        W[t] = sum_b A[t][b] V[b] (R-GCN's basis decomposition), to be sliced: ``(A * V)[e.etype]``."""
        bases = v if _is_bases(v) else a
        if not (isinstance(a, Value) and a.assoc == "param" and a.domain is not None and len(a.shape) == 2
                and v is bases):
            raise SemanticError(coord, f"weight '{bases.name}' holds bases [B][K][M]: combine it with typed "
                                       f"coefficients on its left, (A * {bases.name})[e.etype] with A a "
                                       f"[g.etypes][B] weight")
        if widths_conflict(a.shape[1], v.shape[0]):
            raise SemanticError(coord, f"basis combination {a.name} * {v.name}: {a.shape[1]} coefficients "
                                       f"per type but {v.shape[0]} bases")
        return self.b.emit("basis_combine", a, v, loc=coord)

    def elementwise(self, coord, opcode, left, right, lnode, rnode):
        a = left if (isinstance(left, Value) and left.assoc == "param") else self.rows(left, lnode)
        b = right if (isinstance(right, Value) and right.assoc == "param") else self.rows(right, rnode)
        for v, n in ((a, lnode), (b, rnode)):
            if v.assoc == "param" and v.domain is not None:
                raise SemanticError(n.coord if n is not None else coord,
                                    f"weight '{v.name}' has a type dimension; slice it by "
                                    f"{'e.etype' if v.domain == 'etype' else 'v.ntype'}")
            if v.assoc == "param" and len(v.shape) != 1:
                raise SemanticError(n.coord if n is not None else coord,
                                    f"weight '{v.name}' is not a vector; use x * {v.name} for a "
                                    "linear transform")
        if a.assoc == "param" and b.assoc == "param":
            raise SemanticError(coord, "an operation between two weights is not supported")
        if is_rows(a) and is_rows(b) and a.assoc != b.assoc:
            raise SemanticError(coord, f"cannot combine a {a.assoc} value with an {b.assoc} value"
                                if b.assoc == "edge" else
                                f"cannot combine an {a.assoc} value with a {b.assoc} value")
        if a.width != 1 and b.width != 1 and widths_conflict(a.width, b.width):
            raise SemanticError(coord, f"shape mismatch: widths {a.width} and {b.width} differ")
        return self.b.emit(opcode, a, b, loc=coord)

    # -- calls -----------------------------------------------------------------------------
    def e_Call(self, e):
        if is_directive(e):
            raise SemanticError(e.coord, f"gnn.{e.func.name} is a statement, not a value")
        if isinstance(e.func, A.Attr):
            return self.method(e)
        name = e.func.name
        if name in AGGREGATORS:
            raise SemanticError(e.coord, f"{name} is a reduction: write "
                                         f"{name}(e in v.incoming_edges(): expression)")
        if name not in BUILTINS:
            if name in self.functions:
                raise SemanticError(e.coord, f"'{name}' has no result; call it as a statement: "
                                             f"{name}(...);")
            if self.scope.lookup(name) is not None:
                raise SemanticError(e.coord, f"'{name}' is not a function")
            raise SemanticError(e.coord, f"unknown function '{name}'" + suggest(name, [*BUILTINS, *self.functions]))
        lo, hi = BUILTINS[name]
        keywords = self._builtin_keywords(e, name)
        if not lo <= len(e.args) <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            raise SemanticError(e.coord, f"{name} takes {want} argument(s), got {len(e.args)}")
        args = [self.expr(a) for a in e.args]
        return getattr(self, "f_" + name)(e, args, **keywords)

    def _builtin_keywords(self, e, name) -> dict:
        """The keyword arguments of a builtin call: known names, given once, compile-time
        numbers (positive integers where the builtin counts: ``heads``)."""
        allowed = BUILTIN_KEYWORDS.get(name, {})
        kw = {}
        for k in e.kwargs:
            if not allowed:
                raise SemanticError(k.coord, f"{name} takes no keyword arguments")
            if k.name not in allowed:
                raise SemanticError(k.coord, f"{name} has no keyword '{k.name}'" + suggest(k.name, allowed))
            if k.name in kw:
                raise SemanticError(k.coord, f"keyword '{k.name}' is given twice")
            value, kind = self.expr(k.value), allowed[k.name]
            if kind != "count":
                value = check_number(k.value.coord, k.name, value, **kind)
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                number = isinstance(value, (int, float)) and not isinstance(value, bool)
                raise SemanticError(k.value.coord, f"{k.name} must be a positive compile-time integer, "
                                                   f"got {value if number else describe(value)}")
            kw[k.name] = value
        for need in REQUIRED_KEYWORDS.get(name, ()):
            if need not in kw:
                raise SemanticError(e.coord, f"{name} needs the keyword '{need}' (for example "
                                             f"{name}(x, {need} = 8))")
        return kw

    def _per_head_width(self, coord, what, width, heads):
        if dim_div(width, heads) is None:
            raise SemanticError(coord, f"{what}: width {width} is not a multiple of {heads} heads")

    def _const_arg(self, e, i, what, **limits):
        return float(check_number(e.args[i].coord, what, self.expr(e.args[i]), **limits))

    def f_unary(self, e, args, opcode, **attrs):
        return self.b.emit(opcode, self.rows(args[0], e.args[0]), loc=e.coord, **attrs)

    def f_relu(self, e, args):
        return self.f_unary(e, args, "relu")

    def f_sigmoid(self, e, args):
        return self.f_unary(e, args, "sigmoid")

    def f_tanh(self, e, args):
        return self.f_unary(e, args, "tanh")

    def f_exp(self, e, args):
        return self.f_unary(e, args, "exp")

    def f_elu(self, e, args):
        alpha = self._const_arg(e, 1, "elu alpha", lo=0.0) if len(args) > 1 else 1.0
        return self.f_unary(e, args, "elu", alpha=alpha)

    def f_leaky_relu(self, e, args):
        alpha = self._const_arg(e, 1, "leaky_relu slope", lo=0.0) if len(args) > 1 else 0.01
        return self.f_unary(e, args, "leaky_relu", alpha=alpha)

    def f_sqrt(self, e, args):
        return self.f_unary(e, args, "sqrt")

    def f_rsqrt(self, e, args):
        return self.f_unary(e, args, "rsqrt")

    def f_log(self, e, args):
        return self.f_unary(e, args, "log")

    def f_abs(self, e, args):
        return self.f_unary(e, args, "abs")

    def f_gelu(self, e, args):
        return self.f_unary(e, args, "gelu")

    def f_softplus(self, e, args):
        return self.f_unary(e, args, "softplus")

    def f_softmax(self, e, args):
        return self.f_unary(e, args, "softmax")

    def f_log_softmax(self, e, args):
        return self.f_unary(e, args, "log_softmax")

    def f_pow(self, e, args):
        c = self._const_arg(e, 1, "pow exponent")
        return self.f_unary(e, args, "pow", c=c)

    def f_dropout(self, e, args):
        p = self._const_arg(e, 1, "dropout rate", lo=0.0, hi=1.0, hi_open=True)
        x = self.rows(args[0], e.args[0])
        return x if p == 0 else self.b.emit("dropout", x, loc=e.coord, p=p)

    def f_edge_softmax(self, e, args):
        s = self.rows(args[0], e.args[0])
        if s.assoc != "edge":
            raise SemanticError(e.args[0].coord, f"edge_softmax needs an edge value, got "
                                                 f"{describe(s)}")
        return self.b.emit("edge_softmax", s, loc=e.coord)

    def _value_or_vector(self, fn: str, v, node):
        """An operand that is per-row values or a vector weight shared by every row."""
        if not (isinstance(v, Value) and v.assoc == "param"):
            return self.rows(v, node)
        if len(v.shape) != 1 or v.domain is not None:
            raise SemanticError(node.coord, f"{fn} takes a value or a vector weight, not the matrix '{v.name}'")
        return v

    @staticmethod
    def _same_rows(coord, fn: str, a, b):
        if a.assoc != "param" and b.assoc != "param" and a.assoc != b.assoc:
            raise SemanticError(coord, f"{fn}: cannot combine {describe(a)} with {describe(b)}")

    def f_dot(self, e, args, heads=1):
        a = self.rows(args[0], e.args[0])
        b = self._value_or_vector("dot", args[1], e.args[1])
        self._same_rows(e.coord, "dot", a, b)
        if widths_conflict(a.width, b.width):
            raise SemanticError(e.coord, f"shape mismatch in dot: widths {a.width} and {b.width} differ")
        if heads == 1:
            return self.b.emit("dot", a, b, loc=e.coord)
        self._per_head_width(e.coord, "dot", a.width, heads)
        return self.b.emit("dot", a, b, loc=e.coord, heads=heads)

    def f_scale_heads(self, e, args):
        """``scale_heads(x, s)``: each of the ``width(s)`` heads of ``x`` times its entry of ``s``."""
        s = self.rows(args[1], e.args[1])
        x = self._value_or_vector("scale_heads", args[0], e.args[0])
        self._same_rows(e.coord, "scale_heads", x, s)
        if not isinstance(s.width, int):
            raise SemanticError(e.args[1].coord, f"scale_heads needs a fixed number of heads: the second "
                                                 f"argument has width {s.width}")
        self._per_head_width(e.coord, "scale_heads", x.width, s.width)
        return self.b.emit("head_mul", x, s, loc=e.coord, heads=s.width)

    def f_layer_norm(self, e, args, eps=1e-5):
        """Each row standardised over its features (no affine part: multiply and add weights)."""
        return self.b.emit("layer_standardize", self.rows(args[0], e.args[0]), loc=e.coord, eps=float(eps))

    def f_batch_norm(self, e, args, eps=1e-5, momentum=0.1):
        """Each feature standardised over the nodes, with running statistics for evaluation
        (untrainable weights of their own, saved in checkpoints)."""
        x = self.rows(args[0], e.args[0])
        if x.assoc != "node":
            raise SemanticError(e.args[0].coord, f"batch_norm standardises over the nodes: it needs a node "
                                                 f"value, got {describe(x)}")
        self.batch_norms += 1
        mean, var = running_statistics(self.program, f"batch_norm{self.batch_norms}", x.width)
        return self.b.emit("batch_standardize", x, mean, var, loc=e.coord, eps=float(eps), momentum=float(momentum))

    def f_mean_heads(self, e, args, heads):
        x = self.rows(args[0], e.args[0])
        self._per_head_width(e.coord, "mean_heads", x.width, heads)
        return self.b.emit("head_mean", x, loc=e.coord, heads=heads)

    def f_concat(self, e, args):
        parts = [self.rows(v, n) for v, n in zip(args, e.args)]
        for p, n in zip(parts[1:], e.args[1:]):
            if p.assoc != parts[0].assoc:
                raise SemanticError(n.coord, f"concat: cannot combine {describe(parts[0])} with "
                                             f"{describe(p)}")
        return self.b.emit("concat", *parts, loc=e.coord)

    def method(self, e):
        obj = self.expr(e.func.obj)
        name = e.func.name
        if e.kwargs:
            raise SemanticError(e.kwargs[0].coord, f"{name} takes no keyword arguments")
        if isinstance(obj, GraphRef):
            if name not in GRAPH_METHODS:
                raise SemanticError(e.coord, f"unknown graph method '{name}'"
                                    + suggest(name, GRAPH_METHODS))
            want = 1 if name == "neighbors" else 0
            if len(e.args) != want:
                raise SemanticError(e.coord, f"g.{name} takes {want} argument(s), got {len(e.args)}")
            if name == "neighbors":
                anchor = self.expr(e.args[0])
                if not isinstance(anchor, ElemRef) or anchor.kind != "node":
                    raise SemanticError(e.args[0].coord, f"g.neighbors takes a node, not "
                                                         f"{describe(anchor)}")
                return Iteration("neighbors", anchor)
            return Iteration(name)
        if isinstance(obj, ElemRef) and obj.kind == "node":
            if name not in NODE_METHODS:
                raise SemanticError(e.coord, f"unknown node method '{name}'"
                                    + suggest(name, NODE_METHODS))
            if e.args:
                raise SemanticError(e.coord, f"{name} takes no arguments")
            return Iteration("incoming" if name == "incoming_edges" else "outgoing", obj)
        raise SemanticError(e.coord, f"{describe(obj)} has no method '{name}'")

    def e_Reduce(self, e):
        if e.kind not in AGGREGATORS:
            raise SemanticError(e.coord, f"unknown aggregator '{e.kind}'" + suggest(e.kind, AGGREGATORS))
        if self.frame != "node":
            raise SemanticError(e.coord, "a reduction must be inside forall (v in g.nodes()) "
                                         "and cannot be nested")
        dom = self.expr(e.domain)
        if not isinstance(dom, Iteration) or dom.what not in ("incoming", "outgoing", "neighbors"):
            raise SemanticError(e.domain.coord, f"a reduction runs over v.incoming_edges(), "
                                                f"v.outgoing_edges() or g.neighbors(v), not "
                                                f"{describe(dom)}")
        anchor = dom.anchor
        if anchor.end != "self":
            raise SemanticError(e.domain.coord, f"a reduction runs over the edges of the current "
                                                f"node, not of '{anchor.name}'")
        end = "src" if dom.what == "outgoing" else "dst"
        other = "dst" if end == "src" else "src"
        scope = Scope(self.scope)
        scope.names[anchor.name] = ElemSym(anchor.name, e.coord, kind="node", end=end)
        var = (ElemSym(e.var, e.var_coord, kind="edge", end="self") if dom.what != "neighbors"
               else ElemSym(e.var, e.var_coord, kind="node", end=other))
        scope.declare(var)
        saved_scope, self.scope, self.frame = self.scope, scope, "edge"
        try:
            body = self.expr(e.body)
            if not is_rows(body) and not isinstance(body, TypedSlice):
                raise SemanticError(e.body.coord, f"the body of {e.kind} must be a per-edge value, "
                                                  f"got {describe(body)}")
            m = self.rows(body, e.body)
        finally:
            self.scope, self.frame = saved_scope, "node"
        return self.b.emit("scatter", m, loc=e.coord, reduce=AGGREGATORS[e.kind], end=end)

    # == widths =============================================================================
    def width(self, node):
        v = self.expr(node)
        if isinstance(v, SizeRef):
            return v.ir_name
        if isinstance(v, TypeCount):
            raise SemanticError(node.coord, f"{v.phrase} can only be the first dimension of a weight")
        if isinstance(v, bool) or not isinstance(v, int):
            raise SemanticError(node.coord, f"a width must be an integer or a size symbol, "
                                            f"got {describe(v)}")
        if v <= 0:
            raise SemanticError(node.coord, f"a width must be positive, got {v}")
        if v > 1 << 24:
            raise SemanticError(node.coord, f"width {v} is too large (limit {1 << 24})")
        return v
