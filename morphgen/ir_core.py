"""The IR's building blocks: values, ops, parameters, the optimizer record, and symbolic
dimensions (``"F"``, ``"C+16"``).  Shape inference (ir_ops) and the Program (ir) build on these;
this module depends on neither, so the three import in one direction only."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from .errors import InternalError, UserError

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


class IRBug(InternalError):
    """The IR broke one of its own invariants (values read before they are defined, a recorded
    shape its inputs contradict, gradients that do not stack back): a bug in a pass or in
    autodiff, not in the user's program, so the command line reports an internal error (exit
    status 3) rather than a diagnostic the user would try to fix.  ``loc`` points at the source
    op whose lowering went wrong, when known."""

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
    weight_decay: Union[bool, float] = True   # True: the optimizer's decay; False: none; a number: its own
    trainable: bool = True        # False: state the forward updates (batch norm's running
                                  # statistics), saved with the weights but never differentiated
    blocks: int = 1               # a typed [T, B*D, M] weight of B diagonal D x M blocks per type
                                  # (declared [g.etypes][B][D][M]); its products carry blocks=B


    def decay(self, optimizer: "Optimizer") -> float:
        """The weight decay this weight's update applies."""
        if not self.trainable or self.weight_decay is False:
            return 0.0
        if self.weight_decay is not True:
            return float(self.weight_decay)
        vector = len(self.value.shape) == 1 or (len(self.value.shape) == 2 and self.value.domain is not None)
        return 0.0 if vector and not optimizer.decay_vectors else float(optimizer.weight_decay)


@dataclass
class Optimizer:
    kind: str = "adam"            # adam | adamw | sgd
    lr: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0
    decay_vectors: bool = True    # False: biases and other vector weights are not decayed


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


def dim_mul(dim, k: int):
    """``dim`` times the positive integer ``k`` (``"C"`` * 3 -> ``"C+C+C"``)."""
    const, coefs = parse_dim(dim)
    return format_dim(const * k, {s: c * k for s, c in coefs.items()})


def dim_div(dim, k: int):
    """``dim`` divided by the positive integer ``k``, or None where it does not divide exactly."""
    const, coefs = parse_dim(dim)
    if const % k or any(c % k for c in coefs.values()):
        return None
    return format_dim(const // k, {s: c // k for s, c in coefs.items()})


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
