"""The backend-neutral intermediate representation.

An IR program is a straight-line list of SSA operations over *associated tensors*:

* ``node``  tensors have one row per node:  shape ``[N, *feature]``
* ``edge``  tensors have one row per edge:  shape ``[E, *feature]``
* ``param`` tensors are trainable weights (``shape`` is the whole shape; a weight with a
  type dimension carries ``domain`` = ``"etype"`` or ``"ntype"`` and its first axis counts types)
* ``scalar`` values are single numbers (the loss)

The IR is *layout free*: it never says CSR or CSC, tile widths or dense vs sparse features.
Those are decisions of the backend lowering (see docs/ir.md).  It also never knows model
names: ``gnn.forwardPass(l, "GCN", "Sum")`` has already been expanded into the ops below.

Feature widths may be symbolic (``"F"``, ``"C"``) until bound to a dataset; see
:func:`Program.bind`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from .errors import UserError

Dim = Union[int, str]          # a concrete width or a size symbol bound at load time

ASSOCIATIONS = ("node", "edge", "param", "scalar")
TYPE_DOMAINS = ("etype", "ntype")
SIZE_ATTRS = ("types", "start", "stop", "classes")   # op attributes that may hold a size symbol


class IRError(UserError):
    """An inconsistency in an IR program; ``loc`` points into the .mp source when known."""

    def __init__(self, message: str, loc: Any = None):
        super().__init__(message)
        self.message = message
        self.loc = loc


@dataclass(eq=False)
class Value:
    """An SSA value.  ``shape`` excludes the row axis for node/edge values."""
    id: int
    assoc: str
    shape: tuple
    dtype: str = "f32"            # f32 | i64 | bool
    name: str = ""                # readable hint, sanitised before reaching any code
    domain: Optional[str] = None  # for params: "etype" / "ntype" type dimension

    @property
    def width(self) -> Dim:
        """Last feature dimension (1 for a scalar-per-row value)."""
        return self.shape[-1] if self.shape else 1

    def __repr__(self) -> str:
        return f"%{self.id}"

    def describe(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        dom = f"@{self.domain}" if self.domain else ""
        return f"{self.assoc}[{dims}]{dom}"


@dataclass(eq=False)
class Op:
    opcode: str
    inputs: list
    output: Optional[Value]
    attrs: dict = field(default_factory=dict)
    loc: Any = None               # morphgen.frontend Coord of the .mp construct that produced it

    def __repr__(self) -> str:
        args = ", ".join(repr(v) for v in self.inputs)
        attrs = "".join(f", {k}={v!r}" for k, v in sorted(self.attrs.items()))
        lhs = f"{self.output!r}: {self.output.describe()} = " if self.output is not None else ""
        return f"{lhs}{self.opcode}({args}{attrs})"


@dataclass
class Param:
    """A trainable weight.  ``value`` is the IR value that names it in ops."""
    name: str
    value: Value
    init: str = "glorot"          # glorot | zeros | ones | normal | uniform
    weight_decay: bool = True     # whether the optimizer's decay applies to it


@dataclass
class Optimizer:
    kind: str = "adam"            # adam | adamw | sgd
    lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0


@dataclass
class Program:
    """One lowered training program: inputs, params, forward, loss, backward, optimizer."""
    name: str
    inputs: dict = field(default_factory=dict)      # role -> Value: features, labels
    params: list = field(default_factory=list)      # [Param]
    invariant: list = field(default_factory=list)   # [Op]  of the inputs and the graph only: run once at load
    forward: list = field(default_factory=list)     # [Op]  (ends with the loss)
    loss: Optional[Value] = None
    logits: Optional[Value] = None                  # what evaluate() takes argmax of
    backward: list = field(default_factory=list)    # [Op]  filled by morphgen.autodiff
    grads: dict = field(default_factory=dict)       # param name -> gradient Value
    optimizer: Optimizer = field(default_factory=Optimizer)
    epochs: int = 200
    seed: int = 0
    sizes: dict = field(default_factory=dict)       # size symbol -> int once bound
    featureless: bool = False                       # the features input is the identity
    feature_normalization: Optional[str] = None     # "row": features scaled to unit row sums at load
    fusion: list = field(default_factory=list)      # [FusionGroup] from morphgen.passes.fusion
    fingerprint: str = ""                           # of the program as written (source_fingerprint)
    _next_id: int = 0

    # -- construction -------------------------------------------------------------------
    def new_value(self, assoc: str, shape: tuple, dtype: str = "f32", name: str = "",
                  domain: Optional[str] = None) -> Value:
        assert assoc in ASSOCIATIONS, assoc
        v = Value(self._next_id, assoc, tuple(shape), dtype, name, domain)
        self._next_id += 1
        return v

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    # -- inspection ---------------------------------------------------------------------
    def all_ops(self) -> list:
        """Invariant, forward then backward ops: the order in which the first training step runs them."""
        return list(self.invariant) + list(self.forward) + list(self.backward)

    def all_values(self) -> list:
        """Every distinct value the program mentions (inputs, params, op operands, grads)."""
        seen, out = set(), []

        def visit(v):
            if v is not None and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
        for v in self.inputs.values():
            visit(v)
        for p in self.params:
            visit(p.value)
        for op in self.all_ops():
            for v in op.inputs:
                visit(v)
            visit(op.output)
        for v in self.grads.values():
            visit(v)
        visit(self.loss)
        visit(self.logits)
        return out

    def uses(self, ops=None) -> dict:
        """value id -> list of ops (in order) that read it."""
        table: dict = {}
        for op in (self.all_ops() if ops is None else ops):
            for v in op.inputs:
                table.setdefault(v.id, []).append(op)
        return table

    def producer(self, ops=None) -> dict:
        """value id -> the op that defines it."""
        return {op.output.id: op for op in (self.all_ops() if ops is None else ops)
                if op.output is not None}

    def symbols(self) -> set:
        """Size symbols still unbound anywhere in the program."""
        found = set()
        for v in self.all_values():
            for d in v.shape:
                if isinstance(d, str):
                    found |= set(_symbol_terms(d))
        for op in self.all_ops():
            for key in SIZE_ATTRS:
                if isinstance(op.attrs.get(key), str):
                    found |= set(_symbol_terms(op.attrs[key]))
        return found

    # -- binding and validation -----------------------------------------------------------
    def bind(self, sizes: dict) -> "Program":
        """Resolve symbolic dims (``"F"``, ``"C"``, ``"etypes"``, ``"ntypes"``, sums like
        ``"F+16"``) to the integers in ``sizes``, everywhere, then :meth:`validate`.

        ``g.etypes`` / ``g.ntypes`` are accepted as spellings of ``etypes`` / ``ntypes``.
        Raises :class:`IRError` naming the symbol if one stays unbound, if a size is not a
        positive integer, or if a bound size contradicts an earlier binding or a shape rule.
        """
        table = dict(self.sizes)
        for key, val in sizes.items():
            name = _canonical_symbol(str(key))
            if isinstance(val, bool) or not isinstance(val, (int,)) and not hasattr(val, "__index__"):
                raise IRError(f"size '{key}': expected a positive integer, got {val!r}")
            val = int(val)
            if val <= 0:
                raise IRError(f"size '{key}': expected a positive integer, got {val}")
            if name in table and table[name] != val:
                raise IRError(f"size '{key}': already bound to {table[name]}, cannot rebind to {val}")
            table[name] = val
        missing = sorted(s for s in self.symbols() if _canonical_symbol(s) not in table)
        if missing:
            raise IRError(f"unbound size symbol(s) {', '.join(repr(m) for m in missing)} in program "
                          f"'{self.name}'; pass them to Program.bind (have: {sorted(table)})")
        for v in self.all_values():
            v.shape = tuple(_resolve(d, table) for d in v.shape)
        for op in self.all_ops():
            for key in SIZE_ATTRS:
                if isinstance(op.attrs.get(key), str):
                    op.attrs[key] = _resolve(op.attrs[key], table)
        self.sizes = table
        self.validate()
        return self

    def validate(self) -> None:
        """Re-run shape inference over invariant, forward and backward; check SSA order and grads.

        Raises :class:`IRError` (with the op's ``loc``) on the first inconsistency.
        """
        from .ir_ops import infer_full      # local: ir_ops imports this module
        defined = {v.id for v in self.inputs.values()} | {p.value.id for p in self.params}
        for section, ops in (("invariant", self.invariant), ("forward", self.forward), ("backward", self.backward)):
            for i, op in enumerate(ops):
                for v in op.inputs:
                    if v.id not in defined:
                        raise IRError(f"{section} op {i} ({op.opcode}) reads {v!r} before it is "
                                      f"defined", op.loc)
                assoc, shape, dtype, domain = infer_full(op.opcode, list(op.inputs), op.attrs, op.loc)
                out = op.output
                if out is None:
                    continue
                if (out.assoc != assoc or not _shapes_agree(out.shape, tuple(shape))
                        or (out.assoc == "param" and out.domain != domain)):
                    raise IRError(f"{section} op {i} ({op.opcode}): result recorded as "
                                  f"{out.describe()} but its inputs give {assoc}"
                                  f"[{','.join(map(str, shape))}]", op.loc)
                if out.id in defined:
                    raise IRError(f"{section} op {i} ({op.opcode}) redefines {out!r}", op.loc)
                defined.add(out.id)
        for name, g in self.grads.items():
            p = self.param(name)
            if g.id not in defined:
                raise IRError(f"gradient of '{name}' ({g!r}) is never computed")
            if g.assoc != "param" or not _shapes_agree(g.shape, p.value.shape):
                raise IRError(f"gradient of '{name}' is {g.describe()}, parameter is "
                              f"{p.value.describe()}")

    def source_fingerprint(self) -> str:
        """A hash of the parameters and forward operations, taken before any pass runs: the
        same for every backend and every dataset, different for a program that computes
        something else (checkpoints carry it)."""
        import hashlib
        text = "\n".join([f"{p.name} {p.value.describe()} {p.init}" for p in self.params]
                         + [repr(op) for op in self.forward])
        return hashlib.sha256(text.encode()).hexdigest()

    def dump(self) -> str:
        """Readable text of the whole program (``morphgen compile --emit ir``)."""
        out = [f"program {self.name}"]
        for role, v in self.inputs.items():
            ident = " (identity: featureless)" if role == "features" and self.featureless else ""
            out.append(f"  input {role} {v!r}: {v.describe()}{ident}")
        for p in self.params:
            wd = "" if p.weight_decay else " no-decay"
            out.append(f"  param {p.name} {p.value!r}: {p.value.describe()} init={p.init}{wd}")
        if self.invariant:
            out.append("invariant (computed once, when the data is bound):")
            out += [f"  {op!r}" for op in self.invariant]
        out.append("forward:")
        out += [f"  {op!r}" for op in self.forward]
        out.append(f"  loss = {self.loss!r}")
        if self.backward:
            out.append("backward:")
            out += [f"  {op!r}" for op in self.backward]
            for name, g in self.grads.items():
                out.append(f"  grad {name} = {g!r}")
        if self.fusion:
            out.append("fusion:")
            out += [f"  {group!r}" for group in self.fusion]
        o = self.optimizer
        out.append(f"optimizer {o.kind} lr={o.lr} weight_decay={o.weight_decay} "
                   f"betas=({o.beta1}, {o.beta2}) eps={o.eps} momentum={o.momentum}")
        if self.feature_normalization:
            out.append(f"features normalised: {self.feature_normalization}")
        out.append(f"epochs {self.epochs}")
        return "\n".join(out)


def _canonical_symbol(name: str) -> str:
    return name[2:] if name.startswith("g.") else name


_TERM = re.compile(r"\s*([+-])?\s*([A-Za-z_][A-Za-z0-9_.]*|\d+)\s*")


def parse_dim(dim) -> tuple:
    """``(constant, {symbol: coefficient})`` of a dim such as ``16``, ``"F"`` or ``"F+16-C"``."""
    if not isinstance(dim, str):
        return int(dim), {}
    const, coefs, pos = 0, {}, 0
    while pos < len(dim):
        m = _TERM.match(dim, pos)
        if m is None or m.end() == pos:
            raise IRError(f"malformed size expression {dim!r}")
        sign = -1 if m.group(1) == "-" else 1
        term = m.group(2)
        if term.isdigit():
            const += sign * int(term)
        else:
            key = _canonical_symbol(term)
            coefs[key] = coefs.get(key, 0) + sign
        pos = m.end()
    return const, {k: c for k, c in coefs.items() if c}


def format_dim(const: int, coefs: dict):
    """Inverse of :func:`parse_dim`: an int when no symbol is left."""
    if not coefs:
        return const
    parts = []
    for k, c in sorted(coefs.items()):
        parts += [("+" if c > 0 else "-") + k] * abs(c)     # "F+F" rather than "2*F": one grammar
    text = "".join(parts)
    if const:
        text += f"{const:+d}"
    return text[1:] if text.startswith("+") else text


def dim_add(a, b):
    ca, sa = parse_dim(a)
    cb, sb = parse_dim(b)
    coefs = dict(sa)
    for k, c in sb.items():
        coefs[k] = coefs.get(k, 0) + c
    return format_dim(ca + cb, {k: c for k, c in coefs.items() if c})


def dim_sub(a, b):
    cb, sb = parse_dim(b)
    return dim_add(a, format_dim(-cb, {k: -c for k, c in sb.items()}) if sb else -cb)


def _symbol_terms(dim: str) -> list:
    return list(parse_dim(dim)[1])


def _resolve(dim, table: dict):
    """An int for ``dim`` (an int, a symbol, or a sum/difference of symbols and ints)."""
    if not isinstance(dim, str):
        return dim
    const, coefs = parse_dim(dim)
    for key, c in coefs.items():
        if key not in table:
            raise IRError(f"unbound size symbol '{key}'")
        const += c * table[key]
    return const


def _shapes_agree(a: tuple, b: tuple) -> bool:
    if len(a) != len(b):
        return False
    return all(x == y or isinstance(x, str) or isinstance(y, str) for x, y in zip(a, b))
