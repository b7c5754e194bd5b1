"""Functions calling functions: a call statement is inlined at compile time.

A file holds any number of functions: one program (its parameters are the graph, the features
and the labels), the function no other one calls, and the helpers it calls as statements:

    function layer(Graph g, propNode<float[K]> in, propNode<float[M]> out, weight<float[K][M]> W) {
        forall (v in g.nodes()) { v.out = relu(Sum(u in g.neighbors(v): u.in) * W); }
    }
    ... layer(g, x, h, W1);  layer(g, h, out, W2); ...

Properties and weights are passed by reference (the helper's name is another name for the
caller's property or weight: assigning ``v.out`` assigns the caller's ``h``); ``int``, ``float``
and ``bool`` parameters take compile-time values.  Width names in a helper's parameter types
(``K``, ``M``) are bound by each call to the argument's width, so one helper serves every layer.
Functions may be defined in any order; recursion is an error.  Helpers declare no weights and
call no ``gnn`` directive: the program owns its weights and its training loop.
"""
from __future__ import annotations

from ..grammar import ast as A
from .sema import (BUILTINS, DIRECTIVES, ConstSym, GraphSym, PoisonSym, Poisoned, PropSym, Scope,
                   SemanticError, SizeSym, WeightSym, describe, identifier_problem)
from .values import TypeCount

_SCALAR_TYPES = ("int", "float", "bool")
_ELEM_DTYPE = {"float": "f32", "int": "i64"}


class CallLowering:
    """Mixin of the Lowerer: the function table and the inlining of call statements."""

    def collect_functions(self, module: A.Module):
        """Register every function; return the program: the one function no other one calls
        (None, with an error, when there is not exactly one)."""
        self.functions: dict = {}
        self.calling: list = []           # the helpers being inlined, innermost last
        for fn in module.functions:
            if fn.name in BUILTINS or fn.name in DIRECTIVES:
                self.sink.error(fn.coord, f"'{fn.name}' is a built-in function; choose another name")
                continue
            problem = identifier_problem(fn.name)
            if problem:                   # reported; the function still counts (no cascade)
                self.sink.error(fn.coord, problem)
            if fn.name in self.functions:
                first = self.functions[fn.name].coord
                self.sink.error(fn.coord, f"function '{fn.name}' is already defined "
                                          f"(first defined at line {first.line})")
            else:
                self.functions[fn.name] = fn
        calls = {fn.name: {n.func.name for n in A.walk(fn.body) if self.is_function_call(n)}
                 for fn in self.functions.values()}
        called = set().union(*calls.values())
        roots = [fn for fn in self.functions.values() if fn.name not in called]
        if not roots:
            self.sink.error(module.functions[0].coord, "every function is called by another one: "
                                                       "the program is the function no other one calls")
            return None
        program = roots[-1]
        reached, frontier = {program.name}, [program.name]
        while frontier:
            for name in calls[frontier.pop()] - reached:
                reached.add(name)
                frontier.append(name)
        for fn in self.functions.values():      # a second program, or a helper nothing reaches
            if fn.name not in reached:
                self.sink.error(fn.coord, f"function '{fn.name}' is never called: a file holds one "
                                          f"program ('{program.name}', the function no other one calls) "
                                          f"and the functions it calls")
        return program

    @property
    def in_helper(self) -> bool:
        return bool(self.calling)

    def is_function_call(self, e) -> bool:
        return isinstance(e, A.Call) and isinstance(e.func, A.Name) and e.func.name in self.functions

    def call_function(self, e: A.Call):
        fn = self.functions[e.func.name]
        saved = self.scope
        try:
            self._check_call(fn, e)
            values = [self._argument(fn, p, a) for p, a in zip(fn.params, e.args)]
            self.scope = Scope()
            for p, a, value in zip(fn.params, e.args, values):
                self._bind(fn, p, a, value)
        except (SemanticError, Poisoned):
            self.scope = saved
            self._poison_arguments(e)
            raise
        self.calling.append(fn)
        self.sink.context.append(f"in '{fn.name}' called at line {e.coord.line}")
        try:
            self.block(fn.body.stmts, self.scope)
        finally:
            self.sink.context.pop()
            self.calling.pop()
            self.scope = saved

    def _check_call(self, fn: A.Function, e: A.Call):
        if fn in self.calling:
            chain = " -> ".join(f.name for f in self.calling[self.calling.index(fn):] + [fn])
            raise SemanticError(e.coord, f"recursive call ({chain}): functions are inlined at "
                                         f"compile time, so a function cannot call itself")
        if self.frame is not None:
            raise SemanticError(e.coord, f"'{fn.name}' is called inside forall; call functions "
                                         f"outside forall (their bodies hold the forall loops)")
        if e.kwargs:
            raise SemanticError(e.kwargs[0].coord, f"'{fn.name}' takes its arguments by position")
        if len(e.args) != len(fn.params):
            raise SemanticError(e.coord, f"'{fn.name}' takes {len(fn.params)} argument(s), "
                                         f"got {len(e.args)}")

    def _poison_arguments(self, e: A.Call):
        """A call that cannot be made leaves the properties it was given silent: the helper
        might have assigned them, and complaints about their values would only echo this error."""
        for arg in e.args:
            sym = self.scope.lookup(arg.name) if isinstance(arg, A.Name) else None
            if isinstance(sym, PropSym):
                sym.poisoned = True

    # == parameters =========================================================================
    def _argument(self, fn, p: A.Param, arg):
        """The caller's value for parameter ``p``: a symbol for Graph, property and weight
        parameters (passed by reference), a compile-time value for scalars."""
        kind = p.type.kind
        if kind in _SCALAR_TYPES:
            value = self.expr(arg)
            if not isinstance(value, (bool, int, float)):
                raise SemanticError(arg.coord, f"argument '{p.name}' of '{fn.name}' is {describe(value)}, "
                                               f"expected a compile-time {kind}")
            return self.coerce(arg.coord, kind, value, p.name)
        if not isinstance(arg, A.Name):
            raise SemanticError(arg.coord, f"argument '{p.name}' of '{fn.name}' must name a "
                                           f"{'graph' if kind == 'Graph' else kind}")
        sym = self.scope.lookup(arg.name)
        if sym is None:
            self.expr(arg)                     # reports the undeclared name with a suggestion
        if isinstance(sym, PoisonSym):
            raise Poisoned()
        want = {"Graph": GraphSym, "propNode": PropSym, "propEdge": PropSym, "weight": WeightSym}[kind]
        if not isinstance(sym, want) or kind in ("propNode", "propEdge") and \
                sym.assoc != ("node" if kind == "propNode" else "edge"):
            raise SemanticError(arg.coord, f"argument '{p.name}' of '{fn.name}' must be a {kind}, "
                                           f"but '{arg.name}' is {self._kind_phrase(sym)}")
        return sym

    @staticmethod
    def _kind_phrase(sym) -> str:
        if isinstance(sym, PropSym):
            return f"a prop{sym.assoc.capitalize()}"
        if isinstance(sym, WeightSym):
            return "a weight"
        if isinstance(sym, GraphSym):
            return "the graph"
        return "a compile-time value" if isinstance(sym, ConstSym) else "not a property or weight"

    def _bind(self, fn, p: A.Param, arg, value):
        """Declare parameter ``p`` in the helper's scope, binding its width names."""
        problem = identifier_problem(p.name)
        if problem:
            raise SemanticError(p.coord, problem)
        t = p.type
        if t.kind in _SCALAR_TYPES:
            self.scope.declare(ConstSym(p.name, p.coord, type=t.kind, value=value))
            return
        if t.kind == "Graph":
            self.scope.declare(GraphSym(p.name, p.coord))
            return
        if t.kind == "weight":
            shape, domain = value.value.shape, value.value.domain
            if domain is not None:
                shape = shape[1:]
        else:
            if _ELEM_DTYPE.get(t.elem) != value.dtype:
                raise SemanticError(arg.coord, f"argument '{p.name}' of '{fn.name}': '{arg.name}' holds "
                                               f"{'int' if value.dtype == 'i64' else 'float'} values, the "
                                               f"parameter {t.elem} values")
            # a labels property is one class id per row; its type's width is the class count
            width = (self.labels_classes or "C") if value.dtype == "i64" else value.width
            shape, domain = (width,), None
        dims = list(t.dims)
        if dims and t.kind == "weight":
            first = dims[0]
            typed = isinstance(first, A.Attr) and isinstance(self.expr(first), TypeCount)
            if typed != (domain is not None) or typed and self.expr(first).domain != domain:
                want = f"g.{domain}s" if domain else "no type dimension"
                raise SemanticError(first.coord if typed else arg.coord,
                                    f"argument '{p.name}' of '{fn.name}': weight '{arg.name}' has {want}")
            if typed:
                dims = dims[1:]
        if len(dims) != len(shape) and not (not dims and shape == (1,)):
            raise SemanticError(arg.coord, f"argument '{p.name}' of '{fn.name}': '{arg.name}' has "
                                           f"{len(shape)} dimension(s), the parameter {len(dims)}")
        for dim, actual in zip(dims, shape):
            self._unify(fn, p, arg, dim, actual)
        self.scope.names[p.name] = value        # by reference: the caller's own symbol

    def _unify(self, fn, p, arg, dim, actual):
        """A width in a parameter type: a new name binds to ``actual``; anything else must equal it."""
        if isinstance(dim, A.Name) and self.scope.lookup(dim.name) is None:
            if isinstance(actual, int):
                self.scope.declare(ConstSym(dim.name, dim.coord, type="int", value=actual))
            else:
                self.scope.declare(SizeSym(dim.name, dim.coord, ir_name=actual))
            return
        expected = self.width(dim)
        if expected != actual:
            need = f"{dim.name} = {expected}" if isinstance(dim, A.Name) and dim.name != str(expected) \
                else str(expected)
            raise SemanticError(arg.coord, f"argument '{p.name}' of '{fn.name}': '{arg.name}' has width "
                                           f"{actual} where the parameter needs {need}")
